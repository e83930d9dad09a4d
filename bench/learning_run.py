"""GPU bench (real weights): does the GSM8K recipe (`--algorithm grpo-gsm8k`) make the model solve more problems?

The learning issue's run, on one GPU or several, with the real-weights proxy (Qwen2.5-Coder-0.5B-Instruct of
Qwen2.5-0.5B-Instruct's exact shape, staged as in bench/results/README.md, "Real weights"), in one of two modes:
- `--mode p40`: every process sees a Tesla P40 (the Pascal mask), `--profile p40 --gpu-memory-cap-gb 24`: the path
  a P40 owner runs, at the masked H200's speed;
- `--mode fast`: the same recipe unmasked, with nothing but what a user passes (`--profile auto`: the ampere profile
  on an H200, TF32 by `--tf32 auto`, and the memory plan's sizes for the card: states kept on the GPU, generation in
  one chunk), so that a learning check of tens of steps fits one GPU session. Its curve stands for the P40 path
  when a p40-mode run tracks it.
After `bash /tmp/bundle/install.sh && BENCH_NO_RANDOM=1 source bench/device/gpu_setup.sh`, in device calls kept
back to back (/tmp lives only while the machine stays warm):

    python3 bench/learning_run.py prepare --out $OUT
    setsid python3 bench/learning_run.py session --mode fast --budget-s 1000 > /tmp/learn/session.log 2>&1 < /dev/null &
    python3 bench/learning_run.py wait --timeout-s 580    # in each later call, until it says the session ended;
    cp -r /tmp/learn/out/. $OUT                           # then the results, made by the session itself

The session trains, stops the trainer gracefully when --budget-s would run out, and goes on to `final` by itself,
so no device call has to be timed to stop it; `stop` asks it to stop training early (a file the session watches;
never `pkill -f` a pattern on that machine: it also matches the device call's own command line, and took the
machine down once, 2026-11-30).

All through the product's CLI:
- prepare: bench/device/gguf_to_hf.py, then `verl-p40 prep --val-size 256`: 256 train rows held out as val.parquet,
  which the trainer validates on. The held-out set is the whole test split (1,319 questions): nothing in the recipe's
  selection or the run reads it until `final`.
- session: `verl-p40 monitor` beside `verl-p40 train --algorithm grpo-gsm8k` (the mode's profile and settings) on
  every GPU; when --budget-s would run out it sends the trainer one SIGTERM, which finishes the step, saves it and
  exits (the product's graceful stop).
- final: the last checkpoint merged once (verl_p40.models.checkpoints), then `verl-p40 eval --model BASE --compare
  MERGED --dtype fp32` on the test split, split over --eval-gpus GPUs (one part each, then the whole split read back
  from the parts' answers: the report and its paired sign tests cover all 1,319), then `report`.
- horizon (--score-steps 10,20,...): the steps named before the run scored on the whole test split with no pick,
  the base model once and each step's merged checkpoint alone (`verl-p40 eval`), each step's answers paired with the
  base's (sign test): horizon-<date>.json and a plot against prompts seen and projected P40 hours; horizon-report
  redraws them from a returned work bundle.
- session --no-eval: the training and its validation curve only (a p40-mode run whose session holds no held-out
  evaluation); its record says it was not evaluated.
- audit: one step of the recipe on the P40 path (half its prompts, not validated or saved) with the Pascal mask's op
  audit on: learning-audit-<date>.json counts half-precision ops and SDPA kernels in every process.
- pair: issue 69's two-trainer measurement (bench/lib/learning_pair.py): two trainers of the mode's recipe on one GPU
  with the same cap (--pair-cap-gb; half the GPU less 2 GB by default), --steps steps each, not validated or saved,
  first together (each its own Ray instance) and then in a row: pair-<date>.json, the pair's wall time against the
  two in a row; then pair-<date>.md and .png (each phase's median, every trainer's step times). pair-report --record
  pair-<date>.json (no GPU) redraws them from a returned record and the trainers' logs beside it.
- compare (no GPU): several runs' validation curves against prompts seen (`--axis prompts`), the GPU-minutes of
  their training steps (`gpu-minutes`: recipes at equal GPU time) or their projected P40 hours (`p40-hours`), one
  plot and a markdown table.
- `--algorithm ppo-gsm8k` (session, audit): another recipe through the same modes, to set beside grpo-gsm8k.
- report (no GPU): learning-<date>.json (commands, accuracies, paired sign tests, rollouts, GPU-minutes, rollouts per
  GPU-minute, peaks, P40 projection) and learning-<date>.png (training reward and its parts, validation accuracy,
  entropy, response length), from the returned work bundle (`report --work DIR`).

This script is the command line; each mode's work is a module of bench/lib: `learning_recipe` (the recipe, the
modes, prepare, the train command), `learning_session` (session, audit), `learning_pair` (pair), `learning_heldout`
(final, horizon, rescore, the work bundle) and `learning_report` (report, the P40 projection, compare).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lib.learning_heldout import final, horizon, horizon_report, rescore
from lib.learning_pair import first_gpu, pair, pair_report
from lib.learning_recipe import MODES, RECIPE, prepare
from lib.learning_report import AXES, compare, plot, report
from lib.learning_session import audit, session
from lib.real_runs import State, wait

PHASES = (
    "prepare",
    "session",
    "wait",
    "stop",
    "audit",
    "final",
    "horizon",
    "horizon-report",
    "rescore",
    "report",
    "plot-record",
    "compare",
    "pair",
    "pair-report",
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("phase", choices=PHASES)
    parser.add_argument("--runs", type=Path, nargs="+", help="compare: the runs' learning-<date>.json")
    parser.add_argument("--axis", choices=sorted(AXES), default="prompts", help="compare: what the curves are against")
    parser.add_argument(
        "--algorithm", default=RECIPE, help="session, audit: the recipe trained (grpo-gsm8k; ppo-gsm8k to compare)"
    )
    parser.add_argument("--no-eval", action="store_true", help="session: the validation curve only, no held-out eval")
    parser.add_argument(
        "--record",
        type=Path,
        help="plot-record: a JSON of the per-step rewards a device call printed; pair-report: a pair-<date>.json",
    )
    parser.add_argument("--gguf", default="/tmp/model.gguf")
    parser.add_argument("--tokenizer", default=".gpu-shared/qwen2.5-0.5b-instruct")
    parser.add_argument("--gsm8k", default=".gpu-shared/gsm8k")
    parser.add_argument("--out", default="/tmp/learn/out")
    parser.add_argument("--work", default="/tmp/learn")
    _add_run_arguments(parser)
    return parser


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The training session's, the wait's and the held-out evaluation's arguments."""
    parser.add_argument("--steps", type=int, default=500, help="trainer.total_training_steps (the budget ends it)")
    parser.add_argument("--save-freq", type=int, default=20)
    parser.add_argument("--test-freq", type=int, default=10)
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--budget-s", type=float, default=780, help="session: from its start to the trainer's exit")
    parser.add_argument("--stop-s", type=float, default=100, help="session: time the graceful stop is given")
    parser.add_argument("--timeout-s", type=float, default=580, help="wait: return after this long at most")
    parser.add_argument("--copy-to", help="wait: copy the logs so far here before returning (e.g. $OUT/partial)")
    parser.add_argument("--mode", choices=sorted(MODES), default="p40", help="session: the P40 path or the fast path")
    parser.add_argument("--eval-batch", type=int, default=256)
    parser.add_argument("--eval-gpus", type=int, default=1, help="final: GPUs the held-out evaluation is split over")
    parser.add_argument(
        "--pick",
        choices=("best-validation", "latest"),
        default="best-validation",
        help="final: which saved checkpoint the test split scores (validation is train rows, never the test split)",
    )
    parser.add_argument(
        "--score-steps", default="", help="horizon: the saved steps scored on the test split, named before the run"
    )
    parser.add_argument(
        "--pair-cap-gb", type=int, help="pair: the memory cap each of the two trainers gets (half the GPU less 2 GB)"
    )
    parser.add_argument("--heldout-limit", type=int, help="final: only the first N test questions (a smoke check)")


