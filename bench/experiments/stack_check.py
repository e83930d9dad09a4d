"""The shipped stack on a GPU (issue 45): the same checks on two torch stacks of the lent GPU machine, under the Pascal
mask with the 24 GB cap and the op audit, then both side by side.

Every GPU result before this ran on the machine's own torch (2.11); the image ships torch 2.6.0. `run` makes one
stack's results: `verl-p40 doctor`, 2 steps of the seed's PPO (`--algorithm ppo`) and 1 step of the GSM8K recipe
(`grpo-gsm8k`) on the p40 profile, and `verl-p40 eval` of the test split's first 64 questions (greedy, fp32), each
with the audit on (its times are audited times: the same on both stacks, not a P40 timing). `compare` (no GPU) sets
the two stacks side by side: exit codes, the torch each ran, half-precision ops and SDPA kernels the audit saw, step
times, torch's peaks, accuracy, and the 64 greedy answers (identical, or the first divergence shown).

On the GPU machine, after `bash /tmp/bundle/install.sh && BENCH_NO_RANDOM=1 source bench/device/gpu_setup.sh`, the
real-weights model at /tmp/qwen-real and the image's torch unpacked (bench/device/stage_torch.py) into /tmp/torch26:

    python3 bench/experiments/stack_check.py run --stack machine --model /tmp/qwen-real --out $OUT/stack
    PYTHONPATH=/tmp/torch26:$PYTHONPATH python3 bench/experiments/stack_check.py run --stack image \\
      --model /tmp/qwen-real --out $OUT/stack
    python3 bench/experiments/stack_check.py compare --out $OUT/stack     # stack-check.json and stack-check.md

`run --checks` runs a subset in the order given; the table has exit codes, wall and step times, torch's and NVML's
peaks, the audit's half-precision ops and SDPA kernels, eval's accuracy and speed; the answer line names a stack
that answered fewer than the 64.

A hold: bench/device/stack_hold.sh (its header; STACKS and IMAGE_CHECKS pick the stacks and the image's order),
started detached by the call that carries the first torch chunk and `.gpu-shared` (the Pascal mask), after the 2
bundle and 15 model calls (~3.3 s each); the 82-84 torch chunks travel while the machine's stack runs; the call with the
last one starts `stack_hold.sh unpack` (~2 min; its sitecustomize.py hides the machine's torchvision/timm and runs
the mask's); the image's stack runs once both are done (one trainer on the GPU at a time). Both stacks took 11.4
minutes of one hold on 2026-12-04 (bench/results/stack-check-2026-12-04: the image's failed there on a staging
fault, and ran whole in a second hold of 13.8 minutes, eval first). The mask's directory comes first on the path
(mask_env puts it there) and runs the staged stack's sitecustomize.py after its own.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lib.answers import first_divergence  # noqa: E402
from lib.device_runs import audit_summary, markdown_table, mask_env, pack_logs, torch_of, verl_p40  # noqa: E402
from lib.ppo_runner import run_train  # noqa: E402

P40_PATH = ["--profile", "p40", "--gpu-memory-cap-gb", "24"]
ONE_RUN = [
    "trainer.save_freq=-1",
    "trainer.resume_mode=disable",
    "trainer.val_before_train=false",
    "trainer.test_freq=-1",
]
CHECKS = ("doctor", "ppo", "recipe", "eval")
QUESTIONS = 64


def commands(model: str, data: str, work: Path) -> dict[str, list[str]]:
    """Each check's `verl-p40` arguments (the P40 path: the p40 profile and the 24 GB cap; the kernel check is skipped
    through the mask's environment, as on every masked run of this machine, whose torch may lack sm_61 kernels)."""

    def train(name: str, algorithm: str, steps: int) -> list[str]:
        return [
            "train", "--algorithm", algorithm, *P40_PATH, "--skip-check", "kernels", "--model", model, "--data", data,
            "--checkpoints", str(work / name / "ckpt"),
            f"trainer.total_training_steps={steps}", *ONE_RUN,
        ]  # fmt: skip

    return {
        "doctor": ["doctor", *P40_PATH, "--model", model, "--data", data, "--json"],
        "ppo": train("ppo", "ppo", 2),
        "recipe": train("recipe", "grpo-gsm8k", 1),
        "eval": [
            "eval",
            "--model",
            model,
            "--data",
            str(Path(data) / "test.parquet"),
            "--limit",
            str(QUESTIONS),
            "--out",
            str(work / "eval"),
            "--device",
            "cuda",
        ],  # fmt: skip
    }


