"""The learning bench's summary (bench/learning_run.py report): what it counts as rollouts, GPUs and validation comes
from the trainer's own log, so a run on another layout is summarised right, and step 0 (validation only) is no step."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import learning_run  # noqa: E402
from lib import learning_heldout, learning_recipe, learning_report  # noqa: E402
from lib.real_runs import State  # noqa: E402

COMMAND = (
    "$ /usr/bin/python3 -m verl.trainer.main_ppo data.train_batch_size=16 actor_rollout_ref.rollout.n=8 "
    "trainer.n_gpus_per_node=2 trainer.nnodes=1 +trainer.stop_file=/tmp/x\n"
)


def write_work(work: Path, steps: int) -> None:
    (work / "logs").mkdir(parents=True)
    lines = [COMMAND, "(TaskRunner pid=1) step:0 - val-core/openai/gsm8k/reward/mean@1:0.25\n"]
    for step in range(1, steps + 1):
        val = " - val-core/openai/gsm8k/reward/mean@1:0.5" if step == steps else ""
        lines.append(
            f"(TaskRunner pid=1) step:{step} - critic/score/mean:np.float64(0.{step}) - actor/entropy:0.3"
            f" - response_length/mean:200.0 - response_length/clip_ratio:0.1 - timing_s/step:20.0{val}\n"
        )
    (work / "logs" / "train-1.log").write_text("".join(lines))
    (work / "eval-final").mkdir()
    report = {
        "questions": 1319,
        "dtype": "fp32",
        "max_new_tokens": 320,
        "models": {"base": {"flexible": 0.2}, "trained": {"flexible": 0.3}},
        "comparison": {"flexible": {}},
    }
    (work / "eval-final" / "report.json").write_text(json.dumps(report))
    (work / "eval-final" / "report.md").write_text("# report\n")
    state = State(work, "learning-state.json")
    state.data.update(
        {
            "train_log": "train-1.log",
            "wall_s": 300.0,
            "returncode": 0,
            "stop_sent_at_s": 250.0,
            "final_eval": {"commands": ["verl-p40 eval ..."], "wall_s": 60.0},
        }
    )
    state.save(work)


def test_report_counts_from_the_trainer_log(tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    out.mkdir()
    write_work(work, steps=3)
    result = learning_run.report(work, out, State(work, "learning-state.json"))
    assert result["training"]["steps"] == 3  # step 0 is the validation before training
    assert result["training"]["sequences_per_step"] == 128 and result["training"]["gpus"] == 2
    assert result["training"]["rollouts"] == 384 and result["training"]["prompts_seen"] == 48
    assert result["rollouts_per_gpu_minute"] == pytest.approx(384 / (2 * 5), abs=0.1)
    assert [v["step"] for v in result["validation"]] == [0, 3]
    assert result["held_out"]["questions"] == 1319 and result["held_out"]["dtype"] == "fp32"
    assert (out / f"learning-{result['date']}.png").stat().st_size > 0
    assert json.loads((out / f"learning-{result['date']}.json").read_text())["eval"]["trained"]["flexible"] == 0.3


def test_stop_only_leaves_a_note_for_the_session(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["learning_run.py", "stop", "--work", str(tmp_path)])
    learning_run.main()
    assert (tmp_path / "stop").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["stop"]


def test_the_fast_mode_runs_the_same_recipe_unmasked_through_the_cli(tmp_path):
    """The fast path is the product's CLI as a user runs it (the auto profile, the memory plan: no hand-set sizes),
    never a fork; the p40 mode is the P40 path (mask, 24 GB cap). Both train the one recipe with the same validation
    settings."""
    import argparse

    args = argparse.Namespace(
        mode="fast", test_freq=5, save_freq=10, steps=100, override=[], algorithm=learning_run.RECIPE
    )
    fast = learning_recipe.train_command(args, tmp_path)
    p40 = learning_recipe.train_command(argparse.Namespace(**{**vars(args), "mode": "p40"}), tmp_path)
    assert fast[1:4] == ["-m", "verl_p40.cli", "train"] and p40[1:4] == fast[1:4]
    for command in (fast, p40):
        assert command[command.index("--algorithm") + 1] == "grpo-gsm8k"
        assert "trainer.test_freq=5" in command and "trainer.val_before_train=true" in command
    assert fast[fast.index("--profile") + 1] == "auto" and "--gpu-memory-cap-gb" not in fast
    assert p40[p40.index("--profile") + 1] == "p40" and p40[p40.index("--gpu-memory-cap-gb") + 1] == "24"
    assert learning_run.MODES["fast"]["mask"] is None and learning_run.MODES["p40"]["mask"] == "6.1"
    args.algorithm = "ppo-gsm8k"  # --algorithm: the recipe to compare with, the rest the same
    other = learning_recipe.train_command(args, tmp_path)
    assert other[other.index("--algorithm") + 1] == "ppo-gsm8k" and len(other) == len(fast)
    # the only verl settings are the run's own (validation, saving, length) and issue 69's yardstick (the plan its
    # earlier runs had: the speed-ups issue 67 adopted pinned off): the sizes are the memory plan's
    assert [w for w in fast if "=" in w] == [
        "trainer.val_before_train=true",
        "trainer.test_freq=5",
        "trainer.save_freq=10",
        "trainer.total_training_steps=100",
        *learning_recipe.YARDSTICK_SETS,
    ]
    assert learning_recipe.YARDSTICK_SETS == [
        "actor_rollout_ref.rollout.p40_log_probs=pass",
        "actor_rollout_ref.actor.p40_update_tokens=0",
        "critic.p40_update_tokens=0",
        "actor_rollout_ref.rollout.p40_decode_compact=false",
    ]


def test_the_evaluated_checkpoint_is_picked_by_validation_never_by_the_test_split(tmp_path):
    """best-validation: the saved, validated step of highest validation accuracy (the later on a tie); step 0 (the
    base model) and steps without a checkpoint never count; latest, or nothing validated: the last saved."""
    log = tmp_path / "train.log"
    accuracy = {0: 0.40, 5: 0.30, 10: 0.35, 15: 0.35, 20: 0.50}
    log.write_text(
        COMMAND
        + "".join(f"(TaskRunner pid=1) step:{s} - val-core/openai/gsm8k/acc/mean@1:{a}\n" for s, a in accuracy.items())
    )
    ckpt = tmp_path / "ckpt" / "experiment"
    for step in (5, 10, 15, 18):  # 20 was validated but never saved
        (ckpt / f"global_step_{step}" / "actor").mkdir(parents=True)
    picked = learning_heldout.pick_checkpoint("best-validation", log, tmp_path / "ckpt")
    assert picked["step"] == 15 and picked["validation_accuracy"] == 0.35
    assert picked["path"].endswith("global_step_15/actor") and set(picked["candidates"]) == {"5", "10", "15"}
    assert learning_heldout.pick_checkpoint("latest", log, tmp_path / "ckpt")["step"] == 18
    log.write_text(COMMAND)
    assert learning_heldout.pick_checkpoint("best-validation", log, tmp_path / "ckpt")["step"] == 18
    with pytest.raises(SystemExit, match="no checkpoint was saved"):
        learning_heldout.pick_checkpoint("latest", log, tmp_path / "nothing")


def test_a_run_without_the_held_out_evaluation_reports_its_validation_curve(tmp_path):
    """session --no-eval (a p40-mode run that only has time for its curve): the record says it was not evaluated,
    and gives each validation's prompts seen, the axis runs of other batches are compared on."""
    work, out = tmp_path / "work", tmp_path / "out"
    out.mkdir()
    write_work(work, steps=3)
    for name in ("report.json", "report.md"):
        (work / "eval-final" / name).unlink()
    result = learning_run.report(work, out, State(work, "learning-state.json"))
    assert result["eval"] is None and result["comparison"] is None
    assert "not evaluated" in result["held_out"]
    assert [(v["step"], v["prompts_seen"]) for v in result["validation"]] == [(0, 0), (3, 48)]
    # 3 steps of 20 s on 2 GPUs before the last validation: 2 GPU-minutes (start-up and validation not counted)
    assert [v["train_gpu_minutes"] for v in result["validation"]] == [0.0, 2.0]
    assert result["recipe"] == "grpo-gsm8k"  # a state from before --algorithm: the recipe
    assert not list(out.glob("learning-eval-*"))
    assert (out / f"learning-{result['date']}.png").stat().st_size > 0


