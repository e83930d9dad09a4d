"""The compose services' entrypoints (entrypoints/<service>.sh, which exec the installed `verl-p40`) given what a
user's `.env` hands them through docker-compose.yml: each bad value ends in the one line naming the variable (or the
file) and the fix, exit 2, nothing changed. The arguments are those docker-compose.yml passes by default."""

from __future__ import annotations

import pytest

from bad_inputs.conftest import T, check_case, entrypoint

PREP = ["data-prep.sh", "--skip-existing"]
SOURCES = {"VERL_P40_GSM8K_SOURCE": f"{T}/src", "VERL_P40_DATA": f"{T}/d"}
FETCH = {"VERL_P40_MODEL": f"{T}/m"}
TRAIN = {
    "VERL_P40_PROFILE": "p40",
    "VERL_P40_MODEL": f"{T}/nomodel",
    "VERL_P40_DATA": f"{T}/prepared",
    "VERL_P40_CHECKPOINTS": f"{T}/ck",
}
EVAL = ["eval.sh", "--model", f"{T}/nomodel", "--compare", "latest", "--data", f"{T}/prepared/test.parquet"]
EXPORT = ["export.sh", "--model", "latest", "--out", f"{T}/x", "--gguf", "f16,q8_0"]
MONITOR = ["gpu-monitor.sh", "--out", f"{T}/g", "--port", "9400", "--bind", "0.0.0.0"]

CASES = [
    ("ep-data-prep-val-size", PREP, {**SOURCES, "VERL_P40_VAL_SIZE": "ten"}, "$VERL_P40_VAL_SIZE: 'ten'"),
    ("ep-data-prep-val-size-nan", PREP, {**SOURCES, "VERL_P40_VAL_SIZE": "nan"}, "$VERL_P40_VAL_SIZE: 'nan'"),
    ("ep-data-prep-source-missing", PREP, {**SOURCES, "VERL_P40_GSM8K_SOURCE": f"{T}/nope"}, "$VERL_P40_GSM8K_SOURCE"),
    ("ep-data-prep-out-is-a-file", PREP, {**SOURCES, "VERL_P40_DATA": f"{T}/a-file"}, "$VERL_P40_DATA"),
    (
        "ep-model-fetch-from-missing",
        ["model-fetch.sh"],
        {**FETCH, "VERL_P40_MODEL_FROM": f"{T}/nope"},
        "$VERL_P40_MODEL_FROM",
    ),
    ("ep-model-fetch-into-a-file", ["model-fetch.sh"], {"VERL_P40_MODEL": f"{T}/a-file"}, "$VERL_P40_MODEL"),
    ("ep-status-logs-a-file", ["status.sh"], {"VERL_P40_LOGS": f"{T}/a-file"}, "$VERL_P40_LOGS"),
    ("ep-trainer-profile", ["trainer.sh"], {**TRAIN, "VERL_P40_PROFILE": "p4O"}, "$VERL_P40_PROFILE: unknown profile"),
    ("ep-trainer-algorithm", ["trainer.sh"], {**TRAIN, "VERL_P40_ALGORITHM": "dpo"}, "$VERL_P40_ALGORITHM"),
    (
        "ep-trainer-cap-nan",
        ["trainer.sh"],
        {**TRAIN, "VERL_P40_GPU_MEMORY_CAP_GB": "nan"},
        "$VERL_P40_GPU_MEMORY_CAP_GB: 'nan' is not a finite",
    ),
    ("ep-trainer-lora-rank", ["trainer.sh"], {**TRAIN, "VERL_P40_LORA_RANK": "-8"}, "$VERL_P40_LORA_RANK: '-8'"),
    ("ep-trainer-tf32", ["trainer.sh"], {**TRAIN, "VERL_P40_TF32": "yes"}, "$VERL_P40_TF32: invalid choice: 'yes'"),
    ("ep-trainer-train-args", ["trainer.sh", "data.train_batch_size=ten"], TRAIN, "data.train_batch_size"),
    ("ep-doctor-gpus", ["doctor.sh"], {**TRAIN, "VERL_P40_GPUS": "first"}, "$VERL_P40_GPUS 'first'"),
    ("ep-gpu-monitor-interval", MONITOR, {"VERL_P40_MONITOR_INTERVAL": "0"}, "$VERL_P40_MONITOR_INTERVAL: '0'"),
    ("ep-eval-model-without-weights", EVAL, {"VERL_P40_CHECKPOINTS": f"{T}/ck"}, "nomodel: not a usable model folder"),
    ("ep-export-no-checkpoint", EXPORT, {"VERL_P40_CHECKPOINTS": f"{T}/ck"}, "ck: no verl checkpoint"),
    ("ep-ray-worker-no-head", ["ray-worker.sh"], {**TRAIN, "RAY_HEAD": ""}, "(RAY_HEAD) is needed"),
]


@pytest.mark.parametrize("name,args,env,expected", CASES, ids=[c[0] for c in CASES])
def test_a_services_bad_setting_gets_one_line_and_changes_nothing(world, name, args, env, expected):
    check_case(world, args, env, expected, run=entrypoint)
