"""Helpers the bench scripts share (imported as `lib.NAME`: bench/ is on the path of every bench script): running
the product's CLI on the lent GPU machine under the Pascal mask (`device_runs`), what is staged to it in pieces
(`chunks`), the real-weights runs' state, model and waiting (`real_runs`), `verl-p40 train` under the monitor's sampler
(`ppo_runner`), the learning bench's modes (`learning_recipe`, `learning_session`, `learning_heldout`,
`learning_report`: bench/learning_run.py is their command line). No script here is run."""