def test_the_audit_is_one_unvalidated_unsaved_step_of_the_recipe_on_the_p40_path(tmp_path):
    import argparse

    args = argparse.Namespace(
        mode="p40", test_freq=5, save_freq=5, steps=100, override=[], algorithm=learning_run.RECIPE
    )
    command = learning_recipe.train_command(args, tmp_path, audit=True)
    settings = [word for word in command if "=" in word]
    assert settings[: len(learning_recipe.AUDIT_SETS)] == learning_recipe.AUDIT_SETS
    assert "trainer.total_training_steps=1" in settings and "trainer.val_before_train=false" in settings
    assert not any(s.startswith("trainer.total_training_steps=100") or s == "trainer.test_freq=5" for s in settings)
    assert command[command.index("--algorithm") + 1] == "grpo-gsm8k"
    assert command[command.index("--logs") + 1] == str(tmp_path / "logs-audit")
    assert command[command.index("--checkpoints") + 1] == str(tmp_path / "ckpt-audit")
    args.mode = "fast"
    with pytest.raises(SystemExit, match="P40 path"):
        learning_run.audit(args, tmp_path, tmp_path)


def test_runs_are_compared_on_prompts_seen_gpu_minutes_or_p40_hours(tmp_path):
    """Recipes are compared at equal GPU-minutes of training steps (issue 40: ppo-gsm8k beside grpo-gsm8k), or per
    projected P40 hour; runs of other batches on prompts seen."""
    records = []
    for name, recipe, per_step, curve in (
        ("a", "grpo-gsm8k", 32, {0: (0.25, 0.0, 0.0), 5: (0.30, 1.0, 0.15)}),
        ("b", "ppo-gsm8k", 16, {0: (0.25, 0.0, 0.0), 10: (0.35, 1.5, 0.2)}),
    ):
        folder = tmp_path / name
        folder.mkdir()
        record = {
            "mode": "fast" if name == "a" else "p40",
            "recipe": recipe,
            "training": {"prompts_per_step": per_step},
            "validation": [
                {"step": s, "val-core/openai/gsm8k/acc/mean@1": a, "train_gpu_minutes": m, "p40_hours": h}
                for s, (a, m, h) in curve.items()
            ],
        }
        (folder / "learning.json").write_text(json.dumps(record))
        records.append(folder / "learning.json")
    table = learning_run.compare(records, tmp_path / "curves.png")
    lines = table.splitlines()
    assert lines[0] == (
        "| prompts seen | a (grpo-gsm8k, fast, 32 prompts a step) | b (ppo-gsm8k, p40, 16 prompts a step) |"
    )
    assert lines[2:] == ["| 0 | 25.0 % | 25.0 % |", "| 160 | 30.0 % | 35.0 % |"]  # 5 x 32 and 10 x 16
    assert (tmp_path / "curves.png").stat().st_size > 0
    minutes = learning_run.compare(records, tmp_path / "minutes.png", "gpu-minutes").splitlines()
    assert minutes[0].startswith("| GPU-minutes of training steps |")
    assert minutes[2:] == ["| 0.0 | 25.0 % | 25.0 % |", "| 1.0 | 30.0 % |  |", "| 1.5 |  | 35.0 % |"]
    hours = learning_run.compare(records, tmp_path / "hours.png", "p40-hours").splitlines()
    assert hours[3:] == ["| 0.15 | 30.0 % |  |", "| 0.2 |  | 35.0 % |"]
    del record["validation"][1]["train_gpu_minutes"]  # a record written before the axis existed
    (tmp_path / "b" / "learning.json").write_text(json.dumps(record))
    with pytest.raises(SystemExit, match="no train_gpu_minutes"):
        learning_run.compare(records, tmp_path / "minutes.png", "gpu-minutes")


