"""The doctor's checks of the GPU and the software stack: driver, kernels, a compute probe, verl and its patches,
and the image build's own checks (torch build, Apex, vLLM). Each returns its PASS line or raises CheckFailed (with
the fix) or CheckSkipped (with the reason); `verl_p40.doctor.runner` runs them."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os

from verl_p40 import VERL_VERSION, UserError
from verl_p40.child import last_error_line, run_python
from verl_p40.doctor.context import CheckFailed, Context
from verl_p40.plan import capabilities

# The oldest architecture the product supports (the capability table's): torch's sm_60 code runs on a P40's sm_61.
OLDEST_ARCH = capabilities.name(capabilities.MIN_SM["supported"])
# Lowest driver for each CUDA major version under CUDA's minor-version compatibility (NVIDIA's CUDA
# compatibility guide, "Minor Version Compatibility"): CUDA 11.x runs on >= 450.80.02, 12.x on >= 525.60.13.
MIN_DRIVER = {11: "450.80.02", 12: "525.60.13"}
# The newest driver branch that drives Maxwell, Pascal (P40, P100) and Volta: NVIDIA's Unix driver deprecation
# schedule, "The Release 580 series will be the last to support GPUs based on the Maxwell, Pascal, and Volta
# architectures". R590 and newer (what `cuda-drivers` installs once it is the newest) see no such card.
LAST_DRIVER_BRANCH_FOR_OLD_GPUS = 580
OLD_GPU_BELOW = (7, 5)  # compute capability: Maxwell 5.x, Pascal 6.x and Volta 7.0/7.2; Turing (7.5) and newer go on
OLD_DRIVER_FIX = (
    "install an R580 driver or older (e.g. 580.xx or 570.xx; CUDA 12 wants >= 525.60.13): NVIDIA's R580 is the last "
    "branch that drives Pascal (P40) and Volta, R590 and newer do not"
)
APEX_EXTENSIONS = ("amp_C", "apex_C", "fused_layer_norm_cuda", "mlp_cuda", "syncbn")


def _torch():
    try:
        import torch
    except ImportError:
        raise CheckFailed("torch is not installed", "use the verl-p40 image, or pip install the pinned torch") from None
    return torch


def arch_flags() -> list[str]:
    """The architectures this torch build has code for (sm_XY binaries, compute_XY PTX); needs no GPU."""
    torch = _torch()
    flags = getattr(torch._C, "_cuda_getArchFlags", None)  # absent from CPU-only builds
    return flags().split() if flags and torch.version.cuda else []


def check_torch_build(ctx: Context) -> str:
    torch = _torch()
    archs = arch_flags()
    if not archs:
        raise CheckFailed(f"torch {torch.__version__} is a CPU-only build", "install a CUDA build of torch")
    oldest = OLDEST_ARCH
    if oldest not in archs:
        raise CheckFailed(
            f"torch {torch.__version__} has no {oldest} kernels ({' '.join(archs)}): a P40 cannot run it",
            f"install torch 2.6.0+cu118 (its wheels carry {oldest}) or another build listing {oldest}",
        )
    return f"torch {torch.__version__}, CUDA {torch.version.cuda}, kernels {' '.join(archs)}"


def apex_cuda_ext_built() -> bool:
    """Whether the image's apex stage compiled Apex's CUDA extensions (the build argument APEX_CUDA_EXT=1, which the
    Dockerfile passes on as VERL_P40_APEX_CUDA_EXT); by default it builds Apex's Python package only."""
    return os.environ.get("VERL_P40_APEX_CUDA_EXT", "0") == "1"


def check_apex(ctx: Context) -> str:
    if importlib.util.find_spec("apex") is None:
        raise CheckFailed(
            "apex is not installed", "build the image's apex stage (only verl's Megatron backend needs it)"
        )
    _torch()  # apex imports torch; its extensions link against torch's libraries
    try:
        importlib.import_module("apex")
    except ImportError as exc:
        raise CheckFailed(
            f"apex does not import ({exc})", "rebuild the image's apex stage against this torch"
        ) from None
    if not apex_cuda_ext_built():
        return "apex (its Python package; no CUDA extensions: no profile imports them, APEX_CUDA_EXT=1 builds them)"
    failed = []
    for name in APEX_EXTENSIONS:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            failed.append(f"{name} ({exc})")
    if failed:
        raise CheckFailed(
            f"apex extensions do not import: {'; '.join(failed)}",
            "rebuild apex against this torch (its CUDA must match torch.version.cuda)",
        )
    return f"apex with {', '.join(APEX_EXTENSIONS)}"


