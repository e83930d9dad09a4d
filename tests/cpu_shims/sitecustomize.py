"""CPU stand-ins that let verl 0.5.0's real PPO loop run on a machine without a GPU, for the CI smoke tests
(tests/unit_run/test_trainer_cpu.py, tests/e2e/). Active only when VERL_P40_CPU_SHIMS=1 and this folder is on
PYTHONPATH, so that Ray's worker processes get them too. Never part of the shipped code path."""

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

    # torch 2.6's gloo has no ReduceOp.AVG (torch 2.13's has), which verl's reduce_timing asks for: SUM / world size
    _all_reduce = _dist.all_reduce

    def _cpu_all_reduce(tensor, op=_dist.ReduceOp.SUM, group=None, async_op=False):
        if op == _dist.ReduceOp.AVG and _dist.get_backend(group) == "gloo":
            work = _all_reduce(tensor, op=_dist.ReduceOp.SUM, group=group, async_op=False)
            tensor.div_(_dist.get_world_size(group))
            return work
        return _all_reduce(tensor, op=op, group=group, async_op=async_op)

    _dist.all_reduce = _cpu_all_reduce

    # FSDP2's CPU offload policy pins host memory, which needs an accelerator; on a CPU-only machine it is a no-op.
    torch.Tensor.pin_memory = lambda self, *args, **kwargs: self

    # torch 2.6 (the image's): FSDP2 records and waits on stream events around its all-gathers, and torch.cpu.Stream
    # has no events there ("'Stream' object has no attribute 'record_event'"); on a CPU every op is already ordered
    class _CpuEvent:
        def record(self, stream=None):
            return None

        def wait(self, stream=None):
            return None

        def synchronize(self):
            return None

        def query(self):
            return True

    for _name, _value in {
        "record_event": lambda self, event=None: event if event is not None else _CpuEvent(),
        "wait_event": lambda self, event: None,
        "synchronize": lambda self: None,
    }.items():
        if not hasattr(torch.cpu.Stream, _name):
            setattr(torch.cpu.Stream, _name, _value)