def eval_summary(folder: Path) -> dict:
    """eval's accuracy (report.json) and its answers in question order (answers.jsonl)."""
    report = folder / "report.json"
    answers = folder / "answers.jsonl"
    out: dict = {"report": json.loads(report.read_text()) if report.is_file() else None, "answers": []}
    if answers.is_file():
        records = sorted(
            (json.loads(line) for line in answers.read_text().splitlines() if line.strip()), key=lambda r: r["index"]
        )
        out["answers"] = [next(iter(r["models"].values()))["answer"] for r in records]
    return out


def doctor_lines(text: str) -> dict[str, str] | None:
    """{check: "STATUS detail"} from `doctor --json`'s output in its log (its indented list, after the command's
    line and whatever the mask printed, which may begin with '[' too); None where the log holds no such list."""
    try:
        return {c["name"]: f"{c['status']} {c['detail']}" for c in json.loads(text[text.index("\n[\n") :])}
    except (ValueError, KeyError, TypeError):
        return None


def run(args: argparse.Namespace) -> None:
    work, out = Path(args.work) / args.stack, Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    result: dict = {"stack": args.stack, "torch": torch_of(mask_env("6.1")), "checks": {}}
    every = commands(args.model, args.data, work)
    for name, arguments in ((name, every[name]) for name in args.checks):
        audit = work / f"{name}.audit.jsonl"
        env = mask_env("6.1", audit)
        print(f"[stack_check] {args.stack} {name}: verl-p40 {' '.join(arguments)}", flush=True)
        if arguments[0] == "train":  # verl's step metrics and NVML's peaks (the trainer writes its own log)
            trained = run_train(name, arguments[1:], work / name / "logs", args.timeout_s, env)
            steps = trained.pop("steps")
            check = {**trained, "step_s": [round(s_["timing_s/step"], 3) for s_ in steps if "timing_s/step" in s_]}
        else:
            log = work / f"{name}.log"
            started = time.time()
            code = verl_p40(*arguments, env=env, log=log, timeout=args.timeout_s)
            check = {"command": "verl-p40 " + " ".join(arguments), "returncode": code}
            check["wall_s"] = round(time.time() - started, 1)
            check["last_lines"] = log.read_text(errors="replace").splitlines()[-5:]
            if name == "eval":
                check.update(eval_summary(work / "eval"))
            if name == "doctor":
                check["doctor"] = doctor_lines(log.read_text(errors="replace"))
        check["audit"] = audit_summary(audit)
        result["checks"][name] = check
        print(f"[stack_check] {args.stack} {name}: exit {check['returncode']}", flush=True)
        (out / f"stack-{args.stack}.json").write_text(json.dumps(result, indent=2) + "\n")
    pack_logs(work, out / f"stack-{args.stack}-logs.tgz")


def _base(check: dict) -> dict:
    """eval's report of its one model (accuracy, speed), or {} where it has none."""
    models = (check.get("report") or {}).get("models") or {}
    return next(iter(models.values()), {})


