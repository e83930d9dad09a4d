"""Stage 5, perf: `verl-p40 bench` (a few timed steps on random weights) and the P40 projection from them."""