def test_rescore_reads_a_returned_evaluation_again_with_this_checkout(tmp_path):
    """The committed fast-2 run's answers (learning-work.tgz) scored again: the paired sign test the docs quote comes
    from this checkout's scoring and statistics, whatever the device's report said (it printed p = 0)."""
    import tarfile

    bundle = Path(__file__).resolve().parents[2] / "bench/results/learning-2026-12-01/fast-2/learning-work.tgz"
    with tarfile.open(bundle) as tar:
        tar.extractall(tmp_path, members=[m for m in tar.getmembers() if m.name.startswith("eval-final/")])
    report = tmp_path / "eval-final" / "report.json"
    device = json.loads(report.read_text())
    assert device["comparison"]["flexible"]["p_value"] == 0.0  # as it came back
    learning_run.rescore(tmp_path)
    flexible = json.loads(report.read_text())["comparison"]["flexible"]
    assert (flexible["trained_only"], flexible["base_only"], flexible["p_value"]) == (183, 98, 4.463e-07)
    assert "| 183 | 98 | 4.46e-07 |" in (tmp_path / "eval-final" / "report.md").read_text()


def test_the_horizon_pairs_each_named_step_with_the_base_answered_once(tmp_path):
    """horizon-report on the committed fast-2 run: its step-20 answers and the base's, as two one-model evaluations
    (what `horizon` writes), give the paired test the docs quote (183 gained, 98 lost, p = 4.463e-07), beside prompts
    seen and the P40 hours the run's own steps project to."""
    import tarfile

    bundle = Path(__file__).resolve().parents[2] / "bench/results/learning-2026-12-01/fast-2/learning-work.tgz"
    with tarfile.open(bundle) as tar:
        tar.extractall(tmp_path / "work")
    work, out = tmp_path / "work", tmp_path / "out"
    out.mkdir()
    lines = (work / "eval-final" / "answers.jsonl").read_text().splitlines()
    for folder, label in (("eval-base", "base"), ("eval-step-20", "trained")):
        (work / folder).mkdir()
        kept = []
        for line in lines:
            record = json.loads(line)
            if "models" in record:
                record["models"] = {"base": record["models"][label]}
            kept.append(json.dumps(record))
        (work / folder / "answers.jsonl").write_text("\n".join(kept) + "\n")
    result = learning_run.horizon_report(work, out, State(work, "learning-state.json"), [20])
    (row,) = result["steps"]
    flexible = row["against_base"]["flexible"]
    assert (flexible["trained_only"], flexible["base_only"], flexible["p_value"]) == (183, 98, 4.463e-07)
    assert row["prompts_seen"] == 20 * 32 and result["base"]["questions"] == 1319
    assert row["p40_hours"] == round(20 * result["p40_step_s"] / 3600, 2) > 0
    assert (out / f"horizon-{time_stamp()}.png").stat().st_size > 0