def check_verl(ctx: Context) -> str:
    from verl_p40 import patches

    try:
        states = patches.status()
    except UserError as exc:
        raise CheckFailed(str(exc), f"pip install --no-deps verl=={VERL_VERSION} && verl-p40 patch-verl") from None
    version = patches.verl_version(patches.default_verl_dir())
    if version != VERL_VERSION:
        raise CheckFailed(
            f"verl {version} is installed; verl-p40 runs verl {VERL_VERSION}",
            f"pip install --no-deps verl=={VERL_VERSION} && verl-p40 patch-verl",
        )
    missing = [name for name, state in states.items() if state != patches.APPLIED]
    if missing:
        raise CheckFailed(
            f"{len(missing)} of {len(states)} patches missing ({', '.join(missing)})", "verl-p40 patch-verl"
        )
    return f"verl {version}, {len(states)}/{len(states)} patches applied"


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def check_gpu(ctx: Context) -> str:
    if not _has_nvml_binding():  # not the driver's fault: the driver may well be there
        raise CheckFailed(
            "the nvidia-ml-py package (NVML's Python binding) is not installed, so no GPU can be read",
            "pip install nvidia-ml-py==12.575.51 (the version the image pins, docker/requirements.txt)",
        )
    facts = ctx.machine()
    if facts.gpus is None:
        raise CheckFailed(
            facts.no_gpu or "no NVIDIA GPU visible through NVML",
            "install the NVIDIA driver (for a P40 an R580 driver or older, e.g. 580.xx: a driver newer than R580 "
            "does not drive a P40); in Docker, run with the GPU reservation (compose) or --gpus all, which needs the "
            "NVIDIA Container Toolkit",
        )
    torch = _torch()
    gpus = "; ".join(g.describe() for g in facts.gpus)
    if facts.driver is None or facts.driver_cuda is None:
        return f"driver version not reported by NVML, {gpus}"
    driver, driver_cuda = facts.driver, facts.driver_cuda
    detail = f"driver {driver} (CUDA {driver_cuda[0]}.{driver_cuda[1]}), {gpus}"
    _check_driver_branch(driver, facts.gpus, detail)
    if torch.version.cuda:
        major = int(torch.version.cuda.split(".")[0])
        needed = MIN_DRIVER.get(major)
        if driver_cuda[0] < major or (needed and _version_tuple(driver) < _version_tuple(needed)):
            raise CheckFailed(
                f"{detail}: torch {torch.__version__} needs CUDA {torch.version.cuda}, which needs "
                f"driver >= {needed or '?'}",
                f"update the NVIDIA driver to {needed} or newer",
            )
    return detail


def _check_driver_branch(driver: str, gpus, detail: str) -> None:
    """A driver branch newer than R580 with a Maxwell, Pascal or Volta card: NVIDIA dropped them after R580."""
    branch = (_version_tuple(driver) or (0,))[0]
    old = [g for g in gpus if tuple(g.compute_capability) < OLD_GPU_BELOW]
    if branch > LAST_DRIVER_BRANCH_FOR_OLD_GPUS and old:
        named = ", ".join(
            f"GPU {g.index} ({g.name}, sm_{g.compute_capability[0]}{g.compute_capability[1]})" for g in old
        )
        raise CheckFailed(
            f"{detail}: driver branch R{branch} is too new for {named}; R{LAST_DRIVER_BRANCH_FOR_OLD_GPUS} is the "
            "last that drives Maxwell, Pascal and Volta cards",
            OLD_DRIVER_FIX,
        )


def _has_nvml_binding() -> bool:
    try:
        import pynvml  # noqa: F401
    except ImportError:
        return False
    return True


