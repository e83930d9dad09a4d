"""The decoder's row rules (patches/p40_decode.py), without torch: the plan names them in its notes on a host that has
no torch (`verl-p40 config`), the decoder runs by them in the workers."""

STOP_CHECK = 16  # tokens between two checks (a host sync) of whether every row has ended
COMPACT_AT = 0.75  # p40_decode_compact: ended rows leave the batch once at most this share of it is going on
