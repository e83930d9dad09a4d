"""GRPO through `verl-p40` on the lent H200 under the Pascal mask (a P40: sm_61, 24 GB cap), random weights of
Qwen2.5-0.5B's exact shape, real GSM8K: `verl-p40 bench --algorithm grpo` for n = 4 and n = 8 (timing, audit off),
and `verl-p40 train --algorithm grpo --samples-per-prompt 8` with the mask's op audit on (a short run).

Run on the GPU machine after `bash /tmp/bundle/install.sh && source bench/device/gpu_setup.sh`:
    python3 bench/experiments/algorithms_run.py grpo --out $OUT     (then audit, lora and lora-1.5b, one call each:
    .gpu-shared needs qwen2.5-1.5b-instruct copied from ../shared/data for the 1.5B shape)
`report` prints the table from the returned JSONs: python3 bench/experiments/algorithms_run.py report --dir DIR
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from lib.device_runs import markdown_table, mask_env, pack_logs, save, verl_p40

WORK = Path("/tmp/algorithms")
P40 = ("6.1", 24)
SHAPES = {  # model shape: (its config and tokenizer, where bench keeps its random weights)
    "0.5b": (".gpu-shared/qwen2.5-0.5b-instruct", "/tmp/qwen-random"),
    "1.5b": (".gpu-shared/qwen2.5-1.5b-instruct", "/tmp/qwen-1.5b-random"),
}
# name: (verl-p40 command, options, steps, audit, model shape)
RUNS = {
    "grpo-n4": ("bench", ["--algorithm", "grpo", "--samples-per-prompt", "4"], 5, False, "0.5b"),
    "grpo-n8": ("bench", ["--algorithm", "grpo", "--samples-per-prompt", "8"], 5, False, "0.5b"),
    "grpo-n8-audit": ("train", ["--algorithm", "grpo", "--samples-per-prompt", "8"], 3, True, "0.5b"),
    # the second session: the audit in a call of its own, then LoRA on each shape in a call of its own
    "grpo-n4-audit": ("train", ["--algorithm", "grpo", "--samples-per-prompt", "4"], 2, True, "0.5b"),
    "lora-grpo-0.5b": ("bench", ["--algorithm", "grpo", "--lora-rank", "32"], 4, False, "0.5b"),
    "lora-grpo-1.5b": ("bench", ["--algorithm", "grpo", "--lora-rank", "32"], 2, False, "1.5b"),
}
# a call has 10 minutes: LoRA-GRPO on 0.5B took 284 s of wall time for 4 steps, so each shape has its own call
PHASES = {
    "grpo": ["grpo-n4", "grpo-n8", "grpo-n8-audit"],
    "audit": ["grpo-n4-audit"],
    "lora": ["lora-grpo-0.5b"],
    "lora-1.5b": ["lora-grpo-1.5b"],
}


def run(name: str, out: Path) -> None:
    command, options, steps, audit, shape = RUNS[name]
    config, weights = SHAPES[shape]
    audit_file = WORK / f"audit-{name}.jsonl" if audit else None
    logs = WORK / f"logs-{name}"
    common = ["--profile", "auto", "--gpu-memory-cap-gb", str(P40[1]), *options, "--data", "/tmp/gsm8k"]
    if command == "bench":
        args = [
            "bench",
            *common,
            "--model",
            config,
            "--keep-model",
            weights,
            "--steps",
            str(steps),
            "--out",
            str(WORK / f"{name}.json"),
            "--logs",
            str(logs),
        ]
    else:  # the product's train command, on the random weights bench (or gpu_setup.sh) built
        args = [
            "train",
            *common,
            "--model",
            weights,
            "--logs",
            str(logs),
            "--checkpoints",
            str(WORK / "ckpt"),
            f"trainer.total_training_steps={steps}",
            "trainer.save_freq=-1",
        ]
    started = time.time()
    code = verl_p40(
        *args,
        env=mask_env(P40[0], audit_file),
        log=WORK / f"{name}.log",
        timeout=(300 if shape == "1.5b" else 150) + (100 if audit else 60) * steps,
    )  # the audit slows a step ~2.7x
    result = json.loads((WORK / f"{name}.json").read_text()) if (WORK / f"{name}.json").exists() else {}
    if command == "train":
        from verl_p40.run.trainer_log import read_steps

        log = next(logs.glob("train-*.log"), None)
        result = {"command": "verl-p40 " + " ".join(args), "steps": read_steps(log) if log else []}
    save(
        result,
        "run",
        {
            "name": name,
            "mask_cc": P40[0],
            "cap_gb": P40[1],
            "audit": audit,
            "exit_code": code,
            "wall_s": round(time.time() - started, 1),
        },
        audit_file,
        out / f"{name}.json",
    )


def phase(which: str, out: Path) -> None:
    WORK.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    for name in PHASES[which]:
        run(name, out)
        pack_logs(WORK, out / f"logs-{which}.tgz")  # after each run: a call cut short keeps what ran


def report(folder: Path) -> str:
    rows = []
    for name in RUNS:
        path = folder / f"{name}.json"
        if not path.exists():
            continue
        r = json.loads(path.read_text())
        if "seconds_per_step" not in r:
            steps = r.get("steps", [])
            peak = max((s.get("perf/max_memory_allocated_gb", 0) for s in steps), default=0)
            rows.append(
                [
                    f"{name} (audit: not a timing)",
                    "",
                    "",
                    "",
                    f"{len(steps)} steps ran",
                    "",
                    "",
                    "",
                    f"{peak:.2f} GB",
                    "",
                ]
            )
            continue
        s, p = r["settings"], r["projection"]["p40"]
        rows.append(
            [
                name,
                s["rollout_n"],
                s["train_batch_size"],
                s["train_batch_size"] * s["rollout_n"],
                r["seconds_per_step"],
                r["sequences_per_s"],
                r["prompts_per_s"],
                f"{r['memory']['nvml_peak_process_gb']} GB",
                f"{r['torch_max_allocated_gb']:.2f} GB",
                f"{p['step']} s/step, {p['hours_per_gsm8k_epoch']} h/epoch",
            ]
        )
    return markdown_table(
        [
            "run",
            "n",
            "prompts/step",
            "sequences/step",
            "s/step",
            "sequences/s",
            "prompts/s",
            "worker peak (NVML)",
            "torch peak",
            "P40 projection",
        ],
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("phase", choices=[*PHASES, "report"])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--dir", type=Path)
    args = parser.parse_args()
    print(report(args.dir)) if args.phase == "report" else phase(args.phase, args.out)


if __name__ == "__main__":
    sys.exit(main())
