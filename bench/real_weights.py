"""GPU bench (real weights): does PPO under the p40 profile improve GSM8K accuracy, across a kill and resume?

Run on the GPU machine after staging the GGUF (bench/README.md, "Real weights") and `source bench/gpu_setup.sh`:

    python bench/real_weights.py --gguf /tmp/model.gguf --out $OUT --steps 30 --kill-after 12 --save-freq 5

All through the product's CLI:
1. bench/gguf_to_hf.py: the GGUF as a Hugging Face folder of Qwen2.5-0.5B-Instruct's shape (tied, Qwen2.5 tokenizer);
2. `verl-p40 prep`, then two fixed slices of GSM8K test: held-out = rows 0..255 (only evaluated, never used while
   training), validation = rows 256..511 (the trainer's own validation curve);
3. `verl-p40 eval` of the base model on the held-out slice;
4. `verl-p40 train --profile p40 --gpu-memory-cap-gb 24 --reward-method flexible --format-bonus 0.1`, checkpointing every
   --save-freq steps, killed (SIGTERM) after --kill-after steps, started again with the same command; the step it
   resumes at is read from the second log;
5. `verl-p40 eval --model BASE --compare latest` on the held-out slice: report.md with answers side by side.
Writes real-weights-<date>.json (commands, accuracies, the difference with a paired sign test, resume evidence,
step time, peak memory) and real-weights-<date>.png (reward and validation accuracy over steps).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from ppo_runner import NvmlPeak, environment

from verl_p40.metrics import read_steps

HERE = Path(__file__).resolve().parent


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "verl_p40.cli", *args]


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    print("$ " + shlex.join(cmd), flush=True)
    return subprocess.run(cmd, check=True, **kwargs)


def slices(data: Path) -> tuple[Path, Path]:
    import pyarrow.parquet as pq

    table = pq.read_table(data / "test.parquet")
    heldout, val = data / "heldout-256.parquet", data / "val-256.parquet"
    pq.write_table(table.slice(0, 256), heldout)
    pq.write_table(table.slice(256, 256), val)
    return heldout, val


def train_until(cmd: list[str], logs: Path, kill_after: int | None, timeout: float) -> dict:
    """Run the trainer; with kill_after, SIGTERM it once that step is logged. Returns what happened."""
    logs.mkdir(parents=True, exist_ok=True)
    print("$ " + shlex.join(cmd), flush=True)
    proc = subprocess.Popen(cmd)
    started, killed_at = time.time(), None
    while proc.poll() is None and time.time() - started < timeout:
        time.sleep(5)
        if kill_after is not None:
            log = sorted(logs.glob("train-*.log"))
            steps = read_steps(log[-1]) if log else []
            if steps and steps[-1]["step"] >= kill_after:
                killed_at = int(steps[-1]["step"])
                proc.send_signal(signal.SIGTERM)
                break
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log = sorted(logs.glob("train-*.log"))[-1]
    return {"returncode": proc.returncode, "killed_after_step": killed_at, "log": str(log),
            "steps": read_steps(log), "wall_s": round(time.time() - started, 1)}


def sign_test(records: list[dict]) -> dict:
    """Paired comparison on the same questions: questions only the trained model gets right vs only the base."""
    out = {}
    for kind in ("strict", "flexible"):
        better = sum(r["models"]["trained"][kind] > r["models"]["base"][kind] for r in records)
        worse = sum(r["models"]["trained"][kind] < r["models"]["base"][kind] for r in records)
        n = better + worse
        # two-sided exact binomial test of better vs worse under p = 0.5
        tail = sum(math.comb(n, k) for k in range(0, min(better, worse) + 1)) / 2**n if n else 1.0
        out[kind] = {"trained_only_right": better, "base_only_right": worse, "p_value_two_sided": min(1.0, 2 * tail)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gguf", required=True)
    parser.add_argument("--tokenizer", default=".gpu-shared/qwen2.5-0.5b-instruct")
    parser.add_argument("--gsm8k", default=".gpu-shared/gsm8k")
    parser.add_argument("--out", required=True)
    parser.add_argument("--work", default="/tmp/real")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--kill-after", type=int, default=12)
    parser.add_argument("--save-freq", type=int, default=5)
    parser.add_argument("--test-freq", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=320)
    parser.add_argument("--extra", nargs="*", default=[], help="more verl overrides for the trainer")
    args = parser.parse_args()
    work, out = Path(args.work), Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    model, data = work / "qwen-real", work / "gsm8k"
    if not (model / "config.json").is_file():
        run([sys.executable, str(HERE / "gguf_to_hf.py"), "--gguf", args.gguf, "--tokenizer", args.tokenizer,
             "--out", str(model)])
    run(cli("prep", "--source", args.gsm8k, "--out", str(data), "--skip-existing"))
    heldout, val = slices(data)
    eval_common = ["--data", str(heldout), "--max-new-tokens", str(args.max_new_tokens), "--batch-size", "128"]
    run(cli("eval", "--model", str(model), "--out", str(work / "eval-base"), "--logs", str(work / "none"),
            *eval_common))

    train = cli("train", "--profile", "p40", "--model", str(model), "--data", str(data),
                "--checkpoints", str(work / "ckpt"), "--gpu-memory-cap-gb", "24",
                "--reward-method", "flexible", "--format-bonus", "0.1",
                f"data.val_files={val}", f"trainer.test_freq={args.test_freq}", "trainer.val_before_train=true",
                f"trainer.save_freq={args.save_freq}", f"trainer.total_training_steps={args.steps}",
                f"data.max_response_length={args.max_new_tokens}", *args.extra)
    sampler = NvmlPeak()
    sampler.start()
    first = train_until([*train, "--logs", str(work / "logs")], work / "logs", args.kill_after, timeout=3000)
    second = train_until([*train, "--logs", str(work / "logs")], work / "logs", None, timeout=3000)
    nvml = sampler.stop()
    resumed_log = Path(second["log"]).read_text(errors="replace")
    resumed_from = [line.strip() for line in resumed_log.splitlines() if "Load from checkpoint folder" in line]

    run(cli("eval", "--model", str(model), "--compare", "latest", "--checkpoints", str(work / "ckpt"),
            "--out", str(work / "eval-final"), "--logs", str(work / "logs"), *eval_common))
    report = json.loads((work / "eval-final" / "report.json").read_text())
    records = [json.loads(line) for line in (work / "eval-final" / "answers.jsonl").read_text().splitlines()]
    steps = first["steps"] + second["steps"]
    result = {
        "environment": environment(),
        "train_command": "verl-p40 " + shlex.join(train[3:]),
        "heldout": "GSM8K test rows 0..255 (256 questions); validation during training: rows 256..511",
        "eval": report["models"],
        "difference": {k: round(report["models"]["trained"][f"accuracy_{k}"] - report["models"]["base"][f"accuracy_{k}"], 4)
                       for k in ("strict", "flexible")},
        "paired_sign_test": sign_test(records),
        "resume": {"first_run_killed_after_step": first["killed_after_step"],
                   "first_run_last_step": int(first["steps"][-1]["step"]) if first["steps"] else None,
                   "second_run_first_step": int(second["steps"][0]["step"]) if second["steps"] else None,
                   "loaded": resumed_from[:1], "save_freq": args.save_freq},
        "step_time_s_mean": round(sum(s.get("timing_s/step", 0) for s in steps) / max(1, len(steps)), 2),
        "peak_torch_max_allocated_gb": max((s.get("perf/max_memory_allocated_gb", 0) for s in steps), default=None),
        **nvml,
        "steps": steps,
    }
    stem = out / f"real-weights-{time.strftime('%Y-%m-%d')}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    for name in ("report.md", "report.json", "answers.jsonl", "curves.png"):
        source = work / "eval-final" / name
        if source.exists():
            (out / f"real-weights-eval-{name}").write_bytes(source.read_bytes())
    plot(steps, stem.with_suffix(".png"), result)
    print(json.dumps({k: result[k] for k in ("eval", "difference", "paired_sign_test", "resume")}, indent=1))


def plot(steps: list[dict], path: Path, result: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4))
    ax1.plot([s["step"] for s in steps], [s.get("critic/score/mean") for s in steps], marker=".")
    ax1.set_title("training reward (flexible + 0.1 format bonus)")
    ax1.set_xlabel("PPO step")
    val = [(s["step"], v) for s in steps for k, v in s.items() if k.startswith("val-core/") and "reward" in k]
    if val:
        ax2.plot([v[0] for v in val], [v[1] for v in val], marker="o")
    ax2.set_title("validation reward (test rows 256..511)")
    ax2.set_xlabel("PPO step")
    killed = result["resume"]["first_run_killed_after_step"]
    if killed:
        for ax in (ax1, ax2):
            ax.axvline(killed, color="red", linestyle=":", label=f"killed after step {killed}")
            ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
