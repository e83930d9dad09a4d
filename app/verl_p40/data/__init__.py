"""Stage 1, data: GSM8K to verl's RL parquet (`gsm8k`), the prep folder's manifest (`manifest`), the checks of a
prepared folder (`folder_checks`), prompt lengths in tokens (`token_stats`), `verl-p40 prep` (`prep`)."""
