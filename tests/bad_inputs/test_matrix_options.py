"""Bad numbers, environment values, Hydra overrides, settings files and paths, as every command reads them
(verl_p40.options, verl_p40.cli_options): each case ends in one line naming the flag, the variable, the override or
the file, exit code 2, no traceback, nothing changed. Environment values here may name world paths ("{tmp}"); the
settings folders (profiles, algorithms) a user edited badly are made in the world for each case."""

from __future__ import annotations

import shutil

import pytest

from bad_inputs.conftest import T, check_case
from conftest import REPO, cli

P40 = ["config", "--profile", "p40"]
NO_RAY_HEAD = {"RAY_HEAD": ""}  # `cluster join` cases stop before Ray whatever this machine's environment says


def settings(name: str) -> dict[str, str]:
    """The environment for a copy of the shipped settings (profiles, algorithms, lora.yaml) with one file edited."""
    return {"VERL_P40_PROFILES_DIR": f"{T}/settings/{name}/profiles"}


# settings folder -> {file under it: its text}: the edits a user can get wrong
EDITS: dict[str, dict[str, str | bytes]] = {
    "dup": {"profiles/p40.yaml": "verl:\n  data:\n    train_batch_size: 64\n  data:\n    max_prompt_length: 256\n"},
    "text-number": {"profiles/p40.yaml": "verl:\n  data:\n    train_batch_size: lots\n"},
    "empty": {"profiles/p40.yaml": ""},
    "list": {"profiles/p40.yaml": "- data\n- trainer\n"},
    "section-list": {"profiles/p40.yaml": "verl:\n  data: [1, 2]\n"},
    "match-text": {"profiles/p40.yaml": "match:\n  min_compute_capability: six\nverl: {}\n"},
    "match-list": {"profiles/p40.yaml": "match: [6.0, 6.9]\nverl: {}\n"},
    "measured-nan": {"profiles/p40.yaml": "measured:\n  worker_peak_gb: .nan\nverl: {}\n"},
    "extends-missing": {"profiles/p40.yaml": "extends: pascal\nverl: {}\n"},
    "bad-yaml": {"profiles/p40.yaml": "verl:\n  data: [1\n  trainer: {}\n"},
    "not-utf8": {"profiles/p40.yaml": b"description: caf\xe9\nverl: {}\n"},
    "lr-nan": {"profiles/p40.yaml": "verl:\n  actor_rollout_ref:\n    actor:\n      optim:\n        lr: .nan\n"},
    "other-dup": {"profiles/volta-turing.yaml": "description: a\ndescription: b\nverl: {}\n"},
    "algo-dup": {"algorithms/grpo.yaml": "verl:\n  actor_rollout_ref:\n    rollout:\n      n: 4\n      n: 8\n"},
    "algo-empty": {"algorithms/empty.yaml": ""},
    "algo-n-zero": {"algorithms/none.yaml": "verl:\n  actor_rollout_ref:\n    rollout:\n      n: 0\n"},
    "algo-bonus-nan": {
        "algorithms/nanbonus.yaml": "verl:\n  custom_reward_function:\n    reward_kwargs:\n      format_bonus: .nan\n"
    },
    "algo-method": {
        "algorithms/loose.yaml": "verl:\n  custom_reward_function:\n    reward_kwargs:\n      method: loose\n"
    },
    "algo-section": {"algorithms/flat.yaml": "verl:\n  algorithm: grpo\n"},
    "lora-dup": {
        "lora.yaml": "verl:\n  actor_rollout_ref:\n    model:\n      target_modules: all-linear\n"
        "      target_modules: [q_proj]\n"
    },
}


def make_settings(world) -> None:
    for name, edits in EDITS.items():
        root = world / "settings" / name
        shutil.copytree(REPO / "config", root, ignore=shutil.ignore_patterns("__init__.py", "__pycache__"))
        for relative, text in edits.items():
            path = root / relative
            path.write_bytes(text if isinstance(text, bytes) else text.encode())
    (world / "no-profiles").mkdir()
    (world / "no-profiles" / "notes.txt").write_text("not a profile")