def time_stamp() -> str:
    import time

    return time.strftime("%Y-%m-%d")


def test_the_projected_config_repeats_the_runs_own_schedule(tmp_path):
    """It printed trainer.test_freq=0 save_freq=0 total_training_steps=0 (a schedule no run had) until 2026-12-04."""
    phases = {"timing_s/step": 30.0, "timing_s/gen": 9.0, "timing_s/update_actor": 12.0, "timing_s/ref": 3.0}
    lengths = {"response_length/max": 400.0, "response_length/mean": 250.0, "prompt_length/max": 150.0}
    steps = [{"step": i, **phases, **lengths} for i in (1, 2)]
    schedule = {"trainer.total_training_steps": "20", "trainer.test_freq": "10", "trainer.save_freq": "10"}
    projected = learning_report.p40_projection("p40", steps, tmp_path, setting=schedule)
    words = projected["projected_config"].split()
    assert words[:3] == ["verl-p40", "train", "--profile"] and words[3] == "p40"
    assert {f"{key}={value}" for key, value in schedule.items()} <= set(words)
    assert projected["p40_s_per_step"] > 30.0  # a P40 step is slower than the H200's logged one


def test_a_variants_own_change_is_in_its_p40_projection(tmp_path):
    """The no-KL variant of 2026-12-06 (`actor_rollout_ref.actor.use_kl_loss=false`: verl builds no reference worker)
    was projected at the default's 117.394 s a P40 step, reference pass included: the projected p40 config dropped
    the run's own verl keys. Its report, redrawn from the committed work bundle, prices the run it was."""
    import tarfile

    bundle = Path(__file__).resolve().parents[2] / "bench/results/nokl-2026-12-06/learning-work.tgz"
    with tarfile.open(bundle) as tar:
        tar.extractall(tmp_path / "work")
    work, out = tmp_path / "work", tmp_path / "out"
    out.mkdir()
    result = learning_run.horizon_report(work, out, State(work, "learning-state.json"), [40])
    assert result["steps"][0]["against_base"]["flexible"]["p_value"] == 2.468e-11
    assert result["p40_step_s"] < 117.394 - 10  # the reference pass (~20 s of a P40 step) is gone
    projected = learning_report.p40_projection(
        "fast",
        [{"step": 1, "timing_s/step": 11.0, "response_length/max": 512.0}],
        work,
        setting={},
        recorded=result["train_command"],
    )["projected_config"].split()
    assert "actor_rollout_ref.actor.use_kl_loss=false" in projected
    assert not any(word.startswith("trainer.max_actor_ckpt_to_keep") for word in projected)


