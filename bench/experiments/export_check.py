"""Does the exported fp16 model answer as the checkpoint does? (issue 21's GPU check, real weights.)

On the GPU machine under the Pascal mask (a P40, 24 GB cap), with real weights of Qwen2.5-0.5B's shape: two PPO
steps of the p40 profile saved as a checkpoint, `verl-p40 export --model latest --dtype fp16`, then greedy answers to
64 GSM8K test questions from the checkpoint (merged by verl's merger, fp32) and from the exported folder (fp16), and
how many are the same text. Every step through the product's CLI.

After staging the GGUF (bench/results/README.md, "Real weights") and `bash /tmp/bundle/install.sh && source
bench/device/gpu_setup.sh`:
    python3 bench/experiments/export_check.py --gguf /tmp/model.gguf --out $OUT
Where the answers differ, an fp32 export and the fp16 export read in fp32 tell the export's part from fp16's (the
commands of 2026-11-30 are in bench/results/README.md); `--compare DIR` counts the agreement of every eval-* folder.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

from lib.device_runs import mask_env, verl_p40
from lib.real_runs import real_model

WORK = Path("/tmp/export-check")
QUESTIONS = 64


def answers(folder: Path) -> dict[int, str]:
    records = [json.loads(line) for line in (folder / "answers.jsonl").read_text().splitlines() if line.strip()]
    return {r["index"]: r["models"]["base"]["answer"] for r in records}


def agreement(work: Path) -> dict:
    """How each evaluation under `work` (eval-*/answers.jsonl) agrees with the checkpoint's: the same text, the same
    final number (the flexible reward's answer), and where the first differing text starts (characters)."""
    from verl_p40.reward import extract_answer

    reference, out = answers(work / "eval-checkpoint"), {}
    for folder in sorted(work.glob("eval-*")):
        if folder.name == "eval-checkpoint" or not (folder / "answers.jsonl").exists():
            continue
        other = answers(folder)
        differ = [i for i in reference if reference[i] != other.get(i)]
        first = [
            next(
                (k for k, (a, b) in enumerate(zip(reference[i], other[i])) if a != b),
                min(len(reference[i]), len(other[i])),
            )
            for i in differ
            if i in other
        ]
        out[folder.name] = {
            "same_text": len(reference) - len(differ),
            "questions": len(reference),
            "same_final_number": sum(
                extract_answer(reference[i], "flexible") == extract_answer(other.get(i, ""), "flexible")
                for i in reference
            ),
            "first_difference_at_char": sorted(first),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gguf", default="/tmp/model.gguf")
    parser.add_argument("--model", type=Path, default=Path("/tmp/qwen-real"), help="made from --gguf when absent")
    parser.add_argument("--tokenizer", default=".gpu-shared/qwen2.5-0.5b-instruct")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--compare",
        type=Path,
        help="only compare the evaluations under this folder (the returned "
        "logs unpacked) and write agreement.json to --out",
    )
    args = parser.parse_args()
    if args.compare:
        args.out.mkdir(parents=True, exist_ok=True)
        text = json.dumps(agreement(args.compare), indent=2) + "\n"
        (args.out / "agreement.json").write_text(text)
        print(text)
        return
    WORK.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    log, env = WORK / "commands.log", mask_env("6.1")
    real_model(args.gguf, args.tokenizer, args.model)
    ckpt, exports = WORK / "ckpt", WORK / "exports"
    steps = [
        (
            "train",
            [
                "train",
                "--profile",
                "p40",
                "--gpu-memory-cap-gb",
                "24",
                "--gpus",
                "0",
                "--model",
                str(args.model),
                "--data",
                "/tmp/gsm8k",
                "--logs",
                str(WORK / "logs"),
                "--checkpoints",
                str(ckpt),
                "--reward-method",
                "flexible",
                "trainer.total_training_steps=2",
                "trainer.save_freq=2",
            ],
            420,
        ),
        (
            "export",
            ["export", "--model", "latest", "--checkpoints", str(ckpt), "--out", str(exports), "--dtype", "fp16"],
            240,
        ),
        (
            "eval-checkpoint",
            [
                "eval",
                "--model",
                "latest",
                "--checkpoints",
                str(ckpt),
                "--data",
                "/tmp/gsm8k/test.parquet",
                "--limit",
                str(QUESTIONS),
                "--dtype",
                "fp32",
                "--max-new-tokens",
                "320",
                "--batch-size",
                "64",
                "--out",
                str(WORK / "eval-checkpoint"),
                "--logs",
                "",
            ],
            240,
        ),
    ]
    result: dict = {"questions": QUESTIONS, "mask_cc": "6.1", "cap_gb": 24, "steps": {}}
    for name, command, timeout in steps:
        started = time.time()
        code = verl_p40(*command, env=env, log=log, timeout=timeout)
        result["steps"][name] = {
            "command": "verl-p40 " + " ".join(command),
            "exit_code": code,
            "wall_s": round(time.time() - started, 1),
        }
        if code != 0:
            break
    exported = next(exports.glob("*-hf-fp16"), None) if exports.is_dir() else None
    if exported:
        command = [
            "eval",
            "--model",
            str(exported),
            "--data",
            "/tmp/gsm8k/test.parquet",
            "--limit",
            str(QUESTIONS),
            "--dtype",
            "fp16",
            "--max-new-tokens",
            "320",
            "--batch-size",
            "64",
            "--out",
            str(WORK / "eval-export"),
            "--logs",
            "",
        ]
        code = verl_p40(*command, env=env, log=log, timeout=240)
        result["steps"]["eval-export"] = {"command": "verl-p40 " + " ".join(command), "exit_code": code}
        if code == 0:
            first, second = answers(WORK / "eval-checkpoint"), answers(WORK / "eval-export")
            same = sum(first[i] == second.get(i) for i in first)
            result["same_answers"] = same
            result["same_share"] = round(same / len(first), 4)
            result["passes_95pct"] = same / len(first) >= 0.95
            for name in ("eval-checkpoint", "eval-export"):
                result[name] = json.loads((WORK / name / "report.json").read_text())["models"]["base"]
    (args.out / "export-check.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    kept = [name for name in ("logs", "eval-checkpoint", "eval-export", "commands.log") if (WORK / name).exists()]
    subprocess.run(["tar", "-czf", str(args.out / "logs-export-check.tgz"), "-C", str(WORK), *kept])  # no weights


if __name__ == "__main__":
    main()