CASES = [
    # environment values: read after parsing, for the command that has the option; the line names the variable
    (
        "opt-env-val-size",
        ["prep", "--source", f"{T}/src", "--out", f"{T}/o"],
        {"VERL_P40_VAL_SIZE": "ten"},
        "$VERL_P40_VAL_SIZE: 'ten' is not an integer from 0 (the environment's value for --val-size",
    ),
    ("opt-env-algorithm", P40, {"VERL_P40_ALGORITHM": "dpo"}, "$VERL_P40_ALGORITHM: invalid choice: 'dpo'"),
    (
        "opt-env-reward-method",
        P40,
        {"VERL_P40_REWARD_METHOD": "loose"},
        "$VERL_P40_REWARD_METHOD: invalid choice: 'loose' (choose from strict, flexible)",
    ),
    (
        "opt-env-tf32",
        P40,
        {"VERL_P40_TF32": "yes"},
        "$VERL_P40_TF32: invalid choice: 'yes' (choose from auto, on, off)",
    ),
    ("opt-env-profile", ["config"], {"VERL_P40_PROFILE": "p4O"}, "$VERL_P40_PROFILE: unknown profile 'p4O'"),
    ("opt-env-gpus", P40, {"VERL_P40_GPUS": "first"}, "$VERL_P40_GPUS 'first': use all, or GPU indices"),
    ("opt-gpus-empty", [*P40, "--gpus", ""], {}, "--gpus '' names no GPU: use all, or GPU indices"),
    (
        "opt-env-gpus-cluster",
        ["cluster", "join", "--address", "h:1"],
        {**NO_RAY_HEAD, "VERL_P40_GPUS": "0,0"},
        "$VERL_P40_GPUS '0,0': use all, or distinct GPU indices",
    ),
    (
        "opt-env-monitor-alert",
        ["monitor", "--once"],
        {"VERL_P40_MONITOR_ALERT_MEM_PCT": "high"},
        "$VERL_P40_MONITOR_ALERT_MEM_PCT: 'high' is not a number",
    ),
    (
        "opt-env-monitor-interval",
        ["monitor", "--once"],
        {"VERL_P40_MONITOR_INTERVAL": "fast"},
        "$VERL_P40_MONITOR_INTERVAL: 'fast' is not a number from 0.05",
    ),
    # numbers: finite only, from a flag and from a variable
    ("opt-format-bonus-nan", [*P40, "--format-bonus", "nan"], {}, "--format-bonus: 'nan' is not a finite number"),
    (
        "opt-env-format-bonus-inf",
        P40,
        {"VERL_P40_FORMAT_BONUS": "inf"},
        "$VERL_P40_FORMAT_BONUS: 'inf' is not a finite number from 0",
    ),
    (
        "opt-env-memory-cap-nan",
        ["train", "--profile", "p40", "--dry-run"],
        {"VERL_P40_GPU_MEMORY_CAP_GB": "nan"},
        "$VERL_P40_GPU_MEMORY_CAP_GB: 'nan' is not a finite number from 0.5",
    ),
    (
        "opt-memory-cap-inf",
        ["train", "--profile", "p40", "--dry-run", "--gpu-memory-cap-gb", "inf"],
        {},
        "--gpu-memory-cap-gb: 'inf' is not a finite number",
    ),
    ("opt-monitor-interval-nan", ["monitor", "--once", "--interval", "nan"], {}, "--interval: 'nan' is not a finite"),
    ("opt-monitor-alert-nan", ["monitor", "--once", "--alert-mem-pct", "nan"], {}, "--alert-mem-pct: 'nan'"),
    ("opt-monitor-csv-inf", ["monitor", "--once", "--max-csv-mb", "inf"], {}, "--max-csv-mb: 'inf' is not a finite"),
    (
        "opt-cluster-wait-nan",
        ["cluster", "join"],
        {**NO_RAY_HEAD, "VERL_P40_CLUSTER_WAIT_S": "nan"},
        "$VERL_P40_CLUSTER_WAIT_S: 'nan' is not a finite number from 0",
    ),
    ("opt-cluster-wait-inf", ["cluster", "join", "--wait-s", "inf"], NO_RAY_HEAD, "--wait-s: 'inf' is not a finite"),
    (
        "opt-set-lr-nan",
        [*P40, "actor_rollout_ref.actor.optim.lr=nan"],
        {},
        "--set actor_rollout_ref.actor.optim.lr=nan: actor_rollout_ref.actor.optim.lr must be a finite number, got nan",
    ),
    (
        "opt-set-lr-negative",
        [*P40, "actor_rollout_ref.actor.optim.lr=-1e-6"],
        {},
        "actor_rollout_ref.actor.optim.lr must be at least 0, got -1e-06",
    ),
    (
        "opt-set-temperature-nan",
        [*P40, "actor_rollout_ref.rollout.temperature=nan"],
        {},
        "actor_rollout_ref.rollout.temperature must be a finite number",
    ),
    (
        "opt-set-format-bonus-nan",
        [*P40, "custom_reward_function.reward_kwargs.format_bonus=nan"],
        {},
        "custom_reward_function.reward_kwargs.format_bonus must be a finite number, got nan",
    ),
    (
        "opt-set-format-bonus-text",
        [*P40, "custom_reward_function.reward_kwargs.format_bonus=big"],
        {},
        "custom_reward_function.reward_kwargs.format_bonus must be a finite number of at least 0, got 'big'",
    ),
    (
        "opt-set-total-steps-text",
        [*P40, "trainer.total_training_steps=abc"],
        {},
        "trainer.total_training_steps must be a whole number or null, got 'abc'",
    ),
    (
        "opt-set-micro-text",
        [*P40, "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=eight"],
        {},
        "log_prob_micro_batch_size_per_gpu must be a whole number or null",
    ),
    # Hydra's forms: delete, add, force-add, sections, values Hydra cannot read
    ("opt-hydra-delete-unknown", [*P40, "~trainer.no_such"], {}, "verl 0.5.0 has no config key 'trainer.no_such'"),
    (
        "opt-hydra-delete-read",
        [*P40, "~data.train_batch_size"],
        {},
        "~data.train_batch_size: verl 0.5.0's trainer reads data.train_batch_size, so deleting it breaks the run",
    ),
    (
        "opt-hydra-delete-unset-extension",
        [*P40, "~actor_rollout_ref.model.override_config.rope_theta"],
        {},
        "nothing sets actor_rollout_ref.model.override_config.rope_theta, so there is nothing to delete",
    ),
    (
        "opt-hydra-add-existing",
        [*P40, "+data.train_batch_size=32"],
        {},
        "verl 0.5.0 already has data.train_batch_size; drop the '+' (data.train_batch_size=32)",
    ),
    (
        "opt-hydra-section",
        [*P40, "algorithm=grpo"],
        {},
        "algorithm is a section of verl's config, not a value; set the keys inside it one by one (algorithm.KEY=VALUE)",
    ),
    ("opt-hydra-section-list", [*P40, "--set", "data=[1,2]"], {}, "data is a section of verl's config"),
    (
        "opt-hydra-force-add-text",
        [*P40, "++data.train_batch_size=abc"],
        {},
        "data.train_batch_size must be int like verl's default (1024), got 'abc'",
    ),
    ("opt-hydra-empty-key", [*P40, "--set", "=5"], {}, "--set '=5': expected key=value"),
    (
        "opt-hydra-unclosed-list",
        [*P40, "trainer.logger=[console,"],
        {},
        "--set trainer.logger=[console,: not a Hydra override",
    ),
    ("opt-hydra-sweep", [*P40, "data.train_batch_size=32,64"], {}, "several values (a Hydra sweep)"),
    # profiles a user edited, and $VERL_P40_PROFILES_DIR
    (
        "opt-profiles-dir-missing",
        ["profiles"],
        {"VERL_P40_PROFILES_DIR": f"{T}/nope"},
        f"$VERL_P40_PROFILES_DIR {T}/nope: not a folder: it does not exist",
    ),
    ("opt-profiles-dir-file", P40, {"VERL_P40_PROFILES_DIR": f"{T}/a-file"}, "a-file: is a file, not a folder"),
    (
        "opt-profiles-dir-no-yaml",
        ["profiles"],
        {"VERL_P40_PROFILES_DIR": f"{T}/no-profiles"},
        "no-profiles: no profile files (NAME.yaml) in it",
    ),
    ("opt-profile-duplicate-key", P40, settings("dup"), "p40.yaml: not valid YAML (line 4: duplicate key 'data'"),
    ("opt-profiles-list-duplicate", ["profiles"], settings("other-dup"), "volta-turing.yaml: not valid YAML"),
    (
        "opt-profile-text-number",
        P40,
        settings("text-number"),
        "p40.yaml: data.train_batch_size must be int like verl's default (1024), got 'lots'",
    ),
    ("opt-profile-empty", P40, settings("empty"), "p40.yaml: the file is empty"),
    ("opt-profile-list", P40, settings("list"), "p40.yaml: a settings file is a mapping with a 'verl' mapping"),
    (
        "opt-profile-section-list",
        P40,
        settings("section-list"),
        "p40.yaml: verl.data is a section of settings in the profile it extends",
    ),
    (
        "opt-profile-match-text",
        P40,
        settings("match-text"),
        "p40.yaml: match.min_compute_capability must be a finite number, got 'six'",
    ),
    ("opt-profile-match-list", P40, settings("match-list"), "p40.yaml: match must be a mapping of names to numbers"),
    ("opt-profile-measured-nan", P40, settings("measured-nan"), "measured.worker_peak_gb must be a finite number"),
    ("opt-profile-extends-missing", P40, settings("extends-missing"), "p40.yaml: extends 'pascal', which is not a"),
    ("opt-profile-bad-yaml", P40, settings("bad-yaml"), "p40.yaml: not valid YAML (line 3: expected ',' or ']'"),
    ("opt-profile-not-utf8", P40, settings("not-utf8"), "p40.yaml: not UTF-8 text"),
    ("opt-profile-lr-nan", P40, settings("lr-nan"), "p40.yaml: actor_rollout_ref.actor.optim.lr must be a finite"),
    # algorithm files and lora.yaml beside the profiles
    ("opt-algorithm-duplicate-key", [*P40, "--algorithm", "grpo"], settings("algo-dup"), "duplicate key 'n'"),
    ("opt-algorithm-empty", [*P40, "--algorithm", "empty"], settings("algo-empty"), "empty.yaml: the file is empty"),
    (
        "opt-algorithm-n-zero",
        [*P40, "--algorithm", "none"],
        settings("algo-n-zero"),
        "none.yaml: actor_rollout_ref.rollout.n must be a whole number of samples per prompt, got 0",
    ),
    (
        "opt-algorithm-bonus-nan",
        [*P40, "--algorithm", "nanbonus"],
        settings("algo-bonus-nan"),
        "nanbonus.yaml: custom_reward_function.reward_kwargs.format_bonus must be a finite number",
    ),
    (
        "opt-algorithm-method",
        [*P40, "--algorithm", "loose"],
        settings("algo-method"),
        "loose.yaml: reward method 'loose' must be one of strict, flexible",
    ),
    (
        "opt-algorithm-section",
        [*P40, "--algorithm", "flat"],
        settings("algo-section"),
        "flat.yaml: algorithm: algorithm is a section of verl's config",
    ),
    ("opt-lora-duplicate-key", [*P40, "--lora-rank", "8"], settings("lora-dup"), "duplicate key 'target_modules'"),
    # paths: a folder where a file belongs and the reverse, named by the flag or the variable
    (
        "opt-train-data-file",
        ["train", "--profile", "p40", "--dry-run", "--data", f"{T}/a-file"],
        {},
        f"--data {T}/a-file: is a file, not a folder",
    ),
    (
        "opt-env-model-file",
        ["train", "--profile", "p40", "--dry-run"],
        {"VERL_P40_MODEL": f"{T}/a-file"},
        f"$VERL_P40_MODEL {T}/a-file: is a file, not a folder (the environment's value for --model",
    ),
    (
        "opt-env-prep-out-file",
        ["prep", "--source", f"{T}/src"],
        {"VERL_P40_DATA": f"{T}/a-file"},
        f"$VERL_P40_DATA {T}/a-file: is a file, not a folder",
    ),
    (
        "opt-prep-source-file",
        ["prep", "--source", f"{T}/a-file", "--out", f"{T}/o"],
        {},
        f"--source {T}/a-file: is a file, not a folder",
    ),
    (
        "opt-env-prep-source-missing",
        ["prep", "--out", f"{T}/o"],
        {"VERL_P40_GSM8K_SOURCE": f"{T}/nope"},
        f"$VERL_P40_GSM8K_SOURCE {T}/nope: not a folder: it does not exist",
    ),
    (
        "opt-prep-summary-is-folder",
        ["prep", "--source", f"{T}/src", "--out", f"{T}/o", "--summary-json", f"{T}/src"],
        {},
        f"--summary-json {T}/src: is a folder, not a file",
    ),
    (
        "opt-prep-tokenizer-file",
        ["prep", "--source", f"{T}/src", "--out", f"{T}/o", "--tokenizer", f"{T}/a-file"],
        {},
        f"--tokenizer {T}/a-file: is a file, not a folder",
    ),
    (
        "opt-prep-cache-inside-file",
        ["prep", "--out", f"{T}/o", "--cache-dir", f"{T}/a-file/cache"],
        {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"},
        f"{T}/a-file is a file, so nothing can be inside it",
    ),
    (
        "opt-env-fetch-from-file",
        ["fetch-model", "--out", f"{T}/m"],
        {"VERL_P40_MODEL_FROM": f"{T}/a-file"},
        f"$VERL_P40_MODEL_FROM {T}/a-file: is a file, not a folder",
    ),
    (
        "opt-env-fetch-out-file",
        ["fetch-model"],
        {"HF_HUB_OFFLINE": "1", "VERL_P40_MODEL": f"{T}/a-file"},
        f"$VERL_P40_MODEL {T}/a-file: is a file",
    ),
    (
        "opt-eval-out-file",
        ["eval", "--model", f"{T}/nomodel", "--out", f"{T}/a-file", "--device", "cpu"],
        {},
        f"--out {T}/a-file: is a file, not a folder",
    ),
    (
        "opt-env-eval-checkpoints-file",
        ["eval", "--model", "latest", "--device", "cpu"],
        {"VERL_P40_CHECKPOINTS": f"{T}/a-file"},
        f"$VERL_P40_CHECKPOINTS {T}/a-file: is a file",
    ),
    (
        "opt-env-eval-logs-file",
        ["eval", "--model", f"{T}/nomodel", "--device", "cpu"],
        {"VERL_P40_LOGS": f"{T}/a-file"},
        f"$VERL_P40_LOGS {T}/a-file/eval: {T}/a-file is a file",
    ),
    (
        "opt-eval-model-file",
        ["eval", "--model", f"{T}/a-file", "--device", "cpu"],
        {},
        f"--model {T}/a-file: is a file, not a folder",
    ),
    (
        "opt-env-export-out-file",
        ["export", "--model", f"{T}/nomodel"],
        {"VERL_P40_EXPORT": f"{T}/a-file"},
        f"$VERL_P40_EXPORT {T}/a-file: is a file, not a folder",
    ),
    (
        "opt-export-checkpoints-file",
        ["export", "--checkpoints", f"{T}/a-file", "--out", f"{T}/x"],
        {},
        f"--checkpoints {T}/a-file: is a file, not a folder",
    ),
    ("opt-monitor-out-file", ["monitor", "--once", "--out", f"{T}/a-file"], {}, f"--out {T}/a-file: is a file"),
    ("opt-monitor-plot-folder", ["monitor", "--plot", f"{T}/src"], {}, f"--plot {T}/src: is a folder, not a file"),
    (
        "opt-monitor-plot-out-folder",
        ["monitor", "--plot", f"{T}/bad.csv", "--plot-out", f"{T}/src"],
        {},
        f"--plot-out {T}/src: is a folder, not a file",
    ),
    (
        "opt-bench-out-folder",
        ["bench", "--profile", "p40", "--model", f"{T}/nope", "--out", f"{T}/src"],
        {},
        f"--out {T}/src: is a folder, not a file",
    ),
    (
        "opt-bench-keep-model-file",
        ["bench", "--profile", "p40", "--model", f"{T}/nope", "--keep-model", f"{T}/a-file"],
        {},
        f"--keep-model {T}/a-file: is a file, not a folder",
    ),
    (
        "opt-doctor-checkpoints-file",
        ["doctor", "--profile", "p40", "--checkpoints", f"{T}/a-file"],
        {},
        f"--checkpoints {T}/a-file: is a file, not a folder",
    ),
    ("opt-patch-verl-file", ["patch-verl", "--check", f"{T}/a-file"], {}, f"VERL_DIR {T}/a-file: is a file"),
    ("opt-status-logs-file", ["status", "--logs", f"{T}/a-file"], {}, f"--logs {T}/a-file: is a file, not a folder"),
    ("opt-status-no-file", ["status", "--logs", f"{T}/nope"], {}, f"no {T}/nope/status.json yet"),
]


def _world_text(value: str, world) -> str:
    return value.replace(T, str(world))


@pytest.mark.parametrize("name,args,env,expected", CASES, ids=[c[0] for c in CASES])
def test_bad_option_gets_one_line_and_changes_nothing(world, name, args, env, expected):
    make_settings(world)
    check_case(world, args, {k: _world_text(v, world) for k, v in env.items()}, _world_text(expected, world))


# every variable above at its bad value at once: what a broken .env holds
BAD_ENVIRONMENT = {k: v for _, _, env, _ in CASES for k, v in env.items() if T not in v and k.startswith("VERL_P40_")}


@pytest.mark.parametrize(
    "command",
    [
        None,
        "prep",
        "fetch-model",
        "config",
        "train",
        "cluster",
        "bench",
        "doctor",
        "patch-verl",
        "monitor",
        "eval",
        "export",
        "profiles",
        "status",
    ],
)
def test_a_broken_environment_never_breaks_help(command, tmp_path):
    env = {**BAD_ENVIRONMENT, "VERL_P40_PROFILES_DIR": str(tmp_path / "nope"), "VERL_P40_LOGS": str(tmp_path)}
    result = cli(*([command] if command else []), "--help", env=env)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert result.stdout.startswith("usage: verl-p40")


def test_a_bad_variable_of_one_command_does_not_stop_another(world):
    """prep has no --format-bonus, --wait-s or --gpu-memory-cap-gb: their variables are not read by prep."""
    env = {k: v for k, v in BAD_ENVIRONMENT.items() if k not in ("VERL_P40_VAL_SIZE", "VERL_P40_PROFILES_DIR")}
    result = cli("prep", "--source", str(world / "src"), "--out", str(world / "again"), env=env)
    assert result.returncode == 0, result.stderr
    assert (world / "again" / "train.parquet").is_file()


def test_a_flag_given_replaces_a_bad_variable(world):
    result = cli(*P40, "--overrides-only", "--lora-alpha", "16", "--lora-rank", "8", env={"VERL_P40_LORA_ALPHA": "0"})
    assert result.returncode == 0, result.stderr
    assert "actor_rollout_ref.model.lora_alpha=16" in result.stdout.split()


def test_deleting_a_key_something_set_is_hydras_own(world):
    """`~key` stays possible where it means something: a key verl reads with .get() that the profile set."""
    result = cli(*P40, "--overrides-only", "~actor_rollout_ref.model.override_config.attn_implementation")
    assert result.returncode == 0, result.stderr
    assert "~actor_rollout_ref.model.override_config.attn_implementation" in result.stdout.split()
