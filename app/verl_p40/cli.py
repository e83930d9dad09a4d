"""`verl-p40`: the one front door for every service of the stack."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from verl_p40 import VERL_VERSION, UserError, __version__, defaults
from verl_p40.options import add_arguments, from_args, number

# ---------------------------------------------------------------------------------------------- prep


def _stop_on_sigterm() -> None:
    """SIGTERM ends the command like Ctrl-C: `finally` blocks run and temporary files are removed."""
    import signal

    def stop(signum, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)


def cmd_prep(args: argparse.Namespace) -> int:
    from verl_p40.data import prep

    _stop_on_sigterm()
    return prep.main(args)


def cmd_fetch_model(args: argparse.Namespace) -> int:
    from verl_p40.models.fetch import fetch_model

    _stop_on_sigterm()
    if args.from_dir:
        from verl_p40.models.fetch import copy_model

        result = copy_model(Path(args.from_dir), Path(args.out))
        source, state = args.from_dir, "already in place" if result.skipped else "copied"
    else:
        result = fetch_model(args.repo, Path(args.out), revision=args.revision, force=args.force)
        source, state = args.repo, "already complete" if result.skipped else "downloaded"
    size = sum(v or 0 for v in result.files.values()) / 1e6
    print(f"{source}: {state} in {result.path} ({len(result.files)} files, {size:.1f} MB, {result.note or 'verified'})")
    return 0


# ---------------------------------------------------------------------------------------------- config / train


def _run_options(args: argparse.Namespace):
    from verl_p40.plan.run_options import RunOptions

    return from_args(RunOptions, args, sets=list(args.set or []) + list(getattr(args, "overrides", None) or []))


def _print_notes(notes: list[str]) -> None:
    for note in notes:
        print(f"[verl-p40] {note}", file=sys.stderr)


def cmd_config(args: argparse.Namespace) -> int:
    from verl_p40.plan.planner import config_yaml, plan

    run = plan(_run_options(args))
    _print_notes(run.notes)
    if args.overrides_only:
        print("\n".join(run.overrides))
    else:
        print(config_yaml(run), end="")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from verl_p40.doctor import runner as doctor
    from verl_p40.models.checkpoints import check_resume, write_run_record
    from verl_p40.plan.planner import plan
    from verl_p40.run.trainer import run_trainer

    options = _run_options(args)
    skip = doctor.skips(args.skip_check)
    run = plan(options)
    _print_notes(run.notes)
    check_resume(run.record)
    if args.dry_run:  # the files a run needs are checked (no GPU, no Ray)
        file_checks = {name: "--dry-run" for name in doctor.DEFAULT if name not in ("model", "data")}
        doctor.preflight(run, options, {**file_checks, **skip}, quiet=True)
        print(run.shell())
        return 0
    doctor.preflight(run, options, skip)
    write_run_record(run.record)
    return run_trainer(run, options.logs)


def cmd_cluster(args: argparse.Namespace) -> int:
    from verl_p40.run import cluster

    if args.role == "join":
        return cluster.cmd_join(args, _run_options(args))
    return cluster.cmd_head(args, _run_options(args), lambda: cmd_train(args))


def cmd_bench(args: argparse.Namespace) -> int:
    from verl_p40.doctor import runner as doctor
    from verl_p40.perf import bench as benchmark

    out = Path(args.out)
    result = benchmark.run(
        _run_options(args),
        args.steps,
        out,
        doctor.skips(args.skip_check),
        keep=Path(args.keep_model) if args.keep_model else None,
    )
    for line in benchmark.lines(result):
        print(line)
    print(f"wrote {out}")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from verl_p40.doctor import runner as doctor

    only = doctor.parse_names(",".join(args.only or []), "--only") or None
    results = doctor.run_checks(doctor.Context(_run_options(args)), only=only, skip=doctor.skips(args.skip_check))
    print(doctor.report(results, as_json=args.json))
    return 2 if any(r.status == doctor.FAIL for r in results) else 0


# ---------------------------------------------------------------------------------------------- patch-verl / profiles


def cmd_patch_verl(args: argparse.Namespace) -> int:
    from verl_p40 import patches

    if args.check:
        states = patches.status(args.verl_dir)
        for name, state in states.items():
            print(f"{state:>12}  {name}")
        missing = sum(state != patches.APPLIED for state in states.values())
        print(f"{len(states) - missing}/{len(states)} patches applied")
        return 1 if missing else 0
    root = patches.resolve_dir(args.verl_dir)
    report = patches.apply(root, force=args.force)
    for name, state in report.items():
        print(f"{state:>16}  {name}")
    print(f"verl at {root}: {len(report)} patches in place")
    return 0


def cmd_monitor(args: argparse.Namespace) -> int:
    from verl_p40.gpu import monitor

    return monitor.main(args)


def cmd_eval(args: argparse.Namespace) -> int:
    from verl_p40.evaluation import evaluate

    _stop_on_sigterm()
    report = evaluate.run(
        model=args.model,
        compare=args.compare,
        data=Path(args.data),
        out=Path(args.out),
        limit=args.limit,
        batch_size=args.batch_size,
        max_new_tokens=args.max_new_tokens,
        checkpoints=Path(args.checkpoints),
        logs=Path(args.logs) if args.logs else None,
        device=args.device,
        examples=args.examples,
        engine=args.engine,
        dtype=args.dtype,
    )
    for label, m in report["models"].items():
        print(
            f"{label:>8}: strict {m['accuracy_strict']:.1%}  flexible {m['accuracy_flexible']:.1%}  "
            f"format {m['format_rate']:.1%}  {m['mean_response_tokens']} tokens  {m['samples_per_s']} samples/s"
        )
    for kind, c in (report["comparison"] or {}).items():
        print(
            f"{kind:>8}: trained - base {c['difference']:+.1%} ({c['trained_only']} only trained, "
            f"{c['base_only']} only base; sign test p = {c['p_value']:.3g})"
        )
    print(f"report: {Path(args.out) / 'report.md'} ({report['questions']} questions)")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from verl_p40.models import export

    _stop_on_sigterm()
    kinds = [k.strip() for k in (args.gguf or "").split(",") if k.strip()]
    for path in export.run(
        args.model, Path(args.checkpoints), Path(args.out), dtype=args.dtype, gguf_kinds=kinds, lora=args.lora
    ):
        size = sum(p.stat().st_size for p in ([path] if path.is_file() else path.rglob("*")) if p.is_file()) / 1e6
        print(f"wrote {path} ({size:.1f} MB)")
    return 0


def cmd_profiles(args: argparse.Namespace) -> int:
    from verl_p40.plan import profiles

    for name in profiles.available():
        print(f"{name:>14}  {profiles.load(name).description}")
    return 0


# ---------------------------------------------------------------------------------------------- parser


def _add_run_options(p: argparse.ArgumentParser) -> None:
    from verl_p40.plan.run_options import RunOptions

    add_arguments(p, RunOptions, skip=["gpu_memory_cap_gb"])
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="any verl config value (repeatable)")


class Parser(argparse.ArgumentParser):
    """Usage errors in one line (the usage block is one --help away), exit code 2 as argparse's."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _add_gpu_memory_cap(p: argparse.ArgumentParser) -> None:
    from verl_p40.plan.run_options import RunOptions

    add_arguments(p, RunOptions, only=["gpu_memory_cap_gb"])


