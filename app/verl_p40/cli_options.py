"""What every command takes, declared once: one dataclass per command, each field its flag, default, environment
variable, checks and help (`verl_p40.options`). The commands that plan a run (config, train, cluster, bench, doctor)
share `RunOptions`; prep's, monitor's, eval's and export's live with the stage that takes them whole
(`data/options.py`, `gpu/options.py`, `evaluation/options.py`, `models/options.py`), as `RunOptions` lives in the
plan."""

from __future__ import annotations

import os
from dataclasses import dataclass

from verl_p40 import VERL_VERSION, defaults
from verl_p40.data.options import PrepOptions
from verl_p40.doctor.runner import SKIP_ENV, names_help
from verl_p40.evaluation.options import EvalOptions
from verl_p40.gpu.options import MonitorOptions
from verl_p40.models.options import ExportOptions
from verl_p40.options import FILE, FOLDER, option
from verl_p40.plan.facts import CARDS
from verl_p40.plan.run_options import RunOptions

# declared in the stage that takes them whole, named here with the others
__all__ = ["EvalOptions", "ExportOptions", "MonitorOptions", "PrepOptions", "RunOptions"]


def _logs(*parts: str) -> str:
    return os.path.join(defaults.LOGS.value, *parts)


def _skip_check():
    return option(
        [],
        f"skip a preflight check by name (also ${SKIP_ENV}); checks: {names_help()}",
        many=True,
        metavar="NAME[,NAME]",
    )


@dataclass
class FetchModelOptions:
    repo: str = option(defaults.MODEL_REPO.value, "the model's repository on the hub", env=defaults.MODEL_REPO.env)
    revision: str | None = option(None, "branch, tag or commit", shown="main")
    out: str = option(defaults.MODEL.value, "model folder", env=defaults.MODEL.env, path=FOLDER)
    force: bool = option(False, "download again even when complete", switch=True)
    from_dir: str | None = option(
        None,
        "no hub: copy a complete model folder brought on a disk (air-gapped hosts)",
        env=defaults.MODEL_FROM.env,
        flag="--from",
        metavar="DIR",
        path=FOLDER,
        exists=True,
    )


@dataclass
class VerlRunOptions(RunOptions):
    """A run's options with the verl config values given on the command line (`sets` is both, --set first)."""

    set: list[str] = option([], "any verl config value (repeatable)", many=True, metavar="KEY=VALUE")
    overrides: list[str] = option([], "verl config values, as with --set", flag="", many=True, metavar="KEY=VALUE")

    def __post_init__(self) -> None:
        self.sets = [*self.set, *self.overrides]


@dataclass
class ConfigOptions(VerlRunOptions):
    overrides_only: bool = option(False, "print the Hydra overrides instead of the config", switch=True)
    card: str | None = option(
        None,
        "plan for this card instead of this machine's GPUs (as many as --gpus names, else one)",
        choices=tuple(CARDS),
        shown="this machine's GPUs",
    )


@dataclass
class TrainOptions(VerlRunOptions):
    dry_run: bool = option(False, "print the trainer command and exit", switch=True)
    skip_check: list[str] = _skip_check()


@dataclass
class ClusterOptions(TrainOptions):
    role: str | None = option(
        None,
        "head: start the cluster here and train; join: lend this host's GPUs to a head",
        flag="",
        choices=("head", "join"),
        required=True,
    )
    address: str | None = option(None, "join: the head's HOST:PORT", env=defaults.RAY_HEAD.env)
    port: int = option(
        int(defaults.RAY_PORT.value),
        "head: Ray's port; every host also uses the 102 after it",
        env=defaults.RAY_PORT.env,
        kind=int,
        low=1,
        high=65535,
    )
    node_ip: str | None = option(
        None, "this host's address the others reach it at", env=defaults.RAY_NODE_IP.env, shown="Ray's guess"
    )
    wait_s: float = option(
        float(defaults.CLUSTER_WAIT_S.value),
        "head: how long to wait for the other hosts, in seconds",
        env=defaults.CLUSTER_WAIT_S.env,
        kind=float,
        low=0,
    )
    no_train: bool = option(False, "head: start the cluster and wait, without training", switch=True)


@dataclass
class BenchOptions(VerlRunOptions):
    skip_check: list[str] = _skip_check()
    steps: int = option(4, "training steps; the first is warm-up", kind=int, low=2)
    out: str = option(_logs("bench.json"), "the result", env=defaults.LOGS.env, below="bench.json", path=FILE)
    keep_model: str | None = option(
        None, "build the random-weight model here once and reuse it", metavar="DIR", path=FOLDER
    )


@dataclass
class DoctorOptions(VerlRunOptions):
    skip_check: list[str] = _skip_check()
    only: list[str] = option([], "run only these checks", many=True, metavar="NAME[,NAME]")
    json: bool = option(False, "print the results as JSON", switch=True)


@dataclass
class PatchVerlOptions:
    verl_dir: str | None = option(
        None, "verl package folder", flag="", metavar="VERL_DIR", shown="the installed verl", path=FOLDER, exists=True
    )
    check: bool = option(False, "report each patch; exit 1 unless all are applied", switch=True)
    force: bool = option(False, f"patch a verl other than {VERL_VERSION}", switch=True)


@dataclass
class StatusOptions:
    logs: str = option(defaults.LOGS.value, "the logs folder of the run", env=defaults.LOGS.env, path=FOLDER)
    json: bool = option(False, "print the status file as it is", switch=True)


@dataclass
class ProfilesOptions:
    """`verl-p40 profiles` takes nothing."""
