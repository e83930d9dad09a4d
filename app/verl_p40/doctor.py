"""`verl-p40 doctor`: the preflight. One line per check, PASS / FAIL (with the fix) / SKIP (with the reason).

A P40 owner runs it first; `verl-p40 train` runs it before Ray starts; compose runs it as the one-off the trainer
waits for, so a deterministic failure (no driver, a card this torch cannot run, a missing model, a full disk)
stops once, with its line, instead of failing minutes later inside a Ray worker. Any check can be skipped by name
(`--skip-check NAME` or `VERL_P40_DOCTOR_SKIP=NAME,...`), and then says so.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from verl_p40 import VERL_VERSION, UserError, budget

SKIP_ENV = "VERL_P40_DOCTOR_SKIP"
PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
# The oldest architecture the product supports: torch's sm_60 code runs on a P40's sm_61.
OLDEST_ARCH = (6, 0)
# Lowest driver for each CUDA major version under CUDA's minor-version compatibility (NVIDIA's CUDA
# compatibility guide, "Minor Version Compatibility"): CUDA 11.x runs on >= 450.80.02, 12.x on >= 525.60.13.
MIN_DRIVER = {11: "450.80.02", 12: "525.60.13"}
APEX_EXTENSIONS = ("amp_C", "apex_C", "fused_layer_norm_cuda", "mlp_cuda", "syncbn")
MIN_SHM_BYTES = 2 * 10**9


@dataclass
class Result:
    name: str
    status: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"{self.status}  {self.name:<11} {self.detail}"
        return f"{text}; fix: {self.fix}" if self.fix else text


class CheckFailed(Exception):
    def __init__(self, detail: str, fix: str):
        super().__init__(detail)
        self.detail, self.fix = detail, fix


class CheckSkipped(Exception):
    pass


@dataclass
class Context:
    """What the checks look at: the run's options and, lazily, its plan and the GPUs."""

    options: Any  # verl_p40.train.RunOptions
    _cache: dict = field(default_factory=dict)

    def plan(self):
        if "plan" not in self._cache:
            from verl_p40.train import plan

            try:
                self._cache["plan"] = plan(self.options)
            except UserError as exc:
                self._cache["plan"] = exc
        result = self._cache["plan"]
        if isinstance(result, UserError):
            raise CheckSkipped(f"needs the run's config, which failed: {result}")
        return result

    def gpus(self):
        if "gpus" not in self._cache:
            from verl_p40.gpu import detect

            try:
                self._cache["gpus"] = detect()
            except UserError as exc:
                self._cache["gpus"] = exc
        result = self._cache["gpus"]
        if isinstance(result, UserError):
            raise CheckSkipped("needs a GPU (see the gpu check)")
        return result


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


# ---------------------------------------------------------------------------------------------- checks


def check_torch_build(ctx: Context) -> str:
    torch = _torch()
    archs = arch_flags()
    if not archs:
        raise CheckFailed(f"torch {torch.__version__} is a CPU-only build", "install a CUDA build of torch")
    oldest = "sm_%d%d" % OLDEST_ARCH
    if oldest not in archs:
        raise CheckFailed(f"torch {torch.__version__} has no {oldest} kernels ({' '.join(archs)}): a P40 cannot run it",
                          "install torch 2.6.0+cu118 (its wheels carry sm_60) or another build listing sm_60")
    return f"torch {torch.__version__}, CUDA {torch.version.cuda}, kernels {' '.join(archs)}"


def check_apex(ctx: Context) -> str:
    if importlib.util.find_spec("apex") is None:
        raise CheckFailed("apex is not installed", "build the image's apex stage (only verl's Megatron backend needs it)")
    _torch()  # the extensions link against torch's libraries
    failed = []
    for name in APEX_EXTENSIONS:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            failed.append(f"{name} ({exc})")
    if failed:
        raise CheckFailed(f"apex extensions do not import: {'; '.join(failed)}",
                          "rebuild apex against this torch (its CUDA must match torch.version.cuda)")
    return f"apex with {', '.join(APEX_EXTENSIONS)}"


