"""Stage 1, gpu: what NVML says about the GPUs present (`nvml`), the `--gpus` selection, the monitor's samples
(`sampler`), and `verl-p40 monitor` (sampling loop, CSV, Prometheus, the GPU plot)."""
