"""The progress line a step: what it reads from verl's console output, and the time-left arithmetic."""

import pytest

from verl_p40.patches import p40_best
from verl_p40.run.console import Console
from verl_p40.run.progress import Progress, Schedule, duration, events_left, time_left

RAY = "\x1b[36m(TaskRunner pid=2367)\x1b[0m "
WORKER = "\x1b[36m(WorkerDict pid=2531)\x1b[0m "


def step_line(step, step_s, testing=None, save=None, score=0.25, validation=None):
    parts = [f"step:{step}", "training/global_step:" + str(step), f"critic/score/mean:{score}"]
    if validation is not None:
        parts.append(f"val-core/openai/gsm8k/acc/mean@1:np.float64({validation})")
    if testing is not None:
        parts.append(f"timing_s/testing:{testing}")
    if save is not None:
        parts.append(f"timing_s/save_checkpoint:{save}")
    parts.append(f"timing_s/step:{step_s}")
    return RAY + " - ".join(parts) + "\n"


def test_events_left_counts_the_multiples_and_the_last_step():
    assert events_left(12, 60, 10) == 5  # 20, 30, 40, 50, 60
    assert events_left(12, 65, 10) == 6  # 20 ... 60 and the last, 65
    assert events_left(0, 2, 1) == 2
    assert events_left(60, 60, 10) == 0
    assert events_left(3, 60, 0) == 0 and events_left(3, 60, -1) == 0  # never


def test_time_left_is_the_steps_validations_and_saves_still_to_come_at_their_measured_cost():
    schedule = Schedule(total_steps=60, test_freq=10, save_freq=10)
    left = time_left(12, schedule, step_s=118.0, validation_s=60.0, save_s=15.0)
    assert (left.steps, left.validations, left.saves) == (48, 5, 5)
    assert left.seconds == pytest.approx(48 * 118.0 + 5 * 60.0 + 5 * 15.0)
    assert left.untimed == ()
    # a validation not yet seen is named, not guessed; the rest is still counted
    early = time_left(3, schedule, step_s=118.0, validation_s=None, save_s=None)
    assert early.seconds == pytest.approx(57 * 118.0) and early.untimed == ("validations", "saves")
    assert time_left(3, schedule, None, None, None).seconds is None  # no step timed yet
    assert time_left(3, Schedule(None, 10, 10), 118.0, None, None) is None  # no step count


def test_duration_reads_as_a_person_says_it():
    assert [duration(s) for s in (0.4, 45, 61, 719, 3600, 5640)] == [
        "0 s",
        "45 s",
        "1 min",
        "12 min",
        "1 h 0 min",
        "1 h 34 min",
    ]


def test_progress_reads_verls_lines_and_the_patch_sets_validation_line():
    progress = Progress(Schedule(total_steps=None, test_freq=2, save_freq=2))
    assert progress.feed(RAY + "Total training steps: 6\n") is None
    assert (
        progress.feed(RAY + "verl-p40: validation accuracy 26.2% at step 0; no validated step is saved yet\n") is None
    )
    assert progress.feed(step_line(0, 5.0).replace("timing_s/step:5.0", "x:1")) is None  # step 0: no step
    first = progress.feed(step_line(1, 30.0, score=0.5))  # the first step: warm-up, the only timing so far
    assert (first.step, first.total_steps, first.step_s, first.reward) == (1, 6, 30.0, 0.5)
    assert first.validation == {"step": 0, "accuracy": pytest.approx(0.262)} and first.best_step is None
    assert first.left_untimed == ["validations", "saves"]
    best = {"step": 2, "accuracy": 0.305, "gain_over_first": 0.043, "first_step": 0, "why": "the newest validated step"}
    progress.feed(RAY + f"verl-p40: validation accuracy 30.5% at step 2; best: {p40_best.line(best)}\n")  # the patch's
    second = progress.feed(step_line(2, 27.0, testing=4.0, save=3.0, validation=0.305))
    assert second.step_s == 20.0  # 27 s less the validation and the save inside verl's step timer; warm-up left out
    assert second.best_step == 2 and second.validation["step"] == 2
    # 4 steps at 20 s, validations at 4 and 6 (4 s each), saves at 4 and 6 (3 s each)
    assert second.left_s == pytest.approx(4 * 20 + 2 * 4 + 2 * 3) and second.left_untimed == []
    assert second.line() == (
        "step 2 of 6, 20.0 s a step, reward 0.250, validation 30.5% at step 2 (best: step 2), ~2 min left"  # 94 s
    )
    last = [progress.feed(step_line(s, 21.0)) for s in (3, 4, 5, 6)][-1]
    assert last.line().endswith("(best: step 2), last step")
    assert second.line(final=True).endswith("(best: step 2)")  # a run that ended there: no time left


def test_a_resumed_run_counts_from_its_first_step_and_its_schedule_comes_from_the_plan():
    progress = Progress(Schedule(total_steps=60, test_freq=10, save_freq=10))
    snap = progress.feed(step_line(41, 100.0))
    assert (snap.step, snap.total_steps) == (41, 60)
    assert (
        snap.line()
        == "step 41 of 60, 100.0 s a step, reward 0.250, ~32 min left (+ validations and saves not yet timed)"
    )


def test_the_last_error_line_is_kept_for_a_run_that_fails():
    progress = Progress(Schedule())
    progress.feed(WORKER + "Traceback (most recent call last):\n")
    progress.feed(WORKER + "ValueError: data.train_batch_size must be positive\n")
    assert progress.error_line == "ValueError: data.train_batch_size must be positive"


def test_the_console_leaves_out_config_dumps_and_shows_the_rest():
    out = [
        RAY + "TaskRunner hostname: vm, PID: 2367\n",
        RAY + "{'actor_rollout_ref': {'actor': {'checkpoint': {'load_contents': ['model',\n",
        RAY + "                                                                   'optimizer',\n",
        RAY + " 'trainer': {'balance_batch': True,\n",
        RAY + "             'val_before_train': True}}\n",
        RAY + "using customized reward function 'compute_score' from '/tmp/repo/app/verl_p40/reward.py'\n",
        WORKER + "[verl-p40] pid 2531: GPU memory capped at 24 GB (0.9361 of cuda:0)\n",
        WORKER + "Model config after override: Qwen2Config {\n",
        WORKER + '  "architectures": [\n',
        WORKER + '    "Qwen2ForCausalLM"\n',
        WORKER + "  ],\n",
        WORKER + '  "vocab_size": 151936\n',
        WORKER + "}\n",
        WORKER + "\n",
        WORKER + "Qwen2ForCausalLM contains 494.03M parameters\n",
        WORKER + "Model config after override: Qwen2Config {\n",
        WORKER + '  "vocab_size": 151936\n',
        WORKER + "}\n",
        RAY + "step:1 - critic/score/mean:0.5\n",
    ]
    console = Console()
    shown = [line for line in out if console.shows(line)]
    assert shown == [out[0], out[5], out[6], out[14], out[18]]