def _arch_runs_on(arch: str, cc: tuple[int, int]) -> bool:
    """Whether torch code built for `arch` (sm_XY binary or compute_XY PTX) runs on a GPU of capability `cc`."""
    kind, _, digits = arch.partition("_")
    if not digits.isdigit():
        return False
    major, minor = int(digits[:-1]), int(digits[-1])
    if kind == "sm":  # binary code runs on the same major version, equal or higher minor
        return major == cc[0] and minor <= cc[1]
    return (major, minor) <= cc  # PTX is compiled for newer GPUs by the driver


def check_kernels(ctx: Context) -> str:
    torch = _torch()
    archs = arch_flags()
    bad = [g for g in ctx.gpus() if not any(_arch_runs_on(a, g.compute_capability) for a in archs)]
    if bad:
        cards = ", ".join(
            f"GPU {g.index} {g.name} (sm_{g.compute_capability[0]}{g.compute_capability[1]})" for g in bad
        )
        raise CheckFailed(
            f"torch {torch.__version__} has no kernels for {cards}: it has {' '.join(archs)}",
            f"use the verl-p40 image (torch 2.6.0+cu118 carries {OLDEST_ARCH} kernels) or a torch build for "
            "this card; only skip this check where the reported capability is emulated",
        )
    return f"{' '.join(archs)} cover " + ", ".join(f"GPU {g.index}" for g in ctx.gpus())


def compute_probe() -> None:
    """Run in a child process by check_compute (the CLI process must not hold a CUDA context during training):
    prints one JSON line, {"ok": [...]} or {"error": "GPU i: ..."}."""
    import torch
    import torch.nn.functional as F

    done = []
    for index in range(torch.cuda.device_count()):
        device = torch.device("cuda", index)
        generator = torch.Generator().manual_seed(0)
        a, b = torch.randn(128, 128, generator=generator), torch.randn(128, 128, generator=generator)
        q, k, v = (torch.randn(2, 4, 32, 16, generator=generator) for _ in range(3))
        try:
            product = (a.to(device) @ b.to(device)).cpu()
            qg = q.to(device).requires_grad_()
            out = F.scaled_dot_product_attention(qg, k.to(device), v.to(device), is_causal=True)
            out.sum().backward()
            torch.cuda.synchronize(device)
        except RuntimeError as exc:
            print(json.dumps({"error": f"GPU {index}: {str(exc).strip().splitlines()[0]}"}))
            return
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if not torch.allclose(product, a @ b, rtol=1e-3, atol=1e-3) or not torch.allclose(
            out.detach().cpu(), expected, rtol=1e-3, atol=1e-3
        ):
            print(json.dumps({"error": f"GPU {index}: fp32 results differ from the CPU's"}))
            return
        done.append(index)
    print(json.dumps({"ok": done}))


def check_compute(ctx: Context) -> str:
    """A small fp32 matmul and an SDPA forward/backward on every GPU, against the CPU: catches 'no kernel image'."""
    _torch()
    ctx.gpus()
    result, probe = run_python("from verl_p40.doctor.stack_checks import compute_probe; compute_probe()", timeout=300)
    if result is None:
        raise CheckFailed(
            f"the GPU probe crashed ({last_error_line(probe)})", "check the driver and the GPU (nvidia-smi)"
        )
    if "error" in result:
        raise CheckFailed(result["error"], "the GPU cannot run this torch build's kernels: use the verl-p40 image")
    if not result["ok"]:
        raise CheckFailed("torch sees no CUDA device", "check CUDA_VISIBLE_DEVICES and the container's GPU reservation")
    return "fp32 matmul and SDPA forward/backward agree with the CPU on " + ", ".join(f"GPU {i}" for i in result["ok"])


def check_vllm(ctx: Context) -> str:
    """vLLM and verl's vLLM rollout import (the -vllm image variant), in a fresh interpreter."""
    if importlib.util.find_spec("vllm") is None:
        raise CheckFailed("vllm is not installed", "use the -vllm image variant (sm_70+), or the HF rollout")
    result, probe = run_python(
        "import json, vllm, verl.workers.rollout.vllm_rollout; print(json.dumps({'version': vllm.__version__}))",
        timeout=600,
    )
    if probe.returncode != 0 or result is None:
        raise CheckFailed(
            f"vllm does not import: {last_error_line(probe)}", "rebuild the -vllm variant against PyPI's torch 2.6.0"
        )
    return f"vllm {result['version']} and verl's vLLM rollout import"
