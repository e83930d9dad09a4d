"""Which checkpoints exist on disk and which one is good: the completion marker, the tracker, retention that keeps
the newest complete step and the best validated one, the resume line, `latest` and `best`."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from verl_p40 import UserError
from verl_p40.models import checkpoints
from verl_p40.patches import p40_checkpoints as pc


def _save(root: Path, step: int, keep: int | None = None, size: int = 64) -> None:
    """A save as the patched verl does it: begin, the workers' files, commit."""
    folder = root / f"global_step_{step}"
    pc.begin(str(folder))
    for part in ("actor", "critic"):
        (folder / part).mkdir(parents=True, exist_ok=True)
        (folder / part / "model_world_size_1_rank_0.pt").write_bytes(bytes([step % 256]) * size)
    (folder / "data.pt").write_bytes(b"dataloader")
    pc.commit(str(root), step, keep)


def _validations(root: Path, accuracy: dict[int, float]) -> None:
    record = root / pc.RUN_RECORD
    before = json.loads(record.read_text()) if record.exists() else {}
    record.write_text(json.dumps({**before, "validations": {str(k): v for k, v in accuracy.items()}}))


def test_retention_keeps_the_newest_complete_step_the_step_best_takes_and_the_best_validated_one(tmp_path):
    """Step 5 is not validated: `best` takes the newest validated step, 4 (no per-question results to pair it with
    step 2), and step 2, of highest validation accuracy, is kept as the one `best` could take later."""
    _validations(tmp_path, {0: 0.2, 1: 0.3, 2: 0.6, 3: 0.4, 4: 0.5})
    for step in range(1, 6):
        _save(tmp_path, step, keep=1)
    assert sorted(p.name for p in tmp_path.glob("global_step_*")) == ["global_step_2", "global_step_4", "global_step_5"]
    assert (tmp_path / pc.TRACKER).read_text() == "5"
    record = json.loads((tmp_path / pc.RUN_RECORD).read_text())
    assert record["best"]["step"] == 4 and record["best"]["gain_over_first"] == pytest.approx(0.3)
    assert record["best"]["latest_step"] == 4 and record["best"]["gain_over_latest"] == 0


def test_a_half_written_step_is_never_kept_as_complete_nor_counted_by_retention(tmp_path):
    _save(tmp_path, 1, keep=1)
    (tmp_path / "global_step_2" / "actor").mkdir(parents=True)  # killed in its save: no marker
    assert pc.complete_steps(str(tmp_path)) == [1]
    _save(tmp_path, 3, keep=1)  # the half-written step 2 goes with the older ones, the complete 3 stays
    assert sorted(p.name for p in tmp_path.glob("global_step_*")) == ["global_step_3"]
    _save(tmp_path, 3, keep=1)
    assert pc.complete_steps(str(tmp_path)) == [3]  # saved again: complete again


def test_a_step_saved_again_is_incomplete_while_its_files_are_rewritten(tmp_path):
    _save(tmp_path, 1)
    pc.begin(str(tmp_path / "global_step_1"))
    assert pc.complete_steps(str(tmp_path)) == []


def test_the_validation_line_names_the_best_saved_step(tmp_path, capsys):
    pc.record_validation(str(tmp_path), 0, {"val-core/openai/gsm8k/acc/mean@1": 0.25}, False)
    _save(tmp_path, 1)
    pc.record_validation(str(tmp_path), 2, {"val-core/openai/gsm8k/acc/mean@1": 0.5, "val-aux/x": 9}, True)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "verl-p40: validation accuracy 25.0% at step 0; no validated step is saved yet"
    assert out[-1] == (
        "verl-p40: validation accuracy 50.0% at step 2; best: step 2 (validation accuracy 50.0%, +25.0 points over "
        "step 0), the newest validated step; no earlier saved step validated higher"
    )
    assert json.loads((tmp_path / pc.RUN_RECORD).read_text())["validations"] == {"0": 0.25, "2": 0.5}


