"""Bad input across every command, as a new user meets it: each case must end with exit code 2 (3 where there is no
GPU driver), exactly one line on stderr naming the file/row/variable/value and what to do, no traceback, and every file
that was there before byte-for-byte as it was."""

from __future__ import annotations

import os

import pytest

from bad_inputs.conftest import T, check_case, without_a_driver_where_asked


def _dry_run_with(setting: str) -> list[str]:
    """`train --dry-run` of the prepared folder with one verl setting; the model check skipped (no model here)."""
    return ["train", "--profile", "p40", "--dry-run", "--model", f"{T}/nomodel", "--data", f"{T}/prepared", setting,
            "--skip-check", "model"]  # fmt: skip


CASES = [
    # prep
    ("prep-missing-source", ["prep", "--source", f"{T}/nope", "--out", f"{T}/o"], {}, "not a folder"),
    (
        "prep-source-is-out",
        ["prep", "--source", f"{T}/prepared", "--out", f"{T}/prepared"],
        {},
        "is the --source folder",
    ),
    ("prep-out-is-a-file", ["prep", "--source", f"{T}/src", "--out", f"{T}/a-file"], {}, "is a file"),
    (
        "prep-limit-zero",
        ["prep", "--source", f"{T}/src", "--out", f"{T}/o", "--limit", "0"],
        {},
        "--limit: '0' is not an integer from 1",
    ),
    ("prep-limit-text", ["prep", "--source", f"{T}/src", "--out", f"{T}/o", "--limit", "ten"], {}, "--limit: 'ten'"),
    ("prep-bad-utf8", ["prep", "--source", f"{T}/badutf8", "--out", f"{T}/o"], {}, "train.jsonl:1: not UTF-8"),
    (
        "prep-bad-utf8-skip",
        ["prep", "--source", f"{T}/badutf8", "--out", f"{T}/o", "--skip-invalid"],
        {},
        "split 'train' has no valid rows",
    ),
    (
        "prep-tokenizer-missing",
        ["prep", "--source", f"{T}/src", "--out", f"{T}/o", "--tokenizer", f"{T}/nope"],
        {},
        "cannot load a tokenizer",
    ),
    ("prep-unknown-flag", ["prep", "--sorce", "x"], {}, "unrecognized arguments"),
    # fetch-model
    (
        "fetch-out-is-a-file",
        ["fetch-model", "--out", f"{T}/a-file"],
        {"HF_HUB_OFFLINE": "1"},
        "is a file, not a folder",
    ),
    ("fetch-offline-empty", ["fetch-model", "--out", f"{T}/m"], {"HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE is set"),
    ("fetch-offline-no-weights", ["fetch-model", "--out", f"{T}/nomodel"], {"HF_HUB_OFFLINE": "1"}, "no weights"),
    (
        "fetch-unreachable",
        ["fetch-model", "--out", f"{T}/m"],
        {"HF_ENDPOINT": "http://127.0.0.1:9"},
        "cannot get the file list",
    ),
    # config / train --dry-run
    (
        "config-unknown-key",
        ["config", "--profile", "p40", "trainer.no_such=1"],
        {},
        "has no config key 'trainer.no_such'",
    ),
    (
        "config-batch-text",
        ["config", "--profile", "p40", "data.train_batch_size=abc"],
        {},
        "must be int like verl's default",
    ),
    (
        "config-batch-negative",
        ["config", "--profile", "p40", "data.train_batch_size=-5"],
        {},
        "must be at least 1, got -5",
    ),
    (
        "config-model-path-set",
        ["config", "--profile", "p40", "actor_rollout_ref.model.path=/models/other"],
        {},
        "actor_rollout_ref.model.path=/models/other: give the model as --model /models/other instead",
    ),
    (
        "config-epochs-zero",
        ["config", "--profile", "p40", "trainer.total_epochs=0"],
        {},
        "trainer.total_epochs must be at least 1, got 0",
    ),
    (
        "config-rollout-name",
        ["config", "--profile", "p40", "actor_rollout_ref.rollout.name=vllmx"],
        {},
        "'vllmx' is not one of hf, vllm, sglang",
    ),
    (
        "config-decode-compact-one",
        ["config", "--profile", "p40", "actor_rollout_ref.rollout.p40_decode_compact=1"],
        {},
        "actor_rollout_ref.rollout.p40_decode_compact=1 is not one of true, false",
    ),
    (
        "config-prefill-groups-zero",
        ["config", "--profile", "p40", "actor_rollout_ref.rollout.p40_prefill_groups=0"],
        {},
        "actor_rollout_ref.rollout.p40_prefill_groups must be a whole number, 1 or more, got 0",
    ),
    (
        "config-prefill-groups-half",
        ["config", "--profile", "p40", "actor_rollout_ref.rollout.p40_prefill_groups=2.5"],
        {},
        "actor_rollout_ref.rollout.p40_prefill_groups must be a whole number, 1 or more, got 2.5",
    ),
    (
        "config-estimator",
        ["config", "--profile", "p40", "algorithm.adv_estimator=grpoo"],
        {},
        "'grpoo' is not one of gae, grpo",
    ),
    (
        "config-mini-over-batch",
        ["config", "--profile", "p40", "actor_rollout_ref.actor.ppo_mini_batch_size=128"],
        {},
        "is larger than data.train_batch_size 32",  # the default recipe's 32 prompts a step
    ),
    (
        "config-micro-divides",
        ["config", "--profile", "p40", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3"],
        {},
        "does not divide",
    ),
    (
        "config-n-does-not-divide",
        ["config", "--profile", "p40", "--algorithm", "grpo", "--samples-per-prompt", "3"],
        {},
        "3 samples per prompt do not divide the profile's 64 sequences",
    ),
    ("config-unknown-algorithm", ["config", "--profile", "p40", "--algorithm", "dpo"], {}, "invalid choice: 'dpo'"),
    (
        "config-lora-rank-text",
        ["config", "--profile", "p40", "--lora-rank", "big"],
        {},
        "'big' is not an integer from 0",
    ),
    (
        "config-lora-rank-env",
        ["config", "--profile", "p40"],
        {"VERL_P40_LORA_RANK": "-1"},
        "$VERL_P40_LORA_RANK: '-1' is not an integer from 0",
    ),
    (
        "config-gpus-divide",
        ["config", "--profile", "p40", "trainer.n_gpus_per_node=3"],
        {},
        "must divide evenly over the GPUs",
    ),
    ("config-bool", ["config", "--profile", "p40", "trainer.val_before_train=maybe"], {}, "must be bool"),
    (
        "config-interpolation",
        ["config", "--profile", "p40", "--set", "trainer.experiment_name=${nope.key}"],
        {},
        "config rejected the overrides",
    ),
    (
        "config-bad-syntax",
        ["config", "--profile", "p40", "--set", "data.train_batch_size=[1"],
        {},
        "data.train_batch_size=[1: not a Hydra override",
    ),
    (
        "config-set-no-equals",
        ["config", "--profile", "p40", "--set", "data.train_batch_size"],
        {},
        "expected key=value",
    ),
    ("config-unknown-profile", ["config", "--profile", "p4O"], {}, "unknown profile 'p4O'"),
    (
        "config-bad-reward-method",
        ["config", "--profile", "p40", "--reward-method", "loose"],
        {},
        "invalid choice: 'loose'",
    ),
    ("env-format-bonus", ["config", "--profile", "p40"], {"VERL_P40_FORMAT_BONUS": "abc"}, "$VERL_P40_FORMAT_BONUS"),
    (
        "env-format-bonus-negative",
        ["config", "--profile", "p40"],
        {"VERL_P40_FORMAT_BONUS": "-1"},
        "$VERL_P40_FORMAT_BONUS",
    ),
    (
        "env-memory-cap",
        ["train", "--profile", "p40", "--dry-run"],
        {"VERL_P40_GPU_MEMORY_CAP_GB": "24GB"},
        "$VERL_P40_GPU_MEMORY_CAP_GB",
    ),
    (
        "train-cap-zero",
        ["train", "--profile", "p40", "--dry-run", "--gpu-memory-cap-gb", "0"],
        {},
        "--gpu-memory-cap-gb: '0'",
    ),
    (
        "train-cap-and-external-lib",
        [
            "train",
            "--profile",
            "p40",
            "--dry-run",
            "--gpu-memory-cap-gb",
            "24",
            "actor_rollout_ref.model.external_lib=x",
        ],
        {},
        "cannot be combined",
    ),
    (
        "train-dry-run-no-model",
        ["train", "--profile", "p40", "--dry-run", "--model", f"{T}/nope", "--data", f"{T}/prepared"],
        {},
        "preflight: model",
    ),
    (
        "train-dry-run-no-data",
        ["train", "--profile", "p40", "--dry-run", "--model", f"{T}/nomodel", "--data", f"{T}/nope"],
        {},
        "train.parquet: missing",
    ),
    (  # a file verl reads, moved out of --data by KEY=VALUE: checked before Ray, not minutes into the run
        "train-dry-run-train-files-missing",
        _dry_run_with(f"data.train_files={T}/nope.parquet"),
        {},
        "/nope.parquet: missing; fix: fix data.train_files, or leave it out (--data gives",
    ),
    (
        "train-dry-run-train-files-in-the-data-folder",  # another file of the --data folder is checked too
        _dry_run_with(f"data.train_files={T}/prepared/train-small.parquet"),
        {},
        "prepared/train-small.parquet: missing; fix: fix data.train_files",
    ),
    (
        "train-dry-run-val-files-not-parquet",
        _dry_run_with(f"data.val_files={T}/bad.csv"),
        {},
        "bad.csv: not a readable parquet file",
    ),  # fmt: skip
    (
        "train-no-weights",
        [
            "train",
            "--profile",
            "p40",
            "--model",
            f"{T}/nomodel",
            "--data",
            f"{T}/prepared",
            "--skip-check",
            "gpu,kernels,compute,verl",
        ],
        {},
        "no weights (*.safetensors)",
    ),
    ("doctor-unknown-check", ["doctor", "--profile", "p40", "--skip-check", "kernel"], {}, "unknown check 'kernel'"),
    (
        "doctor-env-unknown-check",
        ["doctor", "--profile", "p40"],
        {"VERL_P40_DOCTOR_SKIP": "nvml"},
        "VERL_P40_DOCTOR_SKIP: unknown check",
    ),
    ("auto-profile-no-gpu", ["config", "--profile", "auto"], {}, "no NVIDIA GPU visible through NVML"),
    # eval
    (
        "eval-batch-zero",
        ["eval", "--model", f"{T}/nomodel", "--batch-size", "0"],
        {},
        "--batch-size: '0' is not an integer from 1",
    ),
    (
        "eval-limit-zero",
        ["eval", "--model", f"{T}/nomodel", "--limit", "0"],
        {},
        "--limit: '0' is not an integer from 1",
    ),
    (
        "eval-model-missing",
        ["eval", "--model", f"{T}/nope", "--data", f"{T}/prepared/test.parquet", "--out", f"{T}/e", "--device", "cpu"],
        {},
        "neither a Hugging Face model folder",
    ),
    (
        "eval-no-weights",
        [
            "eval",
            "--model",
            f"{T}/nomodel",
            "--data",
            f"{T}/prepared/test.parquet",
            "--out",
            f"{T}/e",
            "--device",
            "cpu",
        ],
        {},
        "no weights (*.safetensors)",
    ),
    (
        "eval-null-extra-info",
        ["eval", "--model", f"{T}/nomodel", "--data", f"{T}/nulls/test.parquet", "--out", f"{T}/e", "--device", "cpu"],
        {},
        "no weights",
    ),
    (
        "eval-latest-none",
        [
            "eval",
            "--model",
            "latest",
            "--checkpoints",
            f"{T}/nope",
            "--data",
            f"{T}/prepared/test.parquet",
            "--out",
            f"{T}/e",
            "--device",
            "cpu",
        ],
        {},
        "no verl checkpoint",
    ),
    # monitor
    ("monitor-port-range", ["monitor", "--port", "70000"], {}, "--port: '70000' is not an integer from 1 to 65535"),
    ("monitor-interval-zero", ["monitor", "--interval", "0"], {}, "--interval: '0' is not a number from 0.05"),
    ("monitor-plot-bad-csv", ["monitor", "--plot", f"{T}/bad.csv"], {}, "bad.csv: not a gpu.csv"),
    (
        "monitor-plot-bad-row",
        ["monitor", "--plot", f"{T}/gpu-bad-row.csv"],
        {},
        "gpu-bad-row.csv: not a gpu.csv written by verl-p40 monitor (ValueError: line 3: could not convert",
    ),
    ("monitor-plot-missing", ["monitor", "--plot", f"{T}/nope.csv"], {}, "nope.csv: cannot read"),
    ("monitor-no-driver", ["monitor", "--once"], {}, "no NVIDIA GPU visible through NVML"),
    ("monitor-gpus-all-no-driver", ["monitor", "--once", "--gpus", "all"], {}, "no NVIDIA GPU visible through NVML"),
    ("monitor-gpus-bad", ["monitor", "--once", "--gpus", "first"], {}, "--gpus 'first': use all, or GPU indices"),
    (
        "cluster-ray-port-env",
        ["cluster", "join", "--address", "h:1"],
        {"RAY_PORT": "abc"},
        "$RAY_PORT: 'abc' is not an integer from 1 to 65535 (the environment's value for --port",
    ),
    (
        "cluster-wait-env",
        ["cluster", "head"],
        {"VERL_P40_CLUSTER_WAIT_S": "soon"},
        "$VERL_P40_CLUSTER_WAIT_S: 'soon' is not a number from 0",
    ),
    ("patch-verl-not-verl", ["patch-verl", f"{T}/src"], {}, "not a verl package folder"),
]


@pytest.mark.parametrize("name,args,env,expected", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_one_line_and_changes_nothing(request, world, name, args, env, expected):
    without_a_driver_where_asked(request, expected)
    check_case(world, args, env, expected)


@pytest.mark.parametrize("command", ["eval", "export", "bench"])
def test_a_command_whose_package_is_missing_says_so_in_one_line(tmp_path, tiny_model, command):
    """`pip install verl-p40` leaves torch and verl out (the image has them): a command that needs one says which and
    what to do, in one line, instead of a ModuleNotFoundError traceback. torch and verl are made unimportable here."""
    import subprocess
    import sys

    args = {
        "eval": ["eval", "--model", str(tiny_model), "--data", str(tmp_path / "d.parquet")],
        "export": ["export", "--model", str(tiny_model), "--out", str(tmp_path / "x")],
        "bench": ["bench", "--profile", "p40", "--model", str(tiny_model)],
    }[command]
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['verl'] = None; "
        "from verl_p40 import cli; sys.exit(cli.main(sys.argv[1:]))"
    )
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp)}
    result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=tmp_path, env=env)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert lines[0].startswith(f"verl-p40 {command}: error: this command needs the Python package ")
    assert "which is not installed here: run it in the image" in lines[0]
    assert [p.name for p in tmp_path.iterdir()] == ["tmp"] and list(temp.iterdir()) == []  # nothing written or left


def test_a_missing_module_of_our_own_is_not_passed_off_as_a_dependency():
    from verl_p40.cli import missing_dependency

    assert missing_dependency(ModuleNotFoundError("x", name="verl_p40.nothing")) is None
    assert "'torch'" in missing_dependency(ModuleNotFoundError("x", name="torch.cuda"))
