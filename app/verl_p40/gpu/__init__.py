"""Stage 1, gpu: everything NVML says (`nvml`), the `--gpus` selection, and `verl-p40 monitor` (sampling loop, CSV,
Prometheus, the GPU plot)."""