def test_the_projection_repeats_recipe_keys_but_not_the_sizes_a_run_set_for_its_own_gpu():
    """The fast runs of 2026-12-01 set hand-picked H200 sizes and offloads; carried into the p40 config they make the
    plan refuse (a 44.1 GB peak). Those keys are the memory plan's (memory_plan.KEYS, STATE_KEYS) and stay out; a
    checkpoint setting in quotes, `--set=` and `+` forms of a recipe key are carried; a key a P40 cannot plan leaves a
    note instead of ending the report."""
    import tarfile

    root = Path(__file__).resolve().parents[2] / "bench/results/learning-2026-12-01"
    carried = {}
    for run in ("fast", "fast-2"):
        with tarfile.open(root / run / "learning-work.tgz") as tar:
            state = json.load(tar.extractfile("state.json"))
        carried[run] = learning_report.recipe_overrides(state["train_command"])
        assert "actor_rollout_ref.rollout.micro_batch_size=256" in state["train_command"]
    assert carried == {"fast": [], "fast-2": ["actor_rollout_ref.actor.checkpoint.save_contents=[model,extra]"]}
    recorded = "verl-p40 train --set=actor_rollout_ref.actor.optim.lr=5e-6 +algorithm.x=1 trainer.seed=3 --model m"
    assert learning_report.recipe_overrides(recorded) == ["actor_rollout_ref.actor.optim.lr=5e-6", "+algorithm.x=1"]
    steps = [{"step": 1, "timing_s/step": 11.0, "response_length/max": 512.0}]
    refused = learning_report.p40_projection(
        "fast", steps, Path("/nonexistent"), setting={}, recorded="verl-p40 train data.max_response_length=65536"
    )
    assert "p40_s_per_step" not in refused and refused["note"].startswith("not projected: ")


def test_a_learning_runs_projection_prices_the_tokens_its_passes_logged():
    """verl-p40 bench prices each pass at the tokens it ran on (perf/p40_tokens); the learning report priced every
    micro-batch at the step's longest answer (512 on every step of a real run: 117.4 s for the default)."""
    phases = {"timing_s/step": 11.0, "timing_s/gen": 4.0, "timing_s/update_actor": 4.5, "timing_s/old_log_prob": 1.2}
    lengths = {"response_length/max": 512.0, "prompt_length/max": 160.0}
    logged = {"perf/p40_tokens/actor_forward": 80000.0, "perf/p40_tokens/actor_update": 80000.0}
    steps = [{"step": i, **phases, **lengths} for i in (1, 2, 3)]
    wide = learning_report.p40_projection("fast", steps, Path("/nonexistent"), setting={})
    priced = learning_report.p40_projection("fast", [{**s, **logged} for s in steps], Path("/nonexistent"), setting={})
    assert priced["p40_s_per_step"] < wide["p40_s_per_step"]
    assert "the tokens this run's passes logged" in priced["source"] and "logged no pass tokens" in wide["source"]


def _pair_args(**kw):
    import argparse

    base = {"mode": "fast", "steps": 10, "override": [], "algorithm": learning_run.RECIPE, "budget_s": 60.0}
    return argparse.Namespace(pair_cap_gb=None, **{**base, **kw})


