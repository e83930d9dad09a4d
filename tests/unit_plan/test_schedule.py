"""The plan's arithmetic of a run's length (plan/schedule.py): verl 0.5.0 drops the last partial batch of every pass,
and ends a run early when the passes it is given run out before trainer.total_training_steps."""

import pytest

from verl_p40 import UserError
from verl_p40.gpu.nvml import GPUInfo
from verl_p40.plan import layout, schedule
from verl_p40.plan.schedule import Rows


@pytest.mark.parametrize("rows", [7217, 7473, 1, 33, 97, 255, 1001])
@pytest.mark.parametrize("prompts", [1, 4, 32, 64, 128, 256])
@pytest.mark.parametrize("steps", [1, 20, 56, 60, 225, 300, 1000])
def test_the_passes_given_reach_the_announced_step_and_one_fewer_would_not(rows, prompts, steps):
    if prompts > rows:  # verl's loader would be empty: the line says so and the fix
        assert (
            f"set data.train_batch_size to at most {rows:,}"
            in schedule.plan(Rows(rows), prompts, steps, 1, None).line()
        )
        return
    s = schedule.plan(Rows(rows), prompts, steps, 1, None)
    batches = rows // prompts  # drop_last=True
    assert s.batches == batches and s.steps == steps
    assert s.epochs * batches >= steps  # verl's loop reaches the step
    assert s.epochs == 1 or (s.epochs - 1) * batches < steps  # and no more passes than needed
    assert s.record()["epochs"] == round(steps * prompts / rows, 4)


def test_the_issues_case_four_cards_times_the_batch_need_two_passes_of_gsm8k():
    s = schedule.plan(Rows(7217), 128, 60, 1, None)
    assert (s.batches, s.epochs) == (56, 2)
    assert s.line().startswith("60 steps of 128 prompts = 1.06 epochs of 7,217 rows: 56 batches a pass, 2 passes")


def test_a_users_own_total_epochs_too_small_is_one_line_naming_it_and_the_fix():
    with pytest.raises(UserError) as caught:
        schedule.plan(Rows(7217), 32, 300, 1, "--set trainer.total_epochs=1", "--set trainer.total_training_steps=300")
    line = str(caught.value)
    assert "\n" not in line and line.startswith("--set trainer.total_epochs=1:")
    assert "stop at step 225" in line and "set trainer.total_epochs=2" in line
    assert schedule.plan(Rows(7217), 32, 300, 3, "--set trainer.total_epochs=3").epochs == 3  # enough: kept


def test_without_readable_data_the_line_says_it_could_not_count_and_verl_gets_enough_passes():
    s = schedule.plan(Rows(None, False, "/x/train.parquet is not readable here"), 32, 60, 1, None)
    assert s.epochs == 60 and "could not count the epochs (/x/train.parquet is not readable here)" in s.line()


def test_without_a_length_or_readable_data_the_line_never_announces_step_0():
    s = schedule.plan(Rows(None, False, "/x/train.parquet is not readable here"), 64, None, 1, None)
    assert s.steps is None and s.record()["steps"] is None
    assert s.line() == (
        "steps: verl's own count, 1 pass over the train rows at 64 prompts a step "
        "(could not count the rows: /x/train.parquet is not readable here)"
    )


def test_without_a_length_the_run_is_its_passes():
    s = schedule.plan(Rows(7217), 64, None, 1, None)
    assert (s.steps, s.epochs) == (112, 1)


def test_rows_are_counted_from_the_parquet_and_the_manifest_says_when_none_is_filtered(tmp_path):
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from verl_p40.plan.inputs import Inputs, Prompts
    from verl_p40.plan.run_options import RunOptions

    train = tmp_path / "train.parquet"
    pq.write_table(pa.table({"prompt": [[{"role": "user", "content": "q"}]] * 5}), train)

    def rows(filtered: bool, longest: int) -> Rows:
        inputs = Inputs.read(RunOptions(data=str(tmp_path), model=str(tmp_path / "no-model")))
        return schedule.train_rows(train, inputs.rows.get(str(train)), inputs.prompts, filtered, longest)

    assert rows(False, 320) == Rows(5)
    uncounted = rows(True, 320)
    assert uncounted.count == 5 and not uncounted.exact and "no tokenizer here" in uncounted.why
    (tmp_path / ".verl-p40-data.json").write_text(
        json.dumps({"outputs": {"train": {"rows": 5, "bytes": 1, "prompt_tokens": {"max": 256}}}})
    )
    assert rows(True, 320) == Rows(5)
    assert not rows(True, 200).exact and "prep's manifest says up to 256" in rows(True, 200).why
    assert schedule.train_rows(tmp_path / "nothere.parquet", None, Prompts(), True, 320).count is None
    assert schedule.train_rows(train, 5, Prompts(None, (100, 300, 320, 321, 400)), True, 320) == Rows(3)


@pytest.mark.parametrize("cards", range(1, 9))
def test_the_recipe_batch_is_split_over_1_to_8_cards_and_per_gpu_multiplies_it(cards):
    gpus = tuple(GPUInfo(i, "Tesla P40", (6, 1), 23.9) for i in range(cards))
    verl = {"data": {"train_batch_size": 256}, "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 128}}}
    counts, _ = layout.settings(layout.Layout(gpus))
    split, notes = layout.batch(layout.Layout(gpus), verl)
    assert split == {} and counts["trainer.n_gpus_per_node"] == cards
    assert cards == 1 or any("split over" in n for n in notes)
    scaled, _ = layout.batch(layout.Layout(gpus), verl, "per-gpu")
    if cards > 1:
        assert scaled["data.train_batch_size"] == 256 * cards
        assert scaled["actor_rollout_ref.actor.ppo_mini_batch_size"] == 128 * cards


def test_three_p40s_cannot_split_the_default_step_and_the_one_line_says_which_counts_can():
    from verl_p40.plan.facts import Facts
    from verl_p40.plan.planner import plan
    from verl_p40.plan.run_options import RunOptions

    with pytest.raises(UserError) as caught:
        plan(RunOptions(profile="p40", gpus=(0, 1, 2), data="/nowhere"), Facts.of_card("p40", 3))
    assert "256 sequences on 3 GPU(s)" in str(caught.value) and "train on 1, 2, 4, 8 GPUs" in str(caught.value)
