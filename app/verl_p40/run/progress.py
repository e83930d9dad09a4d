"""Where a training run is, read from what verl's trainer prints (no patch of verl): the step and the steps it will
take (`Total training steps: N`), seconds a step, the latest reward, the latest validation and the best step (the
patch set's `verl-p40: validation accuracy ... at step N; best: step M ...` line), and the time left.

The time left is the steps still to come at the measured seconds of a step, plus the validations and the saves still
to come at their own measured cost (verl's `timing_s/testing` and `timing_s/save_checkpoint`, both inside
`timing_s/step`) once one of each was seen; the ones not timed yet are named instead of guessed.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import asdict, dataclass, field

from verl_p40.run.trainer_log import parse_line

_TOTAL = re.compile(r"Total training steps: (\d+)")
_VALIDATION = re.compile(r"verl-p40: validation accuracy ([0-9.]+)% at step (\d+)")
_BEST = re.compile(r"; best:? step (\d+)")  # p40_checkpoints.record_validation's line (p40_best.line)
_STOPPED = re.compile(r"verl-p40: stopped on request after step (\d+)")
_ERROR = re.compile(r"\b\w*(Error|Exception)\b: \S")
_PREFIX = re.compile(r"^(\x1b\[[0-9;]*m)?\(\w+ pid=\d+(, ip=[^)]*)?\)(\x1b\[[0-9;]*m)? ?")
REWARD_KEYS = ("critic/score/mean", "reward/score/mean")  # verl's mean reward of the step's answers (GRPO too)
RECENT = 10  # steps whose median is the step time (the run's first step, warm-up, only while it is the only one)


@dataclass(frozen=True)
class Schedule:
    """What the run's config says is still to come: verl validates at every `test_freq`-th step and at the last one,
    and saves at every `save_freq`-th step and at the last one (0 or less: never)."""

    total_steps: int | None = None
    test_freq: int = 0
    save_freq: int = 0


def events_left(step: int, total: int, every: int) -> int:
    """How many of the steps after `step` up to `total` are a multiple of `every` or the last one."""
    if every <= 0 or step >= total:
        return 0
    multiples = total // every - step // every
    return multiples + (0 if total % every == 0 else 1)


@dataclass(frozen=True)
class TimeLeft:
    seconds: float | None  # None: no step timed yet
    steps: int
    validations: int
    saves: int
    untimed: tuple[str, ...]  # the events still to come whose cost was not seen yet (left out of `seconds`)


def time_left(
    step: int,
    schedule: Schedule,
    step_s: float | None,
    validation_s: float | None,
    save_s: float | None,
) -> TimeLeft | None:
    """The time the run needs after `step`; None without the number of steps."""
    total = schedule.total_steps
    if total is None:
        return None
    steps = max(total - step, 0)
    validations = events_left(step, total, schedule.test_freq)
    saves = events_left(step, total, schedule.save_freq)
    untimed = tuple(
        name
        for name, count, cost in (("validations", validations, validation_s), ("saves", saves, save_s))
        if count and cost is None
    )
    if step_s is None:
        return TimeLeft(None, steps, validations, saves, untimed)
    seconds = steps * step_s + validations * (validation_s or 0.0) + saves * (save_s or 0.0)
    return TimeLeft(seconds, steps, validations, saves, untimed)


def duration(seconds: float) -> str:
    """45 s, 12 min, 1 h 34 min."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"


@dataclass
class Snapshot:
    """The run's state after a step: what the status file holds and the progress line says."""

    step: int
    total_steps: int | None
    step_s: float | None
    reward: float | None
    validation: dict | None  # {"step": N, "accuracy": a} of the latest validation
    best_step: int | None
    left_s: float | None
    left_untimed: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)

    def line(self, final: bool = False) -> str:
        """The progress line; `final`: the run is over, so no time left (verl's loop may end before the steps it
        announced, at the end of the data's epochs)."""
        parts = [f"step {self.step}" + (f" of {self.total_steps}" if self.total_steps else "")]
        if self.step_s is not None:
            parts.append(f"{self.step_s:.1f} s a step")
        if self.reward is not None:
            parts.append(f"reward {self.reward:.3f}")
        if self.validation:
            text = f"validation {self.validation['accuracy']:.1%} at step {self.validation['step']}"
            parts.append(text + (f" (best: step {self.best_step})" if self.best_step is not None else ""))
        if final:
            pass
        elif self.total_steps and self.step >= self.total_steps:
            parts.append("last step")
        elif self.left_s is not None:
            untimed = f" (+ {' and '.join(self.left_untimed)} not yet timed)" if self.left_untimed else ""
            parts.append(f"~{duration(self.left_s)} left{untimed}")
        return ", ".join(parts)


def content(line: str) -> str:
    """A console line without Ray's `(Worker pid=N)` prefix and its colours."""
    return _PREFIX.sub("", line.rstrip("\n"), count=1)


class Progress:
    """Feed it the trainer's output, line by line; `feed` gives a Snapshot for each training step (step 1 on)."""

    def __init__(self, schedule: Schedule):
        self.schedule = schedule
        self.total: int | None = schedule.total_steps
        self.step_times: list[float] = []
        self.validation_s: list[float] = []
        self.save_s: list[float] = []
        self.reward: float | None = None
        self.validation: dict | None = None
        self.best_step: int | None = None
        self.last: Snapshot | None = None
        self.stopped_after: int | None = None
        self.error_line: str | None = None  # the last line that names a Python error, for a run that fails

    def feed(self, line: str) -> Snapshot | None:
        text = content(line)
        total = _TOTAL.search(text)
        if total:  # verl's own count (a run planned elsewhere, or a schedule the config did not fix)
            self.total = int(total.group(1))
            return None
        validated = _VALIDATION.search(text)
        if validated:
            self.validation = {"step": int(validated.group(2)), "accuracy": float(validated.group(1)) / 100}
            best = _BEST.search(text)
            self.best_step = int(best.group(1)) if best else self.best_step
            return None
        stopped = _STOPPED.search(text)
        if stopped:
            self.stopped_after = int(stopped.group(1))
            return None
        if _ERROR.search(text):
            self.error_line = text.strip()
        record = parse_line(text)
        if record is None or int(record["step"]) < 1:  # step 0: the validation before training, no step
            return None
        return self._step(int(record["step"]), record)

    def _step(self, step: int, record: dict[str, float]) -> Snapshot:
        testing = record.get("timing_s/testing")
        saving = record.get("timing_s/save_checkpoint")
        if testing is not None:
            self.validation_s.append(testing)
        if saving is not None:
            self.save_s.append(saving)
        if "timing_s/step" in record:  # the step alone: verl times its validation and save inside the step
            self.step_times.append(record["timing_s/step"] - (testing or 0.0) - (saving or 0.0))
        self.reward = next((record[k] for k in REWARD_KEYS if k in record), self.reward)
        step_s = self.step_seconds()
        schedule = Schedule(self.total, self.schedule.test_freq, self.schedule.save_freq)
        left = time_left(step, schedule, step_s, _mean(self.validation_s), _mean(self.save_s))
        self.last = Snapshot(
            step=step,
            total_steps=self.total,
            step_s=step_s,
            reward=self.reward,
            validation=self.validation,
            best_step=self.best_step,
            left_s=left.seconds if left else None,
            left_untimed=list(left.untimed) if left else [],
        )
        return self.last

    def step_seconds(self) -> float | None:
        """The median of the latest steps, leaving out this run's first (warm-up) once there is another."""
        timed = self.step_times[1:] if len(self.step_times) > 1 else self.step_times
        return statistics.median(timed[-RECENT:]) if timed else None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
