"""`best`: the newest validated step unless an earlier one beats it on the same validation questions by a paired
exact test (patches/p40_best.py), as eval and export take it (models/checkpoints.py) and as the trainer records it
and says it at every validation (patches/p40_checkpoints.py); missing or damaged per-question results fall back to
the newest validated step, with the line naming the file."""

import json
import random
from pathlib import Path

import pytest

from verl_p40.models import checkpoints
from verl_p40.patches import p40_best
from verl_p40.patches import p40_checkpoints as pc

METRIC = "val-core/openai/gsm8k/acc/mean@1"


def _dump(root: Path, step: int, right: set[int], questions: int = 40, seed: int = 0) -> Path:
    """Step `step`'s per-question results as verl 0.5.0's _dump_generations writes them, in a shuffled order."""
    rows = [
        {"input": f"question {i}", "output": "...", "score": float(i in right), "step": step, "acc": float(i in right)}
        for i in range(questions)
    ]
    random.Random(seed + step).shuffle(rows)
    path = root / "validation" / f"{step}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def _steps(root: Path, results: dict[int, set[int]], questions: int = 40) -> dict[int, float]:
    """Saved, validated steps with their per-question results; the run record's validations."""
    validations = {0: 0.25}
    for step, right in results.items():
        _dump(root, step, right, questions)
        validations[step] = len(right) / questions
        actor = root / f"global_step_{step}" / "actor"
        actor.mkdir(parents=True)
        (actor.parent / pc.COMPLETE).write_text(f"{step}\n")
    (root / pc.MARKED).write_text("")
    (root / pc.TRACKER).write_text(str(max(results)))
    (root / pc.RUN_RECORD).write_text(json.dumps({"validations": {str(k): v for k, v in validations.items()}}))
    return validations


def test_the_sign_test_is_exact_and_one_sided():
    assert p40_best.sign_test(0, 0) == 1.0
    assert p40_best.sign_test(5, 0) == 1 / 32
    assert p40_best.sign_test(3, 3) == 42 / 64
    assert p40_best.sign_test(0, 4) == 1.0


def test_an_earlier_step_higher_within_the_noise_leaves_the_newest(tmp_path, capsys):
    """Step 30 answers 22 of 40, step 60 21: two questions only 30 has, one only 60 has: noise, step 60 stays."""
    _steps(tmp_path, {30: set(range(22)), 60: set(range(2, 23))})
    path, line = checkpoints.best_checkpoint(tmp_path)
    assert path == tmp_path / "global_step_60" / "actor"
    assert line == (
        f"best: step 60 of {tmp_path} (validation accuracy 52.5%, +27.5 points over step 0), the newest validated "
        "step; step 30 validated higher (55.0%), within the noise (2 questions right only at step 30, 1 only at step "
        "60: one-sided sign test p = 0.5, not < 0.05 / 1)"
    )


def test_an_earlier_step_beyond_the_noise_is_handed_over_paired_by_question(tmp_path):
    """Step 20 answers 30 of 40, step 60 (a collapse) 10 of them: 20 questions only step 20 has, p = 2^-20 <
    0.05 / 2 (steps 20 and 40 are the earlier validations; 40 was not saved). The files are in different orders."""
    validations = _steps(tmp_path, {20: set(range(30)), 60: set(range(10))})
    record = json.loads((tmp_path / pc.RUN_RECORD).read_text())
    record["validations"]["40"] = 0.5  # validated, its checkpoint since removed
    (tmp_path / pc.RUN_RECORD).write_text(json.dumps(record))
    path, line = checkpoints.best_checkpoint(tmp_path)
    assert path == tmp_path / "global_step_20" / "actor"
    assert line.endswith(
        "better than the newest validated step, 60 (25.0%), beyond the noise (20 questions right only at step 20, "
        "0 only at step 60: one-sided sign test p = 9.5e-07 < 0.05 / 2 earlier steps)"
    )
    best = p40_best.choose(str(tmp_path), {**validations, 40: 0.5}, [20, 60])
    assert best["paired"] == {
        "challenger": 20,
        "wins": 20,
        "losses": 0,
        "p": 2**-20,
        "level": 0.025,
        "earlier_steps": 2,
    }
    assert best["rule"] == "earlier, beyond the noise" and best["newest_validated_step"] == 60


def test_ties_keep_the_newest(tmp_path):
    """The same answers (no question differs): p = 1; the same accuracy: nothing to test; earlier steps tied on
    accuracy: the later one is the challenger."""
    _steps(tmp_path, {10: {1, 2}, 20: {1, 2}, 30: {1, 2}})
    best = p40_best.choose(str(tmp_path), {0: 0.0, 10: 0.5, 20: 0.5, 30: 0.5}, [10, 20, 30])
    assert best["step"] == 30 and best["why"] == "the newest validated step; no earlier saved step validated higher"
    best = p40_best.choose(str(tmp_path), {0: 0.0, 10: 0.6, 20: 0.6, 30: 0.5}, [10, 20, 30])
    assert best["step"] == 30 and best["paired"]["challenger"] == 20
    assert best["paired"]["wins"] == best["paired"]["losses"] == 0 and best["paired"]["p"] == 1.0
    assert p40_best.challenger_step({10: 0.6, 20: 0.6, 30: 0.5}, [10, 20, 30]) == 20


