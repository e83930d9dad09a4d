"""`verl-p40`: the one front door for every service of the stack."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from verl_p40 import VERL_VERSION, UserError, __version__
from verl_p40 import cli_options as o
from verl_p40.options import add_arguments, named, resolve
from verl_p40.outputs import Temporaries

if TYPE_CHECKING:
    from verl_p40.run.sequence import Launch

# ---------------------------------------------------------------------------------------------- prep / fetch-model


def _stop_on_sigterm() -> None:
    """SIGTERM ends the command like Ctrl-C: `finally` blocks run and temporary files are removed."""
    import signal

    def stop(signum, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)


def cmd_prep(options: o.PrepOptions) -> int:
    from verl_p40.data import prep

    _stop_on_sigterm()
    return prep.main(options)


def cmd_fetch_model(options: o.FetchModelOptions) -> int:
    from verl_p40.models.fetch import fetch_model

    _stop_on_sigterm()
    if options.from_dir:
        from verl_p40.models.fetch import copy_model

        result = copy_model(Path(options.from_dir), Path(options.out))
        source, state = options.from_dir, "already in place" if result.skipped else "copied"
    else:
        result = fetch_model(options.repo, Path(options.out), revision=options.revision, force=options.force)
        source, state = options.repo, "already complete" if result.skipped else "downloaded"
    size = sum(v or 0 for v in result.files.values()) / 1e6
    print(f"{source}: {state} in {result.path} ({len(result.files)} files, {size:.1f} MB, {result.note or 'verified'})")
    return 0


# ---------------------------------------------------------------------------------------------- config / train


def _print_notes(notes: list[str]) -> None:
    for note in notes:
        print(f"[verl-p40] {note}", file=sys.stderr)


def cmd_config(options: o.ConfigOptions) -> int:
    from verl_p40.plan.facts import Facts
    from verl_p40.plan.inputs import Inputs
    from verl_p40.plan.planner import config_yaml, plan

    facts = Facts.of_card(options.card, indices=options.gpus) if options.card else None
    run = plan(options, facts, Inputs.absent() if options.card else None)  # a card you do not have: nor its folders
    _print_notes(run.notes)
    if options.overrides_only:
        print("\n".join(run.overrides))
    else:
        print(config_yaml(run), end="")
    return 0


def cmd_train(options: o.TrainOptions) -> int:
    from verl_p40.plan.facts import Facts
    from verl_p40.run import sequence

    launch = _launch(options)  # an unknown --skip-check is said before anything is read or planned
    return sequence.run(options, Facts.here(), launch, options.logs)


def _launch(options: o.TrainOptions) -> Launch:
    """How `train` and `cluster head` run the sequence: the doctor's preflight with the user's skips; `--dry-run`
    checks only the files a run needs (no GPU, no Ray), quietly, and stops there."""
    from verl_p40.doctor import runner as doctor
    from verl_p40.run.sequence import Launch

    skip = doctor.skips(options.skip_check)
    if options.dry_run:
        skip = {**{name: "--dry-run" for name in doctor.DEFAULT if name not in ("model", "data")}, **skip}
    return Launch(
        preflight=lambda run, facts: doctor.preflight(run, facts, options, skip, quiet=options.dry_run),
        dry_run=options.dry_run,
    )


def cmd_cluster(options: o.ClusterOptions) -> int:
    from verl_p40.plan.facts import Facts
    from verl_p40.run import cluster, sequence

    if options.role == "join":
        return cluster.cmd_join(options, Facts.here().gpus)
    launch = _launch(options)
    facts = Facts.here()  # read once: the head's layout, and the run's plan and preflight
    return cluster.cmd_head(options, facts.gpus, lambda: sequence.run(options, facts, launch, options.logs))


def cmd_bench(options: o.BenchOptions) -> int:
    from verl_p40.perf import bench as benchmark
    from verl_p40.plan.facts import Facts

    _stop_on_sigterm()  # outside the training itself (which stops gracefully): temporaries and the work folder go
    result = benchmark.run(options, Facts.here())
    for line in benchmark.lines(result):
        print(line)
    print(f"wrote {options.out}")
    return 0


def cmd_doctor(options: o.DoctorOptions) -> int:
    from verl_p40.doctor import runner as doctor

    only = doctor.parse_names(",".join(options.only), "--only") or None
    results = doctor.run_checks(doctor.Context(options), only=only, skip=doctor.skips(options.skip_check))
    print(doctor.report(results, as_json=options.json))
    failed = doctor.failure_line(results)
    if failed:
        raise Reported(failed, exit_code=2)
    return 0


# ---------------------------------------------------------------------------------------------- the other commands


def cmd_patch_verl(options: o.PatchVerlOptions) -> int:
    from verl_p40 import patches

    if options.check:
        states = patches.status(options.verl_dir)
        for name, state in states.items():
            print(f"{state:>12}  {name}")
        missing = sum(state != patches.APPLIED for state in states.values())
        print(f"{len(states) - missing}/{len(states)} patches applied")
        return 1 if missing else 0
    root = patches.resolve_dir(options.verl_dir)
    report = patches.apply(root, force=options.force)
    for name, state in report.items():
        print(f"{state:>16}  {name}")
    print(f"verl at {root}: {len(report)} patches in place")
    return 0


def cmd_monitor(options: o.MonitorOptions) -> int:
    from verl_p40.gpu import monitor

    _stop_on_sigterm()  # --plot and --once: a picture being written is not left half done (sampling stops on its own)
    return monitor.main(options)


def cmd_eval(options: o.EvalOptions) -> int:
    from verl_p40.evaluation import evaluate

    _stop_on_sigterm()
    report = evaluate.run(options)
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
    print(f"report: {Path(options.out) / 'report.md'} ({report['questions']} questions)")
    return 0


def cmd_export(options: o.ExportOptions) -> int:
    from verl_p40.models import export

    _stop_on_sigterm()
    for path in export.run(options):
        size = sum(p.stat().st_size for p in ([path] if path.is_file() else path.rglob("*")) if p.is_file()) / 1e6
        print(f"wrote {path} ({size:.1f} MB)")
    return 0


def cmd_status(options: o.StatusOptions) -> int:
    import json

    from verl_p40.run import status

    data = status.read(options.logs)
    if data is None:
        raise UserError(
            f"no {status.path_in(options.logs)} yet: no training and no service of the stack has run with this logs "
            f"folder (verl-p40 train --logs, VERL_P40_LOGS)"
        )
    if options.json:
        print(json.dumps(data, indent=2))
        return 0
    lines, code = status.lines(data)
    print("\n".join(lines))
    return code


def cmd_profiles(options: o.ProfilesOptions) -> int:
    from verl_p40.plan import profiles

    for name in profiles.available():
        print(f"{name:>14}  {profiles.load(name).description}")
    return 0


# ---------------------------------------------------------------------------------------------- parser


class Parser(argparse.ArgumentParser):
    """Usage errors in one line (the usage block is one --help away), exit code 2 as argparse's."""

    said: str | None = None  # the usage error, for the stack's status file

    def error(self, message: str):
        Parser.said = f"{self.prog}: error: {message} (see {self.prog} --help)"
        self.exit(2, Parser.said + "\n")


