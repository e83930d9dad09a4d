"""The options of a run: what `config`, `train`, `bench`, `cluster` and `doctor` take, each field also its
command-line option (`verl_p40.options`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl_p40 import defaults, reward
from verl_p40.gpu.nvml import parse_gpus
from verl_p40.options import FOLDER, option
from verl_p40.plan import algorithms, profiles
from verl_p40.plan import layout as layout_mod

# The help lists the recipes and profiles shipped with the package, read from config/algorithms and config/profiles
_SHIPPED = profiles.shipped()
_RECIPES = ", ".join(sorted(p.stem for p in (_SHIPPED / "algorithms").glob("*.yaml")))
_PROFILES = ", ".join(sorted(p.stem for p in (_SHIPPED / "profiles").glob("*.yaml") if p.stem != profiles.BASE))


@dataclass
class RunOptions:
    """What `config`, `train`, `bench` and `doctor` take; each field is also its command-line option."""

    profile: str = option(
        "auto",
        f"hardware profile (config/profiles/NAME.yaml: {_PROFILES}; verl-p40 profiles lists them), or auto (picked "
        "from what NVML reports)",
        env="VERL_P40_PROFILE",
        check=profiles.check_name,
    )
    model: str = option(defaults.MODEL.value, "model folder", env=defaults.MODEL.env, path=FOLDER)
    data: str = option(defaults.DATA.value, "folder with train/test.parquet", env=defaults.DATA.env, path=FOLDER)
    checkpoints: str = option(defaults.CHECKPOINTS.value, "checkpoint root", env=defaults.CHECKPOINTS.env, path=FOLDER)
    logs: str = option(defaults.LOGS.value, "log folder", env=defaults.LOGS.env, path=FOLDER)
    reward_method: str | None = option(
        None,
        "GSM8K answer extraction: strict '#### N' (verl's) or the last number",
        env="VERL_P40_REWARD_METHOD",
        choices=reward.METHODS,
        shown="the algorithm's, else strict",
    )
    format_bonus: float | None = option(
        None,
        "reward added when the answer uses the '#### N' format",
        env="VERL_P40_FORMAT_BONUS",
        kind=float,
        low=0,
        shown="the algorithm's, else 0",
    )
    algorithm: str = option(
        algorithms.DEFAULT,
        f"RL algorithm or recipe (config/algorithms/NAME.yaml: {_RECIPES}): ppo has a critic; the others sample "
        "several answers per prompt and need none",
        env="VERL_P40_ALGORITHM",
        choices=algorithms.available,
    )
    samples_per_prompt: int | None = option(
        None,
        "answers sampled per prompt (verl's rollout.n); the profile's "
        "sequences per step are kept, so prompts per step = batch / N, except for a recipe "
        "(grpo-gsm8k, ppo-gsm8k), whose prompts per step are its own",
        env="VERL_P40_SAMPLES_PER_PROMPT",
        kind=int,
        low=1,
        shown="the algorithm's",
    )
    lora_rank: int = option(
        0,
        "train a LoRA adapter of this rank instead of every weight (0: full fine-tuning)",
        env="VERL_P40_LORA_RANK",
        kind=int,
        low=0,
    )
    lora_alpha: int | None = option(None, "LoRA's alpha", env="VERL_P40_LORA_ALPHA", kind=int, low=1, shown="2 x rank")
    gpu_memory_cap_gb: float | None = option(
        None,
        "cap PyTorch's memory per GPU process at N*10^9 bytes (size a run for a smaller card)",
        env=defaults.GPU_MEMORY_CAP_ENV,
        kind=float,
        low=defaults.GPU_MEMORY_CAP_MIN_GB,
        shown="no cap",
    )
    gpus: tuple[int, ...] | None = option(  # None: all
        None,
        "this host's GPUs to train on, as nvidia-smi numbers them (all, or e.g. 0,1); a step's prompts are split "
        "over them (--batch)",
        env="VERL_P40_GPUS",
        shown="all",
        convert=parse_gpus,
    )
    batch: str = option(
        "recipe",
        "prompts a step on several GPUs: recipe keeps the recipe's (the measured learning per step) and splits them "
        "over the GPUs; per-gpu gives each GPU the recipe's prompts (GPUs x the prompts a step)",
        env="VERL_P40_BATCH",
        choices=layout_mod.BATCH_MODES,
    )
    nodes: int = option(
        1,
        "hosts in the Ray cluster (trainer.nnodes); above 1 the trainer joins the cluster at "
        "RAY_ADDRESS (verl-p40 cluster head / join)",
        env="VERL_P40_NODES",
        kind=int,
        low=1,
    )
    tf32: str = option(
        "auto",
        "TF32 matmuls in fp32 (tensor cores, 10-bit mantissa): auto is on for sm_80+ GPUs and off "
        "below, where they do not exist",
        env="VERL_P40_TF32",
        choices=("auto", "on", "off"),
    )
    sets: list[str] = field(default_factory=list)  # verl config values: --set KEY=VALUE and the positional ones


@dataclass
class VerlRunOptions(RunOptions):
    """A run's options with the verl config values given on the command line (`sets` is both, --set first; made
    again by `dataclasses.replace`, so a variant adds its values to `overrides`)."""

    set: list[str] = option([], "any verl config value (repeatable)", many=True, metavar="KEY=VALUE")
    overrides: list[str] = option([], "verl config values, as with --set", flag="", many=True, metavar="KEY=VALUE")

    def __post_init__(self) -> None:
        self.sets = [*self.set, *self.overrides]