def _stateless_phase(args: argparse.Namespace, work: Path) -> bool:
    """Run a phase that keeps no state of its own (wait, plot-record, compare, rescore, stop); False for the others."""
    if args.phase == "wait":  # reads only: the session process owns state.json
        wait(args, work)
    elif args.phase == "plot-record":  # a run whose logs were lost: the curve from what its calls printed
        record = json.loads(args.record.read_text())
        steps = [{"step": int(k), "critic/score/mean": v} for k, v in record["training_reward_per_step"].items()]
        plot(steps, args.record.with_suffix(".png"))
    elif args.phase == "pair-report":  # no GPU: a pair's record redrawn from its JSON and the logs beside it
        if args.record is None:
            raise SystemExit("pair-report needs --record pair-<date>.json (what `pair` wrote, its pair-logs/ beside)")
        if not args.record.is_file():
            raise SystemExit(f"pair-report: --record {args.record}: no such file; name a pair-<date>.json from `pair`")
        summary = pair_report(args.record)
        print(json.dumps({k: v for k, v in summary.items() if k != "rounds"}, indent=1))
    elif args.phase == "compare":  # no GPU: the runs' validation curves against prompts seen, --out a .png
        table = compare(args.runs, Path(args.out), args.axis)
        Path(args.out).with_suffix(".md").write_text(table)
        print(table, end="")
    elif args.phase == "rescore":  # then `report` to redraw the run record from it
        rescore(work)
    elif args.phase == "stop":  # the session sees the file and stops its trainer (nothing else is signalled)
        (work / "stop").touch()
    else:
        return False
    return True


def _state_phase(args: argparse.Namespace, work: Path, out: Path, state: State) -> None:
    """Run a phase that reads or writes the run's state file (the caller saves it into --out after)."""
    if args.phase == "prepare":
        prepare(args, work, out, state)
    elif args.phase == "session":
        session(args, work, out, state)
    elif args.phase == "audit":
        print(json.dumps(audit(args, work, out)["audit"], indent=1))
    elif args.phase == "pair":
        pair(args, work, out, *first_gpu())
    elif args.phase in ("horizon", "horizon-report"):  # the report alone: from a returned work bundle, no GPU
        steps = [int(s) for s in args.score_steps.split(",")]
        result = horizon(args, work, out, state) if args.phase == "horizon" else horizon_report(work, out, state, steps)
        print(json.dumps([{k: r[k] for k in ("step", "accuracy", "against_base")} for r in result["steps"]], indent=1))
    else:
        result = final(args, work, out, state) if args.phase == "final" else report(work, out, state)
        print(json.dumps({k: result[k] for k in ("eval", "comparison", "rollouts_per_gpu_minute")}, indent=1))


def main() -> None:
    args = _parser().parse_args()
    work, out = Path(args.work), Path(args.out)
    if _stateless_phase(args, work):
        return
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    state = State(work, "learning-state.json")
    if args.phase in ("report", "final", "horizon", "horizon-report") and not state.path.exists():
        raise SystemExit(f"{state.path}: no state; unpack learning-work.tgz into --work first")
    try:
        _state_phase(args, work, out, state)
    finally:
        state.save(out)


if __name__ == "__main__":
    main()