@dataclass(frozen=True)
class Command:
    name: str
    run: Callable[[Any], int]
    options: type  # the command's options dataclass (verl_p40.cli_options names them all)
    help: str
    hidden: tuple[str, ...] = ()  # fields of `options` that are not flags of this command (their defaults hold)


COMMANDS = (
    Command("prep", cmd_prep, o.PrepOptions, "GSM8K -> verl's RL parquet (train.parquet, test.parquet)"),
    Command(
        "fetch-model",
        cmd_fetch_model,
        o.FetchModelOptions,
        "download the model from the Hugging Face hub (HF_ENDPOINT, HF_TOKEN)",
    ),
    Command(
        "config",
        cmd_config,
        o.ConfigOptions,
        "print the complete verl config a profile gives, as YAML",
    ),
    Command(
        "train",
        cmd_train,
        o.TrainOptions,
        "run verl's trainer (python -m verl.trainer.main_ppo: PPO, GRPO, ...) with the profile",
    ),
    Command(
        "cluster",
        cmd_cluster,
        o.ClusterOptions,
        "several hosts: start a Ray head here and train on the cluster, or join one",
        hidden=("dry_run",),
    ),
    Command(
        "bench",
        cmd_bench,
        o.BenchOptions,
        "a few training steps on random weights of the model's shape: s/step, peak memory and "
        "the P40 projection, as a shareable JSON",
    ),
    Command(
        "doctor",
        cmd_doctor,
        o.DoctorOptions,
        "preflight checks, one line each: driver, kernels, GPU compute, verl, model, data, "
        "disk, memory (train runs them too)",
    ),
    Command("patch-verl", cmd_patch_verl, o.PatchVerlOptions, f"apply (or --check) the verl {VERL_VERSION} patch set"),
    Command(
        "monitor",
        cmd_monitor,
        o.MonitorOptions,
        "sample the GPUs through NVML: CSV, Prometheus metrics, summary and plot",
    ),
    Command(
        "eval", cmd_eval, o.EvalOptions, "GSM8K accuracy of a model, or of two side by side (before/after training)"
    ),
    Command(
        "export",
        cmd_export,
        o.ExportOptions,
        "a trained model to take home: Hugging Face folder (fp16/fp32), LoRA adapter, GGUF",
    ),
    Command(
        "status",
        cmd_status,
        o.StatusOptions,
        "where the training is (step, s/step, reward, validation, best step, time left), or how it or a service "
        "of the stack ended, in a line (the logs folder's status.json)",
    ),
    Command("profiles", cmd_profiles, o.ProfilesOptions, "list the hardware profiles"),
)


