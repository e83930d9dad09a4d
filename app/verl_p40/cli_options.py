"""What every command takes, declared once: one dataclass per command, each field its flag, default, environment
variable, checks and help (`verl_p40.options`). The commands that plan a run (config, train, cluster, bench, doctor)
share `RunOptions`; prep's, monitor's, bench's, eval's and export's live with the stage that takes them whole
(`data/options.py`, `gpu/options.py`, `perf/options.py`, `evaluation/options.py`, `models/options.py`), as
`RunOptions` lives in the plan."""

from __future__ import annotations

from dataclasses import dataclass

from verl_p40 import VERL_VERSION, defaults
from verl_p40.data.options import PrepOptions
from verl_p40.doctor.options import skip_check_option
from verl_p40.evaluation.options import EvalOptions
from verl_p40.gpu.options import MonitorOptions
from verl_p40.models.options import ExportOptions
from verl_p40.options import FOLDER, option
from verl_p40.perf.options import BenchOptions
from verl_p40.plan.facts import CARDS
from verl_p40.plan.run_options import RunOptions, VerlRunOptions

# declared in the stage that takes them whole, named here with the others
__all__ = ["BenchOptions", "EvalOptions", "ExportOptions", "MonitorOptions", "PrepOptions", "RunOptions"]


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
    skip_check: list[str] = skip_check_option()


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
class DoctorOptions(VerlRunOptions):
    skip_check: list[str] = skip_check_option()
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
