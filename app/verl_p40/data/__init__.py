"""Stage 1, data: GSM8K to verl's RL parquet (`gsm8k`), the prep folder's manifest (`manifest`), `verl-p40 prep`."""