class _Version(argparse.Action):
    """`--version`: verl-p40's, the verl release it runs, and the verl installed here (looked up when asked, without
    importing it), so that a missing or other verl is not read as the one it runs."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None):
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        from verl_p40 import patches

        try:
            installed = f"verl {patches.verl_version(patches.default_verl_dir())} installed"
        except patches.PatchError:
            installed = f"verl not installed: pip install --no-deps verl=={VERL_VERSION}"
        print(f"verl-p40 {__version__} (runs verl {VERL_VERSION}; {installed})")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """Every command's flags from its options dataclass; nothing is read from the environment here."""
    parser = Parser(
        prog="verl-p40",
        description=f"RL post-training (PPO, GRPO, ...) with verl {VERL_VERSION} on old and small NVIDIA GPUs",
    )
    parser.add_argument(
        "--version", action=_Version, help="show verl-p40's version, the verl it runs and the one installed"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help, description=command.help)
        add_arguments(p, command.options, skip=command.hidden)
        p.set_defaults(command_spec=command)
    return parser


class Reported(UserError):
    """A command's failure it has already said in its own words (the doctor's report): its one line goes into the
    stack's status file, and nothing more is printed."""


def main(argv: list[str] | None = None) -> int:
    from verl_p40.run import status

    service = status.service()  # in the compose stack: this service's outcome goes into the logs' status file
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        if service and exc.code:
            status.record_service(service, "failed", int(exc.code), parser.said)
        raise
    if service:
        status.record_service(service, "running")
    temporaries = Temporaries()  # a command that fails or is refused leaves nothing in the temporary directory
    try:
        code, line = _run(args)
    except BaseException as exc:  # an unforeseen error: its traceback follows, the status file names it
        if service:
            status.record_service(service, "failed", 1, f"{type(exc).__name__}: {exc}".strip()[:300])
        raise
    if code != 0:
        temporaries.remove()
    if service:
        status.record_service(service, "ok" if code == 0 else "failed", code, line)
    return code


def _run(args: argparse.Namespace) -> tuple[int, str | None]:
    """The command's exit code, and the one line that says why it failed."""
    command: Command = args.command_spec
    try:
        return command.run(resolve(command.options, args)), None  # environment values are read and checked here
    except Reported as exc:
        return exc.exit_code, str(exc)
    except UserError as exc:
        line = f"verl-p40 {args.command}: error: {named(str(exc))}"  # the variable, where it was one
        print(line, file=sys.stderr)
        return exc.exit_code, line
    except ModuleNotFoundError as exc:
        missing = missing_dependency(exc)
        if missing is None:
            raise
        line = f"verl-p40 {args.command}: error: {missing}"
        print(line, file=sys.stderr)
        return 2, line
    except KeyboardInterrupt:
        return 130, "stopped (SIGINT or SIGTERM)"


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