def test_resume_line_names_the_half_written_step_it_ignores(tmp_path):
    _save(tmp_path, 1)
    (tmp_path / "global_step_2" / "actor").mkdir(parents=True)
    line = checkpoints.resume_line(tmp_path)
    assert line == (
        f"resuming from {tmp_path / 'global_step_1'}; global_step_2 ignored (its save was cut short: the step is "
        "trained and saved again)"
    )


@pytest.mark.parametrize("tracker", ["2", "", "garbage"])
def test_a_tracker_naming_no_complete_step_is_pointed_at_the_newest_complete_one(tmp_path, tracker):
    _save(tmp_path, 1)
    (tmp_path / "global_step_2" / "actor").mkdir(parents=True)
    (tmp_path / pc.TRACKER).write_text(tracker)  # verl's own plain write, cut by a power cut
    line = checkpoints.resume_line(tmp_path)
    assert line.startswith(f"{tmp_path / pc.TRACKER}: ") and "resuming from the newest complete checkpoint, " in line
    assert "global_step_1; global_step_2 ignored" in line
    assert (tmp_path / pc.TRACKER).read_text() == "1"
    assert checkpoints.resume_line(tmp_path).startswith(f"resuming from {tmp_path / 'global_step_1'}")


def test_no_complete_checkpoint_is_said_and_the_run_starts_from_the_beginning(tmp_path):
    """Killed in its first save: the half-written step is named, and a tracker naming it is removed (verl would
    resume from a folder that is not whole)."""
    _save(tmp_path, 1)
    pc.begin(str(tmp_path / "global_step_1"))  # its save again, cut short
    assert checkpoints.resume_line(tmp_path) == (
        f"no complete checkpoint in {tmp_path}: training from the start; global_step_1 ignored (its save was cut "
        "short: the step is trained and saved again)"
    )
    assert not (tmp_path / pc.TRACKER).exists() and (tmp_path / "global_step_1" / "actor").is_dir()


def test_checkpoints_from_before_the_marker_are_taken_as_the_tracker_names_them(tmp_path):
    (tmp_path / "global_step_3" / "actor").mkdir(parents=True)
    (tmp_path / pc.TRACKER).write_text("3")
    assert checkpoints.latest_checkpoint(tmp_path) == tmp_path / "global_step_3" / "actor"
    assert checkpoints.resume_line(tmp_path) == f"resuming from {tmp_path / 'global_step_3'}"


def test_latest_refuses_a_tracker_whose_step_did_not_complete(tmp_path):
    _save(tmp_path, 1)
    (tmp_path / "global_step_2" / "actor").mkdir(parents=True)
    (tmp_path / pc.TRACKER).write_text("2")
    with pytest.raises(UserError, match="names step 2, whose save did not complete; pass the checkpoint's actor"):
        checkpoints.latest_checkpoint(tmp_path)


def test_best_without_per_question_results_is_the_newest_validated_step_and_says_so(tmp_path, capsys):
    """Higher validation accuracy alone no longer decides (tests/unit_models/test_best_rule.py: the paired rule)."""
    experiment = tmp_path / "run"
    experiment.mkdir()
    _validations(experiment, {0: 0.2, 2: 0.5, 4: 0.3})
    for step in (2, 4):
        _save(experiment, step)
    assert checkpoints.chosen("best", tmp_path) == experiment / "global_step_4" / "actor"
    assert capsys.readouterr().out == (
        f"[verl-p40] best: step 4 of {experiment} (validation accuracy 30.0%, +10.0 points over step 0), the newest "
        "validated step; step 2 validated higher (50.0%) but cannot be paired with it: "
        f"{experiment}/validation/2.jsonl is not there (validated before verl-p40 kept each validation's answers)\n"
    )
    assert checkpoints.chosen("latest", tmp_path) == experiment / "global_step_4" / "actor"
    assert capsys.readouterr().out == f"[verl-p40] latest: global_step_4 of {experiment}\n"


def test_best_without_a_validated_saved_step_takes_the_newest_and_says_so(tmp_path):
    _save(tmp_path, 3)
    path, line = checkpoints.best_checkpoint(tmp_path)
    assert path == tmp_path / "global_step_3" / "actor"
    assert line == f"best: no saved step of {tmp_path} was validated; taking the newest, step 3"


