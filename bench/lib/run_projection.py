"""The P40 projection of one recorded run (bench/project.py projects every committed one; learning_run.py and
scale_run.py their own): the run's trainer command gives its verl config, its logged steps the token counts and the
measured phases, and `verl_p40.perf.projection` turns them into seconds on a Tesla P40 (and, as a check, on the H200
that ran it, whose constants `verl-p40 bench` measured on 2026-11-30).
"""

from __future__ import annotations

import os
import shlex
import statistics
from collections.abc import Sequence
from pathlib import Path

from verl_p40.perf import projection
from verl_p40.plan.facts import Facts
from verl_p40.plan.planner import plan
from verl_p40.plan.run_options import RunOptions
from verl_p40.plan.workload import Workload

# Qwen2.5-0.5B-Instruct's config.json (the tokenizer folder the tests carry): the shape every projection prices
SHARED = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "qwen2.5-0.5b-instruct"
# The H200's constants as calibrate() measured them under the mask (bench/results/generations-2026-11-30/bench-p40.json)
H200 = projection.Card(
    "NVIDIA H200 (measured 2026-11-30)", 41.14, 4251.0, 22.3, "generations-2026-11-30/bench-p40.json"
)


# What a recorded command that names neither ran with: the CLI's defaults when the projected results were made (ppo
# until 167111d made the GSM8K recipe the default on 2026-12-02; the P40 profile, the one these runs were on)
RECORDED_DEFAULTS = {"--algorithm": ("algorithm", "ppo"), "--profile": ("profile", "p40")}


def recorded_options(words: Sequence[str], then: dict[str, tuple[str, str]] | None = None) -> RunOptions:
    """The options a recorded `verl-p40 train|bench|config ...` command ran with (`words`: what follows `verl-p40`),
    read by the product's own parser and options: flags, verl keys (`--set` and bare `KEY=VALUE`), defaults. `then`:
    {flag: (field, value)} for the defaults of the command's day where it does not give the flag. This process's
    environment is left out (the run had its own): the options' variables are unset while they are read."""
    from verl_p40.cli import build_parser
    from verl_p40.options import option_fields, resolve

    words = list(words)
    args = build_parser().parse_args(words)
    cls = args.command_spec.options
    given = {w.split("=", 1)[0] for w in words if w.startswith("--")}
    values = {name: value for flag, (name, value) in (then or {}).items() if flag not in given}
    names = [f.metadata["option"].env for f in option_fields(cls) if f.metadata["option"].env]
    saved = {name: os.environ.pop(name) for name in names if name in os.environ}
    try:
        return resolve(cls, args, **values)
    finally:
        os.environ.update(saved)


# What the p40 plan ran before issue 67's speed-ups became its defaults (2026-12-06, session 18): verl's old_log_prob
# pass, verl's update micro-batches, the decoder without compaction. A record made before ran so unless its command
# named them: project_run(recorded=True) projects it as it ran (bench/project.py's committed runs, the committed scale
# runs); a new run, or today's plan, is projected as planned (recorded=False).
BEFORE_ADOPTION = {
    "actor_rollout_ref.rollout.p40_log_probs": "pass",
    "actor_rollout_ref.actor.p40_update_tokens": "0",
    "critic.p40_update_tokens": "0",
    "actor_rollout_ref.rollout.p40_decode_compact": "false",
}


def as_recorded(words: Sequence[str]) -> list[str]:
    """A recorded command's words with BEFORE_ADOPTION's settings it does not name, as it ran."""
    named = {w.removeprefix("--set=").split("=", 1)[0].lstrip("+") for w in words if "=" in w}
    return [*words, *(f"{key}={value}" for key, value in BEFORE_ADOPTION.items() if key not in named)]


def options_from(command: str, recorded: bool = False) -> RunOptions:
    """The verl config a recorded `verl-p40 train|bench ...` command ran with (RECORDED_DEFAULTS where it names no
    algorithm or profile; `recorded`, a run made before the speed-ups' adoption: BEFORE_ADOPTION's settings it does
    not name)."""
    words = shlex.split(command)[1:]
    return recorded_options(as_recorded(words) if recorded else words, RECORDED_DEFAULTS)


def masked_p40s(options: RunOptions) -> Facts:
    """The machine the run's layout saw: P40s under the mask (the product's P40 card), as many as it was given (one
    where it named none)."""
    count = len(options.gpus or (0,))  # --gpus as the options hold it: None for all
    return Facts.of_card("p40", count)


def project_run(
    name: str,
    command: str,
    steps: list[dict],
    shape: projection.Shape,
    recent: bool,
    measured: bool = False,
    recorded: bool = False,
) -> dict:
    """`recent`: run since trim_padding exists, so its config says whether it trimmed; older runs ran at full width.
    `measured`: each pass priced at the tokens the run's own passes logged (perf/p40_tokens, as `verl-p40 bench`
    prices them), where it logged them, instead of the step's longest sequences for every micro-batch. `recorded`: a
    run made before issue 67's speed-ups were the plan's defaults (BEFORE_ADOPTION)."""
    options = options_from(command, recorded)
    cfg = plan(options, masked_p40s(options)).config()  # the machine that ran it, not this one
    phases = projection.median_phases(steps)
    generated = statistics.median(s.get("response_length/max", 0.0) for s in steps)
    workload = Workload.of(cfg)
    tokens = projection.measured_tokens(steps, workload.reference) if measured else None
    # the step's longest lengths price the trimmed passes' width and a compacting decoder's prefill (run_from_config
    # uses each only where the config does it); older runs ran at full width
    longest = projection.longest_lengths(steps) if recent else None
    run = projection.run_from_config(cfg, generated, longest, tokens)
    host = projection.host_overhead_per_token(phases.get("gen", 0.0), shape, run, H200)
    here, p40 = projection.project(shape, run, H200, host), projection.project(shape, run, projection.P40, host)
    prompts = int(cfg.data.train_batch_size)
    # what trim_padding (on in every profile since) is projected to make of the same steps: their logged lengths
    trimmed = projection.run_from_config(cfg, generated, projection.longest_lengths(steps))
    p40_trimmed = projection.project(shape, trimmed, projection.P40, host)
    return {
        "run": name,
        "gpus": run.gpus,
        "measured_s_per_step": phases.get("step"),
        "measured_phases_s": phases,
        "h200_projection": here,
        "p40_projection": p40,
        "p40_hours_per_gsm8k_epoch": projection.epoch_hours(p40["step"], prompts),
        "train_batch_size": prompts,
        "with_trim_padding": {
            "pass_width": trimmed.width,
            "p40_projection": p40_trimmed,
            "p40_hours_per_gsm8k_epoch": projection.epoch_hours(p40_trimmed["step"], prompts),
        },
        "command": command,
        "priced_at": "the tokens each pass logged" if tokens else "the step's longest sequences",
    }
