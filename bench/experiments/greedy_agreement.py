"""Greedy-answer agreement of a generation change (issue 41): the trainer's own validation rollout of the test
split's first questions, before and after the change, real weights, under the Pascal mask with the 24 GB cap.

Two pairs of runs (`--pair`):
- chunk: the chunks the p40 profile used before the memory plan (64 prompts at once) against the plan's (all at
  once), both decoded by transformers' generate() (bench/results/agreement-2026-12-02);
- decode: transformers' generate() (`p40_decode=off`, the rollout before patches/p40_decode.py) against the plan's
  default decoder (a static KV cache, one CUDA graph a token), both in the plan's chunk.
Each run is a validation-only `verl-p40 train` (`trainer.val_only=true`) of the GSM8K recipe on the same 256
questions (the first 256 of the test split, in order), verl dumping every answer (`trainer.validation_data_dir`),
timed as a whole (start-up included); then the first 64 answers compared text for text, with the first divergence
shown (where it starts and both continuations).

    python3 bench/experiments/greedy_agreement.py run --pair decode --model /tmp/qwen-real --work /tmp/agree
    python3 bench/experiments/greedy_agreement.py compare --pair decode --work /tmp/agree --out $OUT/agree
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lib.answers import first_divergence  # noqa: E402
from lib.device_runs import mask_env  # noqa: E402
from lib.real_runs import ray_stop  # noqa: E402

QUESTIONS = 256
COMPARED = 64
# pair: (before, after), each a run's name and the verl settings that make it
PAIRS: dict[str, tuple[tuple[str, list[str]], tuple[str, list[str]]]] = {
    "chunk": (
        ("chunk64", ["actor_rollout_ref.rollout.micro_batch_size=64", "actor_rollout_ref.rollout.p40_decode=off"]),
        ("plan", ["actor_rollout_ref.rollout.p40_decode=off"]),
    ),
    "decode": (("generate", ["actor_rollout_ref.rollout.p40_decode=off"]), ("decoder", [])),
}
WHAT = {
    "chunk": "generation in chunks of 64 (the p40 profile before the memory plan) and in the memory plan's chunk, "
    "both by transformers' generate()",
    "decode": "transformers' generate() (p40_decode=off) and the plan's decoder (patches/p40_decode.py: static KV "
    "cache, one CUDA graph a token), both in the memory plan's chunk",
}
P40_CLI = ["--profile", "p40", "--gpu-memory-cap-gb", "24", "--skip-check", "kernels"]


def command(pair: str, which: int, model: str, work: Path) -> list[str]:
    name, sets = PAIRS[pair][which]
    return [
        sys.executable,
        "-m",
        "verl_p40.cli",
        "train",
        "--algorithm",
        "grpo-gsm8k",
        *P40_CLI,
        "--model",
        model,
        "--data",
        str(work / "data"),
        "--checkpoints",
        str(work / name / "ckpt"),
        "--logs",
        str(work / name / "logs"),
        "trainer.val_only=true",
        "trainer.val_before_train=true",
        "trainer.resume_mode=disable",
        f"trainer.validation_data_dir={work / name / 'answers'}",
        *sets,
    ]


def stage_data(test: str, train: str, work: Path) -> None:
    """The pair's data folder: the test split's first QUESTIONS as the validation rows (what the pair answers), the
    whole test split and the train split as they are."""
    import pyarrow.parquet as pq  # not pandas.read_parquet: it aborted at exit in 7-9 of 30 runs (issue 66)

    (work / "data").mkdir(parents=True, exist_ok=True)
    table = pq.read_table(test)
    pq.write_table(table.slice(0, QUESTIONS), work / "data" / "val.parquet")
    pq.write_table(table, work / "data" / "test.parquet")
    pq.write_table(pq.read_table(train), work / "data" / "train.parquet")


def run(args: argparse.Namespace) -> None:
    work = Path(args.work)
    stage_data(args.test, args.train, work)
    for which, (name, _) in enumerate(PAIRS[args.pair]):
        cmd = command(args.pair, which, args.model, work)
        print(f"[agreement] {name}: $ {shlex.join(cmd)}", flush=True)
        (work / f"{name}.command").write_text("verl-p40 " + shlex.join(cmd[4:]) + "\n")
        ray_stop()
        started = time.time()
        code = subprocess.run(cmd, env=mask_env("6.1")).returncode
        (work / f"{name}.exit").write_text(f"{code}\n")
        (work / f"{name}.wall_s").write_text(f"{time.time() - started:.1f}\n")
    ray_stop()
    (work / "done").touch()


def answers(folder: Path) -> list[dict]:
    files = sorted(folder.glob("*.jsonl"))
    if not files:
        raise SystemExit(f"no answers under {folder}: did the run finish? (see its log under {folder.parent}/logs)")
    return [json.loads(line) for line in files[-1].read_text().splitlines() if line.strip()]


def compare(before: list[dict], after: list[dict], count: int = COMPARED) -> dict:
    """Text-for-text agreement of the first `count` answers; the first divergence with both continuations."""
    pairs = list(zip(before[:count], after[:count]))
    if any(a["input"] != b["input"] for a, b in pairs):
        raise SystemExit("the two runs answered different questions in a different order")
    differing = [i for i, (a, b) in enumerate(pairs) if a["output"] != b["output"]]
    result = {
        "compared": len(pairs),
        "identical": len(pairs) - len(differing),
        "differing_rows": differing,
        "score_before": sum(a["score"] for a, _ in pairs),
        "score_after": sum(b["score"] for _, b in pairs),
        "score_changed_rows": [i for i, (a, b) in enumerate(pairs) if a["score"] != b["score"]],
    }
    if differing:
        a, b = pairs[differing[0]][0]["output"], pairs[differing[0]][1]["output"]
        at, tail, a_goes, b_goes = first_divergence(a, b, 160, 200)
        result["first_divergence"] = {
            "row": differing[0],
            "chars_in_common": at,
            "answer_chars": [len(a), len(b)],
            "common_tail": tail,
            "before_continues": a_goes,
            "after_continues": b_goes,
        }
    return result


def report(args: argparse.Namespace) -> None:
    work, out = Path(args.work), Path(args.out)
    names = [name for name, _ in PAIRS[args.pair]]
    before, after = (answers(work / name / "answers") for name in names)
    walls = {n: float((work / f"{n}.wall_s").read_text()) for n in names if (work / f"{n}.wall_s").exists()}
    result = {
        "what": f"the trainer's greedy validation answers to the test split's first {COMPARED} questions (of "
        f"{QUESTIONS} validated at once), {WHAT[args.pair]}; real-weights proxy, Pascal mask, 24 GB cap",
        "commands": {n: (work / f"{n}.command").read_text().strip() for n in names},
        "exit": {n: int((work / f"{n}.exit").read_text()) for n in names},
        "wall_s": walls,  # each run whole: start-up, model loading and the validation's generation
        **compare(before, after),
        "all_256": {k: v for k, v in compare(before, after, QUESTIONS).items() if k in ("compared", "identical")},
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "agreement.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "first_divergence"}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("run", "compare"))
    parser.add_argument("--pair", choices=tuple(PAIRS), default="decode")
    parser.add_argument("--model", default="/tmp/qwen-real")
    parser.add_argument("--test", default="/tmp/gsm8k/test.parquet")
    parser.add_argument("--train", default="/tmp/gsm8k/train.parquet")
    parser.add_argument("--work", default="/tmp/agree")
    parser.add_argument("--out", default="/tmp/agree/out")
    args = parser.parse_args()
    (run if args.action == "run" else report)(args)


if __name__ == "__main__":
    main()