def test_the_pair_is_two_capped_unvalidated_unsaved_trainers_in_folders_of_their_own(tmp_path):
    from lib import learning_pair

    assert learning_pair.pair_cap_gb(81559) == 37  # an 80 GB H100: two caps and the margin fit
    assert learning_pair.pair_cap_gb(143771) == 68  # an H200
    args = _pair_args(override=["actor_rollout_ref.actor.use_kl_loss=false"])
    a, b = (learning_pair.pair_command(args, tmp_path, 37, tmp_path / "pair" / f"together-{n}") for n in "ab")
    for command, name in ((a, "a"), (b, "b")):
        assert command[command.index("--gpu-memory-cap-gb") + 1] == "37"
        assert command[command.index("--profile") + 1] == "auto"  # the fast path: unmasked, the product's plan
        assert command[command.index("--checkpoints") + 1] == str(tmp_path / "pair" / f"together-{name}" / "ckpt")
        settings = [w for w in command if "=" in w]
        for kept in ("trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.save_freq=-1"):
            assert kept in settings
        assert "trainer.total_training_steps=10" in settings
        assert settings[-1] == "actor_rollout_ref.actor.use_kl_loss=false"  # the run's change, after the yardstick
    assert [w for w in a if "pair" not in w] == [w for w in b if "pair" not in w]  # the same run but its folders
    with pytest.raises(SystemExit, match="--mode fast"):
        learning_pair.pair(_pair_args(mode="p40"), tmp_path, tmp_path, 81559, "H100")


FAKE_TRAINER = """
import sys, time, pathlib
logs = pathlib.Path(sys.argv[sys.argv.index("--logs") + 1]); logs.mkdir(parents=True)
steps = int([w for w in sys.argv if w.startswith("trainer.total_training_steps=")][0].split("=")[1])
lines = []
for step in range(1, steps + 1):
    time.sleep({sleep})
    peaks = "perf/peak_allocated_gb/generation:np.float64(9.0) - perf/peak_allocated_gb/update_actor:np.float64(3.5)"
    lines.append(f"step:{{step}} - timing_s/step:{sleep} - {{peaks}}\\n")
    (logs / "train-1.log").write_text("".join(lines))
"""


def _fake_pair(monkeypatch, sleep: float):
    """pair() with trainers that sleep `sleep` s a step and log it as verl does, and no Ray to stop."""
    import sys as _sys

    from lib import learning_pair

    calls = []
    monkeypatch.setattr(learning_pair, "ray_stop", lambda: calls.append("ray stop"))
    monkeypatch.setattr(learning_pair, "POLL_S", 0.02)
    real = learning_pair.pair_command

    def fake(args, work, cap, folder):
        command = real(args, work, cap, folder)
        return [_sys.executable, "-c", FAKE_TRAINER.format(sleep=sleep), *command[3:]]

    monkeypatch.setattr(learning_pair, "pair_command", fake)
    return learning_pair, calls


def test_the_pair_runs_together_then_in_a_row_and_compares_the_wall_times(tmp_path, monkeypatch):
    learning_pair, calls = _fake_pair(monkeypatch, sleep=0.3)
    out = tmp_path / "out"
    out.mkdir()
    result = learning_pair.pair(_pair_args(steps=2), tmp_path, out, 81559, "NVIDIA H100 80GB HBM3")
    together, in_row = result["rounds"]["together"], result["rounds"]["in-a-row"]
    assert result["cap_gb_each"] == 37 and result["complete"]
    for round_ in (together, in_row):
        assert set(round_["trainers"]) == {"a", "b"}
        for trainer in round_["trainers"].values():
            assert trainer["returncode"] == 0 and trainer["steps"] == 2 and trainer["median_step_s"] == 0.3
            # the update's peak (3.5 GiB in GB of 1e9, as the memory plan speaks), not the step's largest phase
            assert trainer["update_peak_gb"] == 3.76 and trainer["command"].startswith("verl-p40 train")
    # fake trainers that only sleep overlap fully: the pair takes about one trainer's time, the row two
    assert in_row["wall_s"] > 1.5 * together["wall_s"]
    assert result["speedup"] > 1.5 and result["verdict"].startswith("the pair is faster")
    assert result["steps_speedup"] > 1.5  # the steps alone: both trainers' 0.6 s overlap, in a row 1.2 s
    assert calls.count("ray stop") >= 3  # before the pair, before each trainer in a row; never inside a round
    saved = json.loads((out / f"pair-{result['date']}.json").read_text())
    assert saved["speedup"] == result["speedup"]
    assert (out / "pair-logs" / "in-a-row-b" / "train-1.log").is_file()
    # the record's table and plot, made at the end and again from the record alone (pair-report, no GPU)
    table = (out / f"pair-{result['date']}.md").read_text()
    assert "| together |" in table and "| in-a-row |" in table and f"{result['speedup']}x" in table
    assert (out / f"pair-{result['date']}.png").stat().st_size > 10_000
    (out / f"pair-{result['date']}.md").unlink()
    redrawn = learning_pair.pair_report(out / f"pair-{result['date']}.json")
    assert redrawn["speedup"] == result["speedup"] and (out / f"pair-{result['date']}.md").read_text() == table