def check_verl(ctx: Context) -> str:
    from verl_p40 import patches

    try:
        states = patches.status()
    except UserError as exc:
        raise CheckFailed(str(exc), f"pip install --no-deps verl=={VERL_VERSION} && verl-p40 patch-verl") from None
    version = patches.verl_version(patches.default_verl_dir())
    if version != VERL_VERSION:
        raise CheckFailed(f"verl {version} is installed; verl-p40 runs verl {VERL_VERSION}",
                          f"pip install --no-deps verl=={VERL_VERSION} && verl-p40 patch-verl")
    missing = [name for name, state in states.items() if state != patches.APPLIED]
    if missing:
        raise CheckFailed(f"{len(missing)} of {len(states)} patches missing ({', '.join(missing)})",
                          "verl-p40 patch-verl")
    return f"verl {version}, {len(states)}/{len(states)} patches applied"


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def check_gpu(ctx: Context) -> str:
    from verl_p40.gpu import NoGPU, detect, driver_versions

    try:
        gpus = detect()
        driver, driver_cuda = driver_versions()
    except NoGPU as exc:
        raise CheckFailed(str(exc), "install the NVIDIA driver; in Docker, run with the GPU reservation (compose) or "
                          "--gpus all, which needs the NVIDIA Container Toolkit") from None
    torch = _torch()
    detail = f"driver {driver} (CUDA {driver_cuda[0]}.{driver_cuda[1]}), " + "; ".join(g.describe() for g in gpus)
    if torch.version.cuda:
        major = int(torch.version.cuda.split(".")[0])
        needed = MIN_DRIVER.get(major)
        if driver_cuda[0] < major or (needed and _version_tuple(driver) < _version_tuple(needed)):
            raise CheckFailed(f"{detail}: torch {torch.__version__} needs CUDA {torch.version.cuda}, which needs "
                              f"driver >= {needed or '?'}", f"update the NVIDIA driver to {needed} or newer")
    return detail


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
        cards = ", ".join(f"GPU {g.index} {g.name} (sm_{g.compute_capability[0]}{g.compute_capability[1]})" for g in bad)
        raise CheckFailed(f"torch {torch.__version__} has no kernels for {cards}: it has {' '.join(archs)}",
                          "use the verl-p40 image (torch 2.6.0+cu118 carries sm_60 kernels) or a torch build for "
                          "this card; only skip this check where the reported capability is emulated")
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
                out.detach().cpu(), expected, rtol=1e-3, atol=1e-3):
            print(json.dumps({"error": f"GPU {index}: fp32 results differ from the CPU's"}))
            return
        done.append(index)
    print(json.dumps({"ok": done}))


def check_compute(ctx: Context) -> str:
    """A small fp32 matmul and an SDPA forward/backward on every GPU, against the CPU: catches 'no kernel image'."""
    _torch()
    ctx.gpus()
    probe = subprocess.run([sys.executable, "-c", "from verl_p40.doctor import compute_probe; compute_probe()"],
                           capture_output=True, text=True, timeout=300)
    lines = [ln for ln in probe.stdout.splitlines() if ln.startswith("{")]
    try:
        result = json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        raise CheckFailed(f"the GPU probe crashed ({tail})", "check the driver and the GPU (nvidia-smi)") from None
    if "error" in result:
        raise CheckFailed(result["error"], "the GPU cannot run this torch build's kernels: use the verl-p40 image")
    if not result["ok"]:
        raise CheckFailed("torch sees no CUDA device", "check CUDA_VISIBLE_DEVICES and the container's GPU reservation")
    return ("fp32 matmul and SDPA forward/backward agree with the CPU on "
            + ", ".join(f"GPU {i}" for i in result["ok"]))


def check_model(ctx: Context) -> str:
    from verl_p40.fetch import local_problems

    folder = Path(ctx.options.model).expanduser()
    problems = local_problems(folder)
    if problems:
        raise CheckFailed(f"{folder}: {'; '.join(problems[:3])}", "verl-p40 fetch-model --out " + str(folder))
    return f"{folder}: complete, {budget.model_parameters(folder) / 1e6:.0f}M parameters"