def _add_skip_check(p: argparse.ArgumentParser) -> None:
    from verl_p40.doctor.runner import SKIP_ENV, names_help

    p.add_argument(
        "--skip-check",
        action="append",
        metavar="NAME[,NAME]",
        help=f"skip a preflight check by name (also ${SKIP_ENV}); checks: {names_help()}",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="verl-p40", description=f"PPO post-training with verl {VERL_VERSION} on old and small NVIDIA GPUs"
    )
    parser.add_argument("--version", action="version", version=f"verl-p40 {__version__} (verl {VERL_VERSION})")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, func: Callable[[argparse.Namespace], int], help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(func=func)
        return p

    p = add("prep", cmd_prep, "GSM8K -> verl's RL parquet (train.parquet, test.parquet)")
    p.add_argument(
        "--source",
        default=defaults.GSM8K_SOURCE.get(),
        help="folder with train/test.jsonl or parquet, or hf:openai/gsm8k [%(default)s]",
    )
    p.add_argument("--out", default=defaults.DATA.get(), help="output folder [%(default)s]")
    p.add_argument("--limit", type=number(int, 1), help="at most N rows per split")
    p.add_argument("--skip-invalid", action="store_true", help="skip bad rows (and count them) instead of stopping")
    p.add_argument(
        "--val-size",
        type=number(int, 0),
        default=defaults.VAL_SIZE.get(),
        help="also write val.parquet: N "
        "train rows held out for validation, so choosing settings never sees the test split [%(default)s]",
    )
    p.add_argument("--instruction", default=None, help="text appended to each question")
    p.add_argument("--tokenizer", help="model/tokenizer folder: also print prompt-token statistics")
    p.add_argument("--cache-dir", default=defaults.DATASETS_CACHE.get() or None, help="datasets cache for hf: sources")
    p.add_argument("--summary-json", help="also write the summary as JSON here")
    p.add_argument(
        "--skip-existing",
        action="store_true",
        help="do nothing when the folder holds what this prep would write (its manifest says so)",
    )

    p = add("fetch-model", cmd_fetch_model, "download the model from the Hugging Face hub (HF_ENDPOINT, HF_TOKEN)")
    p.add_argument("--repo", default=defaults.MODEL_REPO.get(), help="[%(default)s]")
    p.add_argument("--revision", default=None, help="branch, tag or commit [main]")
    p.add_argument("--out", default=defaults.MODEL.get(), help="[%(default)s]")
    p.add_argument("--force", action="store_true", help="download again even when complete")
    p.add_argument(
        "--from",
        dest="from_dir",
        metavar="DIR",
        default=defaults.MODEL_FROM.get() or None,
        help="no hub: copy a complete model folder brought on a disk (air-gapped hosts) ($VERL_P40_MODEL_FROM)",
    )

    p = add("config", cmd_config, "print the complete verl config a profile gives, as YAML")
    _add_run_options(p)
    p.add_argument("--overrides-only", action="store_true", help="print the Hydra overrides instead of the config")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="verl config values, as with --set")

    p = add("train", cmd_train, "run verl's PPO trainer (python -m verl.trainer.main_ppo) with the profile")
    _add_run_options(p)
    _add_gpu_memory_cap(p)
    p.add_argument("--dry-run", action="store_true", help="print the trainer command and exit")
    _add_skip_check(p)
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="verl config values, as with --set")

    p = add("cluster", cmd_cluster, "several hosts: start a Ray head here and train on the cluster, or join one")
    from verl_p40.run.cluster import add_arguments as add_cluster_arguments

    add_cluster_arguments(p)
    _add_run_options(p)
    _add_gpu_memory_cap(p)
    _add_skip_check(p)
    p.set_defaults(dry_run=False)
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="head: verl config values, as with train (right after the role, or with --set)",
    )

    p = add(
        "bench",
        cmd_bench,
        "a few training steps on random weights of the model's shape: s/step, peak memory and "
        "the P40 projection, as a shareable JSON",
    )
    _add_run_options(p)
    _add_gpu_memory_cap(p)
    _add_skip_check(p)
    p.add_argument("--steps", type=number(int, 2), default=4, help="training steps; the first is warm-up [%(default)s]")
    p.add_argument("--out", default=defaults.LOGS.join("bench.json"), help="[%(default)s]")
    p.add_argument("--keep-model", metavar="DIR", help="build the random-weight model here once and reuse it")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="verl config values, as with train")

    p = add(
        "doctor",
        cmd_doctor,
        "preflight checks, one line each: driver, kernels, GPU compute, verl, model, data, "
        "disk, memory (train runs them too)",
    )
    _add_run_options(p)
    _add_skip_check(p)
    p.add_argument("--only", action="append", metavar="NAME[,NAME]", help="run only these checks")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="verl config values, as with train")

    p = add("patch-verl", cmd_patch_verl, f"apply (or --check) the verl {VERL_VERSION} patch set")
    p.add_argument("verl_dir", nargs="?", help="verl package folder [the installed verl]")
    p.add_argument("--check", action="store_true", help="report each patch; exit 1 unless all are applied")
    p.add_argument("--force", action="store_true", help=f"patch a verl other than {VERL_VERSION}")

    from verl_p40.gpu.monitor import add_arguments as monitor_arguments

    p = add("monitor", cmd_monitor, "sample the GPUs through NVML: CSV, Prometheus metrics, summary and plot")
    monitor_arguments(p)

    from verl_p40.evaluation.evaluate import add_arguments as eval_arguments

    p = add("eval", cmd_eval, "GSM8K accuracy of a model, or of two side by side (before/after PPO)")
    eval_arguments(p)

    p = add("export", cmd_export, "a trained model to take home: Hugging Face folder (fp16/fp32), LoRA adapter, GGUF")
    p.add_argument(
        "--model",
        default="latest",
        help="verl checkpoint .../global_step_N/actor, latest, or a Hugging Face folder [%(default)s]",
    )
    p.add_argument("--checkpoints", default=defaults.CHECKPOINTS.get(), help="for 'latest' [%(default)s]")
    p.add_argument("--out", default=defaults.EXPORTS.get(), help="output folder [%(default)s]")
    p.add_argument("--dtype", choices=("fp16", "fp32"), default="fp16", help="of the Hugging Face folder [%(default)s]")
    p.add_argument(
        "--lora",
        choices=("merged", "adapter"),
        default="merged",
        help="a LoRA run: the adapter folded into the weights, or the adapter alone [%(default)s]",
    )
    p.add_argument("--gguf", metavar="f16,q8_0", default="", help="also write GGUF files for llama.cpp/Ollama")

    add("profiles", cmd_profiles, "list the hardware profiles")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "instruction", "unset") is None:
        from verl_p40.data.gsm8k import DEFAULT_INSTRUCTION

        args.instruction = DEFAULT_INSTRUCTION
    try:
        return args.func(args)
    except UserError as exc:
        print(f"verl-p40 {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except ModuleNotFoundError as exc:
        missing = missing_dependency(exc)
        if missing is None:
            raise
        print(f"verl-p40 {args.command}: error: {missing}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


# The packages a `pip install verl-p40` leaves out (the image has them all: docker/requirements.txt), by import name,
# with the name pip installs them by.
HEAVY_DEPENDENCIES = {
    "torch": "torch",
    "transformers": "transformers",
    "verl": "verl==0.5.0",
    "ray": "ray",
    "safetensors": "safetensors",
    "peft": "peft",
    "accelerate": "accelerate",
    "gguf": "gguf",
    "vllm": "vllm",
    "pynvml": "nvidia-ml-py",
    "prometheus_client": "prometheus-client",
    "matplotlib": "matplotlib",
    "datasets": "datasets",
    "huggingface_hub": "huggingface_hub",
    "tensorboard": "tensorboard",
}


def missing_dependency(exc: ModuleNotFoundError) -> str | None:
    """The one line for a command whose package is not installed here, or None for any other missing module."""
    top = (exc.name or "").split(".")[0]
    if top not in HEAVY_DEPENDENCIES:
        return None
    return (
        f"this command needs the Python package {HEAVY_DEPENDENCIES[top]!r}, which is not installed here: run it in "
        f"the image (docker compose), or pip install {HEAVY_DEPENDENCIES[top]} (docs/image.md, the pip package)"
    )


if __name__ == "__main__":
    sys.exit(main())
