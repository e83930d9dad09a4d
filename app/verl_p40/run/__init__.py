"""Stage 3, run: a RunPlan's trainer process (`trainer`), the Ray cluster of several hosts (`cluster`), the
trainer's one-line diagnosis (`failures`) and its console metrics read back (`trainer_log`)."""