def check_data(ctx: Context) -> str:
    from verl_p40.data import folder_problems

    folder = Path(ctx.options.data).expanduser()
    problems, rows = folder_problems(folder)
    if problems:
        raise CheckFailed(f"{folder}: {'; '.join(problems[:3])}", f"verl-p40 prep --out {folder}")
    return f"{folder}: " + ", ".join(f"{split} {n} rows" for split, n in rows.items())


def _writable(folder: Path) -> str | None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".doctor-"):
            pass
    except OSError as exc:
        return f"{folder} ({exc.strerror or exc})"
    return None


def check_writable(ctx: Context) -> str:
    hf_home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    folders = [Path(ctx.options.checkpoints).expanduser(), Path(ctx.options.logs).expanduser(), Path(hf_home)]
    bad = [problem for problem in map(_writable, folders) if problem]
    if bad:
        raise CheckFailed(f"cannot write to {'; '.join(bad)}",
                          f"make them writable for uid {os.getuid()} (in compose: recreate the volume with "
                          "`docker compose down -v` after updating the image)")
    return "checkpoints, logs and the Hugging Face cache are writable"


def _existing_parent(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _needs(ctx: Context) -> budget.Needs:
    """What the run needs (disk, host memory), from its config and the model's parameter count."""
    run = ctx.plan()
    try:
        parameters = budget.model_parameters(Path(ctx.options.model).expanduser())
    except (OSError, KeyError, ValueError):
        raise CheckSkipped("needs the model's config.json (see the model check)") from None
    return budget.needs(run.config(), parameters)


def check_disk(ctx: Context) -> str:
    need = _needs(ctx)
    folder = Path(ctx.options.checkpoints).expanduser()
    free = shutil.disk_usage(_existing_parent(folder)).free
    detail = (f"{budget.gb(free)} free at {folder}; the run keeps {need.checkpoints_kept} checkpoints of "
              f"~{budget.gb(need.checkpoint_bytes)} and needs ~{budget.gb(need.disk_bytes)}")
    if free < need.disk_bytes:
        raise CheckFailed(detail, "free disk space, or keep fewer checkpoints (--set trainer.max_actor_ckpt_to_keep=1 "
                          "trainer.max_critic_ckpt_to_keep=1) or save less often (trainer.save_freq)")
    return detail


def check_shm(ctx: Context) -> str:
    try:
        size = shutil.disk_usage("/dev/shm").total
    except OSError:
        raise CheckFailed("/dev/shm is missing", "mount a tmpfs at /dev/shm (docker: --shm-size=16g)") from None
    detail = f"/dev/shm {budget.gb(size)}"
    if size < MIN_SHM_BYTES:
        raise CheckFailed(f"{detail}, under the {budget.gb(MIN_SHM_BYTES)} Ray's object store and NCCL need",
                          "give the container more shared memory (compose: shm_size: 16gb; docker run --shm-size=16g)")
    return detail


def _host_memory() -> tuple[int, str]:
    """Available host memory, the lower of /proc/meminfo's MemAvailable and the cgroup's limit left."""
    available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    where = "MemAvailable"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
        if limit != "max" and int(limit) - used < available:
            available, where = int(limit) - used, "container memory limit"
    except (OSError, ValueError):
        pass
    return available, where


def check_ram(ctx: Context) -> str:
    need = _needs(ctx)
    available, where = _host_memory()
    detail = f"{budget.gb(available)} available ({where}); offloaded state and Ray need ~{budget.gb(need.host_bytes)}"
    if available < need.host_bytes:
        raise CheckFailed(detail, "free host memory, or offload less (--set critic.model.fsdp_config.param_offload=false "
                          "... costs GPU memory)")
    return detail


def check_vllm(ctx: Context) -> str:
    """vLLM and verl's vLLM rollout import (the -vllm image variant), in a fresh interpreter."""
    if importlib.util.find_spec("vllm") is None:
        raise CheckFailed("vllm is not installed", "use the -vllm image variant (sm_70+), or the HF rollout")
    probe = subprocess.run([sys.executable, "-c", "import vllm, verl.workers.rollout.vllm_rollout; print(vllm.__version__)"],
                           capture_output=True, text=True, timeout=600)
    if probe.returncode != 0:
        tail = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        raise CheckFailed(f"vllm does not import: {tail}", "rebuild the -vllm variant against PyPI's torch 2.6.0")
    return f"vllm {probe.stdout.strip().splitlines()[-1]} and verl's vLLM rollout import"


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[Context], str]
    about: str