def _pair_report(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(BENCH / "learning_run.py"), "pair-report", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=BENCH.parent)


def test_pair_report_reads_the_update_peak_a_device_record_lacked(tmp_path):
    """The 2026-12-07 record came back with no update peak (the key was read without verl's perf/ prefix): the report
    reads it again from the trainers' logs beside it, each phase's median over the steps after the first."""
    out = tmp_path / "res"
    logs = out / "pair-logs"
    trainer = {"returncode": 0, "stopped_by_budget": False, "wall_s": 9.0, "steps": 2, "peak_allocated_gb": None}
    record = {"date": "2026-12-07", "gpu": "H100", "cap_gb_each": 37, "steps_each": 2}
    record["rounds"] = {
        r: {"wall_s": w, "trainers": {n: dict(trainer) for n in "ab"}}
        for r, w in (("together", 10.0), ("in-a-row", 15.0))
    }
    for folder in ("together-a", "together-b", "in-a-row-a", "in-a-row-b"):
        (logs / folder).mkdir(parents=True)
        later = 3.0 if folder.startswith("together") else 2.0  # the first step, a warm-up, takes 2 s more
        (logs / folder / "train-1.log").write_text(
            "".join(
                f"(TaskRunner pid=1) step:{i} - timing_s/step:{step} - timing_s/gen:{gen} - "
                f"perf/peak_allocated_gb/update_actor:np.float64(20.0)\n"
                for i, step, gen in ((1, later + 2.0, 5.0), (2, later, 1.0))
            )
        )
    (out / "pair-2026-12-07.json").write_text(json.dumps(record))
    before = (out / "pair-2026-12-07.json").read_text()
    run = _pair_report("--record", str(out / "pair-2026-12-07.json"))
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    # the steps: together 8 s each overlapping, in a row 6 + 6 s
    assert summary["speedup"] == 1.5 and summary["steps_speedup"] == 1.5
    table = (out / "pair-2026-12-07.md").read_text()
    assert "| together | 10.0 | a | 2 | 3.00 | 1.00 | - | - | - | 8.0 | 21.47 |" in table  # step 1 left out
    assert "| in-a-row | 15.0 | b | 2 | 2.00 | 1.00 | - | - | - | 6.0 | 21.47 |" in table
    assert (out / "pair-2026-12-07.json").read_text() == before  # the device's record is kept as it came


def test_pair_report_on_a_wrong_record_is_one_line(tmp_path):
    not_pair = tmp_path / "learning-2026-12-07.json"
    not_pair.write_text(json.dumps({"eval": {}}))
    broken = tmp_path / "pair-2026-12-08.json"
    broken.write_text('{"rounds": ')
    for args, line in (
        ((), "pair-report needs --record pair-<date>.json (what `pair` wrote, its pair-logs/ beside)"),
        (
            ("--record", str(tmp_path / "nope.json")),
            f"pair-report: --record {tmp_path / 'nope.json'}: no such file; name a pair-<date>.json from `pair`",
        ),
        (
            ("--record", str(not_pair)),
            f"{not_pair}: not a pair record (no 'rounds'); name a pair-<date>.json from `pair`",
        ),
        (("--record", str(broken)), None),
    ):
        run = _pair_report(*args)
        assert run.returncode == 1 and "Traceback" not in run.stderr
        said = run.stderr.strip().splitlines()
        assert len(said) == 1 and (line is None or said == [line]), said
        assert line is not None or said[0].startswith(f"{broken}: not JSON (")
    assert not list(tmp_path.glob("*.md")) and not list(tmp_path.glob("*.png"))  # nothing written


def test_a_pair_stopped_by_its_budget_gives_no_verdict(tmp_path, monkeypatch):
    learning_pair, _ = _fake_pair(monkeypatch, sleep=0.5)
    result = learning_pair.pair(_pair_args(steps=20, budget_s=1.0), tmp_path, tmp_path, 81559, "H100")
    stopped = result["rounds"]["together"]["trainers"]["a"]
    assert stopped["stopped_by_budget"] and stopped["steps"] < 20
    assert not result["complete"] and result["verdict"].startswith("incomplete")
