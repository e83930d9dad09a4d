"""CPU stand-ins that let verl 0.5.0's real PPO loop run on a machine without a GPU, for the CI smoke test
(tests/test_trainer_cpu.py). Active only when VERL_P40_CPU_SHIMS=1 and this folder is on PYTHONPATH, so that
Ray's worker processes get them too. Never part of the shipped code path."""

import os

if os.environ.get("VERL_P40_CPU_SHIMS") == "1":
    import torch

    for _name, _value in {
        "memory_allocated": lambda *a, **k: 0,
        "memory_reserved": lambda *a, **k: 0,
        "max_memory_allocated": lambda *a, **k: 0,
        "max_memory_reserved": lambda *a, **k: 0,
        "reset_peak_memory_stats": lambda *a, **k: None,
        "empty_cache": lambda *a, **k: None,
        "mem_get_info": lambda *a, **k: (8 * 2**30, 16 * 2**30),
        "manual_seed": lambda *a, **k: None,
        "set_device": lambda *a, **k: None,
        "get_device_name": lambda *a, **k: "cpu",
    }.items():
        if not hasattr(torch.cpu, _name):
            setattr(torch.cpu, _name, _value)

    import verl.utils.device as _device

    _device.get_nccl_backend = lambda: "gloo"

    import torch.distributed as _dist

    _init_process_group = _dist.init_process_group

    def _cpu_init_process_group(*args, backend=None, **kwargs):
        # verl asks for "cpu:gloo,<device>:<nccl>", which on a CPU-only machine is "cpu:gloo,cpu:gloo"
        if isinstance(backend, str) and set(backend.split(",")) == {"cpu:gloo"}:
            backend = "gloo"
        return _init_process_group(*args, backend=backend, **kwargs)

    _dist.init_process_group = _cpu_init_process_group

    # FSDP2's CPU offload policy pins host memory, which needs an accelerator; on a CPU-only machine it is a no-op.
    torch.Tensor.pin_memory = lambda self, *args, **kwargs: self