CHECKS = [
    Check("gpu", check_gpu, "NVIDIA driver and GPUs through NVML; the driver's CUDA against torch's"),
    Check("kernels", check_kernels, "each GPU's compute capability against the torch build's kernel list"),
    Check("compute", check_compute, "fp32 matmul and SDPA forward/backward on every GPU against the CPU"),
    Check("verl", check_verl, f"verl {VERL_VERSION} installed and the verl-p40 patch set applied"),
    Check("model", check_model, "the model folder is complete (config, tokenizer, weights)"),
    Check("data", check_data, "train/test parquet in verl's RL schema"),
    Check("writable", check_writable, "checkpoints, logs and the Hugging Face cache are writable"),
    Check("disk", check_disk, "free disk for the checkpoints the run keeps"),
    Check("shm", check_shm, "/dev/shm for Ray's object store and NCCL"),
    Check("ram", check_ram, "host memory for offloaded state and Ray"),
    Check("torch-build", check_torch_build, "the torch build has sm_60 kernels (image build check)"),
    Check("apex", check_apex, "Apex's CUDA extensions import (image build check)"),
    Check("vllm", check_vllm, "vLLM and verl's vLLM rollout import (build check of the -vllm variant)"),
]
BY_NAME = {c.name: c for c in CHECKS}
BUILD_ONLY = ("torch-build", "apex", "vllm")
DEFAULT = [c.name for c in CHECKS if c.name not in BUILD_ONLY]


def parse_names(text: str | None, origin: str) -> list[str]:
    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise UserError(f"{origin}: unknown check {', '.join(map(repr, unknown))}; checks: {', '.join(BY_NAME)}")
    return names


def run_checks(ctx: Context, only: list[str] | None = None, skip: dict[str, str] | None = None) -> list[Result]:
    """Run the named checks (default: all but the build checks); `skip` maps names to the reason they are skipped."""
    skip = skip or {}
    results = []
    for name in only or DEFAULT:
        if name in skip:
            results.append(Result(name, SKIP, f"skipped by {skip[name]}"))
            continue
        try:
            results.append(Result(name, PASS, BY_NAME[name].run(ctx)))
        except CheckFailed as exc:
            results.append(Result(name, FAIL, exc.detail, exc.fix))
        except CheckSkipped as exc:
            results.append(Result(name, SKIP, str(exc)))
    return results


def skips(from_flags: list[str] | None) -> dict[str, str]:
    out = {n: f"--skip-check {n}" for n in parse_names(",".join(from_flags or []), "--skip-check")}
    for name in parse_names(os.environ.get(SKIP_ENV), SKIP_ENV):
        out.setdefault(name, f"{SKIP_ENV}={os.environ[SKIP_ENV]}")
    return out


def report(results: list[Result], as_json: bool = False) -> str:
    if as_json:
        return json.dumps([asdict(r) for r in results], indent=2)
    failed = sum(r.status == FAIL for r in results)
    summary = f"doctor: {failed} of {len(results)} checks failed" if failed else \
        f"doctor: all {len(results)} checks passed" + (" or skipped" if any(r.status == SKIP for r in results) else "")
    return "\n".join([r.line() for r in results] + [summary])


@functools.cache
def names_help() -> str:
    return "; ".join(f"{c.name}: {c.about}" for c in CHECKS)
