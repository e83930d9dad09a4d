"""Where every command looks by default, each in one place with the environment variable that overrides it
(compose sets these for its services)."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Default:
    env: str
    value: str

    def get(self) -> str:
        """The environment's value where set and not empty, else the built-in one."""
        return os.environ.get(self.env) or self.value

    def join(self, *parts: str) -> str:
        return os.path.join(self.get(), *parts)


MODEL_REPO = Default("VERL_P40_MODEL_REPO", "Qwen/Qwen2.5-0.5B-Instruct")
MODELS = Default("VERL_P40_MODELS", "models")  # the folder the fetched models live in (compose: the models volume)


def model_folder(repo: str) -> str:
    """Where the model of a hub repository lives: MODELS/<its name> (Qwen/Qwen2.5-1.5B-Instruct ->
    models/Qwen2.5-1.5B-Instruct), so another MODEL_REPO is another folder, never the default one's."""
    return os.path.join(MODELS.get(), repo.rstrip("/").rsplit("/", 1)[-1] or repo)


MODEL = Default("VERL_P40_MODEL", model_folder(MODEL_REPO.get()))  # fetch-model --out, train/eval --model
DATA = Default("VERL_P40_DATA", "data/gsm8k")
GSM8K_SOURCE = Default("VERL_P40_GSM8K_SOURCE", "hf:openai/gsm8k")
VAL_SIZE = Default("VERL_P40_VAL_SIZE", "256")  # prep: train rows held out as val.parquet (compose's VAL_SIZE too)
VAL_FROM_TRAIN = 4  # prep's default slice is held out of a train split of at least this many times its rows
CHECKPOINTS = Default("VERL_P40_CHECKPOINTS", "checkpoints")
LOGS = Default("VERL_P40_LOGS", "logs")
EXPORTS = Default("VERL_P40_EXPORT", "exports")  # export --out
MODEL_FROM = Default("VERL_P40_MODEL_FROM", "")  # fetch-model --from: a model folder to copy instead of the hub
DATASETS_CACHE = Default("HF_DATASETS_CACHE", "")  # prep --cache-dir for hf: sources (the datasets library's own)
PROFILES_DIR = Default("VERL_P40_PROFILES_DIR", "")  # hardware profiles; empty: the ones shipped in the package
DOCTOR_SKIP = Default("VERL_P40_DOCTOR_SKIP", "")  # checks skipped by name, as with --skip-check
RAY_HEAD = Default("RAY_HEAD", "")  # cluster join --address
RAY_NODE_IP = Default("RAY_NODE_IP", "")  # cluster --node-ip; empty: Ray's guess
RAY_PORT = Default("RAY_PORT", "6379")  # cluster: the head's Ray port; every host also uses the 102 after it
CLUSTER_WAIT_S = Default("VERL_P40_CLUSTER_WAIT_S", "900")  # cluster head: how long to wait for the other hosts

# What the trainer's workers apply when verl imports verl_p40.worker_hooks (named here, not imported: importing that
# module applies the memory cap, TF32 and cuDNN attention settings, which must happen in a worker, never in the CLI)
GPU_MEMORY_CAP_ENV = "VERL_P40_GPU_MEMORY_CAP_GB"  # the user's `--gpu-memory-cap-gb`, read by the CLI only
GPU_MEMORY_CAP_MIN_GB = 0.5  # the one rule for --gpu-memory-cap-gb, checked once: where the option is read
WORKER_HOOKS_MODULE = "verl_p40.worker_hooks"  # applies WORKER_MEMORY_CAP_ENV, TF32_ENV and NO_CUDNN_ATTENTION_ENV
WORKER_ENV_PREFIX = "VERL_P40_WORKER_"  # what verl_p40.worker_hooks reads in the workers: set by train's plan only
WORKER_MEMORY_CAP_ENV = "VERL_P40_WORKER_MEMORY_CAP_GB"  # the cap train's plan hands its workers (verl_p40.memcap)
TF32_ENV = "VERL_P40_WORKER_TF32"  # set by train for its workers; users set --tf32 ($VERL_P40_TF32)
NO_CUDNN_ATTENTION_ENV = "VERL_P40_WORKER_NO_CUDNN_ATTENTION"  # set by train for its workers on sm_80+

# Every other VERL_P40_ variable the project reads, so that this module names them all (tests/test_environment_names.py
# fails on a name in app/, entrypoints/ or bench/ that is not declared here): the options' variables, each declared
# with its option in the stage that takes it (plan/run_options.py; the monitor's in gpu/options.py), and the stack's.
ENVIRONMENT = {
    "VERL_P40_PROFILE": "--profile",
    "VERL_P40_REWARD_METHOD": "--reward-method",
    "VERL_P40_FORMAT_BONUS": "--format-bonus",
    "VERL_P40_ALGORITHM": "--algorithm",
    "VERL_P40_SAMPLES_PER_PROMPT": "--samples-per-prompt",
    "VERL_P40_LORA_RANK": "--lora-rank",
    "VERL_P40_LORA_ALPHA": "--lora-alpha",
    "VERL_P40_GPUS": "--gpus",
    "VERL_P40_BATCH": "--batch",
    "VERL_P40_NODES": "--nodes",
    "VERL_P40_TF32": "--tf32 (the user's; train hands its workers TF32_ENV)",
    "VERL_P40_MONITOR_INTERVAL": "monitor --interval",
    "VERL_P40_MONITOR_ALERT_MEM_PCT": "monitor --alert-mem-pct",
    "VERL_P40_SERVICE": "the compose service a process is (run/status.py)",
    "VERL_P40_APEX_CUDA_EXT": "the image's APEX_CUDA_EXT build argument (doctor/stack_checks.py)",
}


def is_worker_setting(name: str) -> bool:
    """An environment variable verl_p40.worker_hooks applies in the trainer's workers (the memory cap, TF32, cuDNN
    attention): the one rule for what the run's plan alone sets (run/trainer.py) and what travels with verl's job to
    every Ray host (the patch set's worker-settings-reach-every-host edit)."""
    return name.startswith(WORKER_ENV_PREFIX)
