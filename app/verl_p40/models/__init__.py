"""Stage 1, models: the model folder fetched and verified (`fetch`), verl's checkpoints found, merged and folded
(`checkpoints`), a trained model written to take home (`export`, which takes
its options, `options`, whole)."""