def test_a_resumed_runs_record_keeps_the_validations(tmp_path):
    record = {"checkpoints": str(tmp_path), "algorithm": "ppo", "lora": None}
    checkpoints.write_run_record(record)
    _validations(tmp_path, {0: 0.1, 2: 0.4})
    checkpoints.write_run_record({**record, "world_size": 1})
    kept = json.loads((tmp_path / pc.RUN_RECORD).read_text())
    assert kept["validations"] == {"0": 0.1, "2": 0.4} and kept["world_size"] == 1


# A save that runs steps 1, 2, ... for ever (a few MB a step, one kept plus the best), to SIGKILL at random moments.
_SAVER = r"""
import json, os, sys
from verl_p40.patches import p40_checkpoints as pc
root, start = sys.argv[1], int(sys.argv[2])
with open(os.path.join(root, pc.RUN_RECORD), "w") as f:
    json.dump({"validations": {"1": 0.9}}, f)  # step 1 is the best: it must survive every save
step = start
print("ready", flush=True)
while True:
    folder = os.path.join(root, f"global_step_{step}")
    pc.begin(folder)
    for part in ("actor", "critic"):
        os.makedirs(os.path.join(folder, part), exist_ok=True)
        for name in ("model", "optim", "extra_state"):
            with open(os.path.join(folder, part, f"{name}_world_size_1_rank_0.pt"), "wb") as f:
                f.write(bytes([step % 256]) * (1 << 20))
    with open(os.path.join(folder, "data.pt"), "wb") as f:
        f.write(b"dataloader")
    pc.commit(root, step, 1)
    step += 1
"""


def test_sigkill_at_ten_random_moments_of_saves_always_leaves_a_complete_step_to_resume_from(tmp_path):
    """Seeded: ten kills of a saver in the middle of its saves; after each, the resume line names a complete step
    (every file whole), the best validated step 1 is still complete, and the next saver resumes after it."""
    rng = random.Random(44)
    root = tmp_path / "ckpt"
    root.mkdir()
    resumed = []
    start = 1
    for _ in range(10):
        saver = subprocess.Popen(
            [sys.executable, "-c", _SAVER, str(root), str(start)], stdout=subprocess.PIPE, text=True
        )
        assert saver.stdout.readline() == "ready\n"
        time.sleep(rng.uniform(0.02, 0.4))
        os.kill(saver.pid, signal.SIGKILL)
        assert saver.wait(timeout=30) == -signal.SIGKILL
        line = checkpoints.resume_line(root)
        step = int((root / pc.TRACKER).read_text())
        assert line.startswith(f"resuming from {root / f'global_step_{step}'}"), line
        for part in ("actor", "critic"):
            for name in ("model", "optim", "extra_state"):
                data = (root / f"global_step_{step}" / part / f"{name}_world_size_1_rank_0.pt").read_bytes()
                assert data == bytes([step % 256]) * (1 << 20), (step, part, name)
        assert 1 in pc.complete_steps(str(root))  # the best validated step survives retention
        assert checkpoints.chosen("best", root) == root / "global_step_1" / "actor"
        resumed.append(step)
        start = step + 1
    assert resumed == sorted(resumed) and resumed[-1] > resumed[0]  # progress across the kills


def test_a_second_trainer_lock_is_refused_in_one_line_and_released_when_the_first_dies(tmp_path):
    holder = (
        "import sys, time\nfrom verl_p40.run.lock import train_lock\n"
        "train_lock(sys.argv[1]); print('held', flush=True); time.sleep(60)\n"
    )
    first = subprocess.Popen([sys.executable, "-c", holder, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline() == "held\n"
        from verl_p40.run.lock import train_lock

        with pytest.raises(UserError) as refused:
            train_lock(tmp_path / ".")
        said = str(refused.value)
        assert said.startswith(f"{tmp_path}: another trainer is training into this folder (pid {first.pid} on ")
        assert "--set trainer.experiment_name=NEW" in said and "\n" not in said
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    fd = train_lock(tmp_path)  # the kernel dropped the dead process's lock
    assert train_lock(tmp_path) == fd
    assert f"pid {os.getpid()} " in Path(tmp_path / ".verl-p40-train.lock").read_text()
