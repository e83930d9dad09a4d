"""The doctor's checks of the host and the run's files: model, data, writable folders, disk, /dev/shm, memory."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from verl_p40.doctor.context import CheckFailed, CheckSkipped, Context
from verl_p40.plan import budget
from verl_p40.run import status

MIN_SHM_BYTES = 2 * 10**9


def check_model(ctx: Context) -> str:
    from verl_p40.models import verify

    folder = Path(ctx.options.model).expanduser()
    problems = verify.problems(folder)
    if problems:
        fix = status.phrased("docker compose run --rm model-fetch", f"verl-p40 fetch-model --out {folder}")
        raise CheckFailed(f"{folder}: {'; '.join(problems[:3])}", fix)
    return f"{folder}: complete, {verify.parameters(folder) / 1e6:.0f}M parameters"


def check_data(ctx: Context) -> str:
    from verl_p40.data.folder_checks import folder_problems, parquet_problem

    folder = Path(ctx.options.data).expanduser()
    problems, rows = folder_problems(folder)
    if problems:
        raise CheckFailed(f"{folder}: {'; '.join(problems[:3])}", _prep_fix(folder))
    checked = {(folder / f"{split}.parquet").resolve() for split in rows}
    moved = _files_set_elsewhere(ctx, checked)
    for key, path in moved:  # what verl will read, where a KEY=VALUE took it out of --data
        problem, _ = parquet_problem(path)
        if problem:
            raise CheckFailed(f"{key}={path}: {problem}", f"fix {key}, or leave it out (--data gives {folder})")
    return (
        f"{folder}: "
        + ", ".join(f"{split} {n} rows" for split, n in rows.items())
        + "".join(f"; {key}={path}" for key, path in moved)
    )


def _prep_fix(folder: Path) -> str:
    """How to prepare `folder`: prep into it, or, where it holds GSM8K as published (prep's default source is the hub),
    prep from it into another folder that --data then names."""
    from verl_p40 import defaults
    from verl_p40.data.gsm8k import holds_a_source

    cli = f"verl-p40 prep --out {folder}"
    if holds_a_source(folder):
        out = Path(defaults.DATA.get())
        if out.resolve() == folder.resolve():
            out = folder.parent / f"{folder.name}-prepared"
        cli = f"verl-p40 prep --source {folder} --out {out}, then --data {out}"
    return status.phrased("docker compose run --rm data-prep", cli)


def _files_set_elsewhere(ctx: Context, checked: set[Path]) -> list[tuple[str, Path]]:
    """(key, file) for each data file of the run's config that is not one of the files `checked` already (none
    without a plan): another folder's, or another file of the --data folder."""
    from omegaconf import OmegaConf

    try:
        data = ctx.plan().config().data
    except CheckSkipped:  # the plan's own check says why
        return []
    out = []
    for key in ("train_files", "val_files"):
        value = OmegaConf.select(data, key)
        listed = OmegaConf.to_container(value) if OmegaConf.is_config(value) else [value]
        out += [
            (f"data.{key}", path)
            for path in (Path(str(v)).expanduser() for v in listed)
            if path.resolve() not in checked
        ]
    return out


def _writable(folder: Path) -> str | None:
    from verl_p40.outputs import made

    try:  # tried: a folder that is not there yet is made for the try and removed again (a check leaves nothing)
        with made(folder, keep=False), tempfile.NamedTemporaryFile(dir=folder, prefix=".doctor-"):
            pass
    except OSError as exc:
        return f"{folder} ({exc.strerror or exc})"
    return None


def check_writable(ctx: Context) -> str:
    hf_home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    folders = [Path(ctx.options.checkpoints).expanduser(), Path(ctx.options.logs).expanduser(), Path(hf_home)]
    bad = [problem for problem in map(_writable, folders) if problem]
    if bad:
        raise CheckFailed(
            f"cannot write to {'; '.join(bad)}",
            f"make them writable for uid {os.getuid()} (in compose: recreate the volume with "
            "`docker compose down -v` after updating the image)",
        )
    return "checkpoints, logs and the Hugging Face cache are writable"


def _existing_parent(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _needs(ctx: Context) -> budget.Needs:
    """What the run needs (disk, host memory), from its config and the model's parameter count."""
    run = ctx.plan()
    try:
        parameters = budget.parameter_count(ctx.inputs().model or {})  # config.json, as the plan read it
    except (KeyError, ValueError, TypeError):  # none, or one the model check refuses
        raise CheckSkipped("needs the model's config.json (see the model check)") from None
    return budget.needs(run.config(), parameters)


def check_disk(ctx: Context) -> str:
    need = _needs(ctx)
    folder = Path(ctx.options.checkpoints).expanduser()
    free = shutil.disk_usage(_existing_parent(folder)).free
    detail = (
        f"{budget.gb(free)} free at {folder}; the run keeps {need.checkpoints_kept} checkpoints of "
        f"~{budget.gb(need.checkpoint_bytes)} and needs ~{budget.gb(need.disk_bytes)}"
    )
    if free < need.disk_bytes:
        raise CheckFailed(
            detail,
            "free disk space, or keep fewer checkpoints (--set trainer.max_actor_ckpt_to_keep=1 "
            "trainer.max_critic_ckpt_to_keep=1) or save less often (trainer.save_freq)",
        )
    return detail


def check_shm(ctx: Context) -> str:
    try:
        size = shutil.disk_usage("/dev/shm").total
    except OSError:
        raise CheckFailed("/dev/shm is missing", "mount a tmpfs at /dev/shm (docker: --shm-size=16g)") from None
    detail = f"/dev/shm {budget.gb(size)}"
    if size < MIN_SHM_BYTES:
        raise CheckFailed(
            f"{detail}, under the {budget.gb(MIN_SHM_BYTES)} Ray's object store and NCCL need",
            "give the container more shared memory (compose: shm_size: 16gb; docker run --shm-size=16g)",
        )
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
    estimate = " (measured on one GPU: an estimate for 2-4 cards)" if need.host_workers > 1 else ""
    detail = (
        f"{budget.gb(available)} available ({where}); the run needs ~{budget.gb(need.host_bytes)}: "
        f"{budget.gb(need.host_fixed_bytes)} the CLI, verl's driver and Ray, {budget.gb(need.host_worker_bytes)} a GPU "
        f"worker x {need.host_workers}{estimate}, {budget.gb(need.host_offloaded_bytes)} offloaded state"
    )
    if available < need.host_bytes:
        fewer = ", or train on fewer GPUs (--gpus; with compose GPUS= in .env)" if need.host_workers > 1 else ""
        raise CheckFailed(
            detail,
            "free host memory, or offload less (--set critic.model.fsdp_config.param_offload=false "
            f"... costs GPU memory){fewer}",
        )
    return detail
