"""What a plan reads from the machine it plans for, as one input: the GPUs and the packages the trainer can import.

`Facts.here()` reads this machine (NVML for the GPUs and the driver, a fresh interpreter for vLLM and Triton), once per
command: `train`, `bench`, `doctor` and `cluster` hand the same Facts to the plan, the doctor's checks, the cluster's
layout and bench's result. A plan for a card you do not have takes `Facts.of_card(NAME)` (`verl-p40 config --card
NAME`, the projection, tests): nothing is read from this machine's hardware then, so no monkeypatch is needed to plan
for a P40 on a laptop. What the plan reads of the disk and the environment is its sibling's, `Inputs` (plan/inputs.py).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from verl_p40 import UserError
from verl_p40.gpu import nvml
from verl_p40.gpu.nvml import GPUInfo

# Cards people train on, as NVML reports them (name, compute capability, memory in GiB). A plan for one of these
# needs none of it present. Memory: what NVML's total says on such a card (a 24 GB P40 reports 23.9 GiB).
CARDS: dict[str, tuple[str, tuple[int, int], float]] = {
    "p40": ("Tesla P40", (6, 1), 23.9),
    "p100": ("Tesla P100-PCIE-16GB", (6, 0), 15.9),
    "v100": ("Tesla V100-SXM2-16GB", (7, 0), 15.8),
    "t4": ("Tesla T4", (7, 5), 15.0),
    "rtx3090": ("NVIDIA GeForce RTX 3090", (8, 6), 24.0),
    "a10": ("NVIDIA A10", (8, 6), 22.5),
    "rtx4090": ("NVIDIA GeForce RTX 4090", (8, 9), 24.0),
    "a100-40gb": ("NVIDIA A100-SXM4-40GB", (8, 0), 39.4),
    "a100-80gb": ("NVIDIA A100-SXM4-80GB", (8, 0), 79.3),
    "h100": ("NVIDIA H100 80GB HBM3", (9, 0), 79.6),
    "h200": ("NVIDIA H200", (9, 0), 139.8),
}


@dataclass(frozen=True)
class Facts:
    """The machine a plan is for: its GPUs (None: no driver seen, e.g. a config made on another machine), whether
    vLLM and Triton import there, and whether TensorBoard is installed; read here, also its driver (None: not reported,
    or a named card) and why no GPU is visible."""

    gpus: tuple[GPUInfo, ...] | None
    vllm: bool = False
    triton: bool = False
    tensorboard: bool = False
    driver: str | None = None
    driver_cuda: tuple[int, int] | None = None  # the newest CUDA the driver supports
    no_gpu: str | None = None  # NVML's reason where `gpus` is None (the doctor's gpu check says it)

    @classmethod
    def here(cls) -> Facts:
        from verl_p40.plan.engines import installed

        machine = nvml.read()
        return cls(
            gpus=machine.gpus,
            vllm=installed("vllm"),
            triton=installed("triton"),
            tensorboard=importlib.util.find_spec("tensorboard") is not None,
            driver=machine.driver,
            driver_cuda=machine.driver_cuda,
            no_gpu=machine.no_gpu,
        )

    @classmethod
    def of_card(cls, name: str, count: int = 1, indices: tuple[int, ...] | None = None) -> Facts:
        """`count` cards of a kind in CARDS (numbered 0..count-1, or as `indices`, --gpus's, number them), on a
        machine with neither vLLM nor Triton (the default image)."""
        key = name.lower()
        if key not in CARDS:
            raise UserError(f"--card {name}: not a card verl-p40 knows; use one of {', '.join(CARDS)}")
        model, capability, memory = CARDS[key]
        tensorboard = importlib.util.find_spec("tensorboard") is not None
        gpus = tuple(GPUInfo(i, model, capability, memory) for i in (indices or range(count)))
        return cls(gpus=gpus, tensorboard=tensorboard)