def compare(args: argparse.Namespace) -> None:
    out = Path(args.out)
    found = sorted(out.glob("stack-*.json"))
    stacks = [json.loads(p.read_text()) for p in found if p.name != "stack-check.json"]
    if len(stacks) != 2:
        sys.exit(
            f"stack_check compare: {out} holds {len(stacks)} stack results (stack-NAME.json); run both stacks first"
        )
    a, b = stacks
    rows = []
    for name in CHECKS:
        ca, cb = a["checks"].get(name, {}), b["checks"].get(name, {})
        for key in ("returncode", "wall_s", "step_s"):
            if key in ca or key in cb:
                rows.append([name, key, ca.get(key), cb.get(key)])
        if "summary" in ca or "summary" in cb:
            peak = "peak_torch_max_allocated_gb"  # verl's name; torch's bytes / 2**30
            rows.append([name, "torch peak (GiB)", ca.get("summary", {}).get(peak), cb.get("summary", {}).get(peak)])
            for key, what in (("nvml_peak_process_used_gb", "NVML process peak (GB)"),
                              ("nvml_peak_device_used_gb", "NVML device peak (GB)")):  # fmt: skip
                rows.append([name, what, ca.get(key), cb.get(key)])
        if name == "eval":
            for key, what in (("accuracy_flexible", "accuracy (flexible)"), ("samples_per_s", "answers a second")):
                rows.append([name, what, _base(ca).get(key), _base(cb).get(key)])
        rows.append(
            [
                name,
                "half-precision ops",
                ca.get("audit", {}).get("half_precision_ops"),
                cb.get("audit", {}).get("half_precision_ops"),
            ]
        )
        rows.append(
            [
                name,
                "SDPA kernels",
                "; ".join(ca.get("audit", {}).get("sdpa_ops", [])),
                "; ".join(cb.get("audit", {}).get("sdpa_ops", [])),
            ]
        )
    answers_a = a["checks"].get("eval", {}).get("answers", [])
    answers_b = b["checks"].get("eval", {}).get("answers", [])
    differing = [i for i, (x, y) in enumerate(zip(answers_a, answers_b)) if x != y]
    agreement = {
        "answers": {a["stack"]: len(answers_a), b["stack"]: len(answers_b)},
        "compared": min(len(answers_a), len(answers_b)),
        "identical": sum(x == y for x, y in zip(answers_a, answers_b)),
        "differing_questions": differing,
    }
    if differing:
        at, common, first, second = first_divergence(answers_a[differing[0]], answers_b[differing[0]], 80, 80)
        agreement["first_divergence"] = {
            "question": differing[0], "at_char": at, "common": common, "first": first, "second": second,
        }  # fmt: skip
    result = {
        "stacks": [a["stack"], b["stack"]],
        "torch": {a["stack"]: a["torch"], b["stack"]: b["torch"]},
        "answers": agreement,
        "table": rows,
    }
    (out / "stack-check.json").write_text(json.dumps(result, indent=2) + "\n")
    header = [
        "check",
        "what",
        f"{a['stack']} (torch {a['torch'].get('torch')})",
        f"{b['stack']} (torch {b['torch'].get('torch')})",
    ]
    same = f"{agreement['identical']} of {agreement['compared']} compared identical"
    short = [f"{name} answered {n}" for name, n in agreement["answers"].items() if n < QUESTIONS]
    shortfall = f" ({'; '.join(short)} of {QUESTIONS}: a failed or cut eval)" if short else ""
    text = markdown_table(header, rows) + f"\n\nGreedy answers of the first {QUESTIONS} questions: {same}{shortfall}.\n"
    (out / "stack-check.md").write_text(text)
    print(text, end="")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("run", "compare"))
    parser.add_argument("--stack", help="run: the stack's name (machine, image)")
    parser.add_argument("--model", default="/tmp/qwen-real")
    parser.add_argument("--data", default="/tmp/gsm8k")
    parser.add_argument("--work", default="/tmp/stack")
    parser.add_argument("--out", required=True)
    parser.add_argument("--timeout-s", type=float, default=540, help="run: the longest one check may take")
    parser.add_argument(
        "--checks",
        default=",".join(CHECKS),
        help="run: which checks, in this order (the quickest first where device time is short)",
    )
    args = parser.parse_args()
    if args.action == "run" and not args.stack:
        parser.error("run needs --stack NAME")
    if args.action == "run":
        args.checks = checks_asked(args.checks, parser.error)
    run(args) if args.action == "run" else compare(args)


def checks_asked(text: str, error) -> list[str]:
    """--checks as a list in the order asked, each once; `error` (the parser's) for a name that is no check."""
    asked = [name for name in text.split(",") if name]
    if unknown := sorted(set(asked) - set(CHECKS)):
        error(f"--checks: no check named {', '.join(unknown)} (there are {', '.join(CHECKS)})")
    if len(set(asked)) != len(asked) or not asked:
        error(f"--checks: each check once, at least one (asked: {text!r})")
    return asked


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
