"""A run whose newest complete checkpoint is at its last step is finished: `verl-p40 train` says so and trains
nothing (verl 0.5.0 would load that step and train one past it)."""

from verl_p40.models.checkpoints import TRACKER, finished_run


def _saved(experiment, step):
    (experiment / f"global_step_{step}" / "actor").mkdir(parents=True)
    (experiment / TRACKER).write_text(str(step))


def test_a_run_saved_at_its_last_step_is_finished_and_one_saved_before_it_is_not(tmp_path):
    record = {"checkpoints": str(tmp_path), "steps": 60, "resume_mode": "auto"}
    assert finished_run(record) is None  # nothing saved: a fresh run
    _saved(tmp_path, 50)
    assert finished_run(record) is None  # steps 51-60 to go
    _saved(tmp_path, 60)
    line = finished_run(record)
    assert line.startswith(f"{tmp_path}: finished, its newest checkpoint is step 60 of 60; nothing to train")
    assert "\n" not in line and "trainer.total_training_steps" in line
    assert finished_run({**record, "steps": 100}) is None  # a longer run resumes
    assert finished_run({**record, "resume_mode": "disable"}) is None  # a run that does not resume trains afresh
    assert finished_run({**record, "steps": None}) is None  # a length not counted here: verl's own