def test_answers_per_question_are_averaged_when_several_were_sampled(tmp_path):
    folder = tmp_path / "validation"
    folder.mkdir()
    rows = {5: [("a", 1), ("a", 1), ("b", 1), ("b", 0)], 9: [("b", 0), ("a", 0), ("a", 1), ("b", 0)]}
    for step, answers in rows.items():
        (folder / f"{step}.jsonl").write_text("".join(json.dumps({"input": q, "score": s}) + "\n" for q, s in answers))
    assert p40_best.paired(str(tmp_path), 5, 9) == (2, 0, None)  # a: 1 vs 0.5, b: 0.5 vs 0


def test_without_per_question_results_the_newest_validated_step_is_taken_and_the_line_says_why(tmp_path):
    """A run from before verl-p40 kept each validation's answers (the two committed 60-step runs)."""
    _steps(tmp_path, {30: set(range(22)), 60: set(range(2, 23))})
    (tmp_path / "validation" / "30.jsonl").unlink()
    path, line = checkpoints.best_checkpoint(tmp_path)
    assert path == tmp_path / "global_step_60" / "actor"
    assert line.endswith(
        f"the newest validated step; step 30 validated higher (55.0%) but cannot be paired with it: "
        f"{tmp_path / 'validation' / '30.jsonl'} is not there (validated before verl-p40 kept each validation's "
        "answers)"
    )


@pytest.mark.parametrize(
    "damage, said",
    [
        (lambda t: t[: len(t) - 30], "60.jsonl:40: cut short (its last line is not whole); the step cannot be paired"),
        (lambda t: t.replace("\n", "\n{", 1), "60.jsonl:2: not a line of verl's validation results (input, score)"),
        (lambda t: "\n".join(t.split("\n")[5:]), "hold different questions (40 and 35); not the same validation"),
        (lambda t: "", "60.jsonl: empty"),
    ],
)
def test_a_damaged_per_question_file_falls_back_to_the_newest_in_one_line_naming_it(tmp_path, damage, said):
    """Step 20 beats step 60 by far, but step 60's file is cut short or damaged: nothing is paired on a guess; the
    newest validated step, one line naming the file (and line), nothing written."""
    _steps(tmp_path, {20: set(range(30)), 60: set(range(10))})
    damaged = tmp_path / "validation" / "60.jsonl"
    damaged.write_text(damage(damaged.read_text()))
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    path, line = checkpoints.best_checkpoint(tmp_path)
    assert path == tmp_path / "global_step_60" / "actor"
    assert "\n" not in line and said in line and "step 20 validated higher (75.0%) but cannot be paired" in line
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_the_trainer_records_the_pick_and_says_it_at_each_validation(tmp_path, capsys):
    """record_validation (the patched trainer, before the step's save): the run record's `best` and the console line
    name the step and why; retention keeps the step handed over and the one of highest validation accuracy."""
    pc.record_validation(str(tmp_path), 0, {METRIC: 0.25}, False)
    right = {10: set(range(30)), 20: set(range(12)), 30: set(range(10)), 40: set(range(14))}
    for step, answered in right.items():
        _dump(tmp_path, step, answered)
        pc.record_validation(str(tmp_path), step, {METRIC: len(answered) / 40}, True)
        folder = tmp_path / f"global_step_{step}"
        pc.begin(str(folder))
        (folder / "actor").mkdir(parents=True)
        pc.commit(str(tmp_path), step, keep=1)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "verl-p40: validation accuracy 25.0% at step 0; no validated step is saved yet"
    assert out[1] == (
        "verl-p40: validation accuracy 75.0% at step 10; best: step 10 (validation accuracy 75.0%, +50.0 points over "
        "step 0), the newest validated step; no earlier saved step validated higher"
    )
    assert out[-2] == (
        "verl-p40: validation accuracy 35.0% at step 40; best: step 10 (validation accuracy 75.0%, +50.0 points over "
        "step 0), better than the newest validated step, 40 (35.0%), beyond the noise (16 questions right only at "
        "step 10, 0 only at step 40: one-sided sign test p = 1.5e-05 < 0.05 / 3 earlier steps)"
    )
    record = json.loads((tmp_path / pc.RUN_RECORD).read_text())
    assert record["best"]["step"] == 10 and record["best"]["paired"]["wins"] == 16
    assert sorted(p.name for p in tmp_path.glob("global_step_*")) == ["global_step_10", "global_step_40"]


def test_the_committed_runs_without_per_question_results_hand_over_their_last_step():
    """The check the issue asks for, on the two committed 60-step runs of the default: neither kept per-question
    validation, so the rule gives the newest validated saved step, 60, in both."""
    results = Path(__file__).resolve().parents[2] / "bench" / "results"
    record = json.loads((results / "default-2026-12-04" / "verl-p40-run.json").read_text())
    validations = {int(k): v for k, v in record["validations"].items()}
    best = p40_best.choose(str(results / "default-2026-12-04"), validations, [30, 50, 60])  # ck-tree.txt
    assert best["step"] == 60 and "step 30 validated higher (35.9%) but cannot be paired" in best["why"]
