"""More GPUs, more hosts, on a machine of several GPUs (kinds nvidia-h200-x2 and -x4), under the Pascal mask (P40s,
24 GB cap each, audit off), random weights of Qwen2.5-0.5B's shape, real GSM8K, the product's own settings only:

- `bench --counts 1,2,4`: `verl-p40 bench --gpus 0`, `--gpus 0,1`, `--gpus 0,1,2,3` (the layout scales the batch
  and keeps sharded states on the GPU), 3 steps each (2 timed): s/step, prompts/s, the speed-up, peak memory per GPU
  (NVML, `verl-p40 monitor`'s sampler), which states the layout kept on the GPU, and each layout's P40 projection
  (bench's own, NCCL over PCIe 3.0 as P40s have no NVLink).
- `cluster`: two Ray hosts on this machine, started as the compose services start them (`verl-p40 cluster head
  --nodes 2 --gpus 0` training 2 steps with a checkpoint, `verl-p40 cluster join --gpus 1`), then that 2-GPU
  checkpoint resumed on 1 GPU (expected: exit 2 and one line) and read by `verl-p40 eval --model latest`.

After `bash /tmp/bundle/install.sh && source bench/device/gpu_setup.sh`, one device call each:
    python3 bench/scale_run.py bench --counts 1,2,4 --out $OUT     # x4 machine; --counts 1,2 on the x2 one
    python3 bench/scale_run.py cluster --out $OUT
`report` prints the table: python3 bench/scale_run.py report --dir DIR
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from lib.device_runs import markdown_table, mask_env, pack_logs, save, torch_of, verl_p40

WORK = Path("/tmp/scale")
COMMON = ["--profile", "p40", "--gpu-memory-cap-gb", "24", "--data", "/tmp/gsm8k"]
CLI = [sys.executable, "-m", "verl_p40.cli"]
# the second host: GPU 1, joining the head's Ray on this machine
JOIN = ["cluster", "join", "--gpus", "1", "--address", "127.0.0.1:6379", "--port", "6579", "--node-ip", "127.0.0.1"]


NAMES = {1: "one-gpu", 2: "two-gpus", 4: "four-gpus", 8: "eight-gpus"}
TARGET = {2: 1.8, 4: 3.6, 8: 7.2}  # the speed-up a layout must reach on NVLinked H200s (issue 34: 3.6x for four)


def layouts(counts: str) -> list[tuple[int, str, str]]:
    """(GPU count, result name, `--gpus` value) for `--counts 1,2,4`."""
    out = []
    for word in counts.split(","):
        n = int(word)
        if n not in NAMES:
            raise SystemExit(f"--counts: {n} GPUs is not one of {sorted(NAMES)}")
        out.append((n, NAMES[n], ",".join(str(i) for i in range(n))))
    return out


def bench(out: Path, counts: str = "1,2") -> None:
    for _, name, gpus in layouts(counts):
        started = time.time()
        code = verl_p40(
            "bench",
            *COMMON,
            "--gpus",
            gpus,
            "--model",
            ".gpu-shared/qwen2.5-0.5b-instruct",
            "--keep-model",
            "/tmp/qwen-random",
            "--steps",
            "3",
            "--out",
            str(WORK / f"{name}.json"),
            "--logs",
            str(WORK / f"logs-{name}"),
            env=mask_env("6.1"),
            log=WORK / f"{name}.log",
            timeout=420,
        )
        result = json.loads((WORK / f"{name}.json").read_text()) if (WORK / f"{name}.json").exists() else {}
        save(
            result,
            "run",
            {"name": name, "gpus": gpus, "exit_code": code, "wall_s": round(time.time() - started, 1)},
            None,
            out / f"scale-{name}.json",
        )
        pack_logs(WORK, out / "logs-scale-bench.tgz")


def cluster(out: Path) -> None:
    env, ckpt = mask_env("6.1"), WORK / "ckpt-2hosts"
    steps = ["trainer.total_training_steps=2", "trainer.save_freq=2"]  # right after the role: argparse's order
    train = [*COMMON, "--model", "/tmp/qwen-random", "--logs", str(WORK / "logs-cluster"), "--checkpoints", str(ckpt)]
    result: dict = {}
    result["two_hosts"] = _two_hosts(env, steps, train)
    result["resume_on_one_gpu"] = _resume_on_one_gpu(env, ckpt)
    result["eval_of_the_2gpu_checkpoint"] = _eval_checkpoint(env, ckpt)
    result["torch"] = torch_of()
    (out / "scale-cluster.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "two_hosts"}, indent=2))
    pack_logs(WORK, out / "logs-scale-cluster.tgz")


def _two_hosts(env: dict, steps: list[str], train: list[str]) -> dict:
    """`verl-p40 cluster head --nodes 2 --gpus 0` training beside `verl-p40 cluster join --gpus 1` on this machine."""
    started = time.time()
    with open(WORK / "head.log", "w") as head_log, open(WORK / "worker.log", "w") as worker_log:
        head = subprocess.Popen(
            [
                *CLI,
                "cluster",
                "head",
                *steps,
                "--nodes",
                "2",
                "--gpus",
                "0",
                "--port",
                "6379",
                "--node-ip",
                "127.0.0.1",
                "--wait-s",
                "180",
                *train,
            ],
            env=env,
            stdout=head_log,
            stderr=subprocess.STDOUT,
        )
        time.sleep(15)
        worker = subprocess.Popen(
            [*CLI, *JOIN],
            env=env,
            stdout=worker_log,
            stderr=subprocess.STDOUT,
        )
        try:
            code = head.wait(timeout=420)
        except subprocess.TimeoutExpired:
            head.kill()
            code = 124
        worker.terminate()
        worker.wait(timeout=60)
    from verl_p40.run.trainer_log import read_steps

    log = next((WORK / "logs-cluster").glob("train-*.log"), None)
    return {
        "command": "verl-p40 cluster head --nodes 2 --gpus 0 ... / verl-p40 cluster join --gpus 1",
        "train_args": [*steps, *train],
        "exit_code": code,
        "wall_s": round(time.time() - started, 1),
        "steps": read_steps(log) if log else [],
    }


def _resume_on_one_gpu(env: dict, ckpt: Path) -> dict:
    """The two hosts' checkpoint resumed on one GPU: expected to exit 2 with one line that says why."""
    resume = subprocess.run(
        [
            *CLI,
            "train",
            *COMMON,
            "--gpus",
            "0",
            "--model",
            "/tmp/qwen-random",
            "--logs",
            str(WORK / "logs-resume"),
            "--checkpoints",
            str(ckpt),
            "trainer.total_training_steps=3",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return {
        "exit_code": resume.returncode,
        "last_line": (resume.stderr.strip().splitlines() or [""])[-1],
    }


def _eval_checkpoint(env: dict, ckpt: Path) -> dict:
    """`verl-p40 eval --model latest` of the two hosts' checkpoint."""
    evaluated = subprocess.run(
        [
            *CLI,
            "eval",
            "--model",
            "latest",
            "--checkpoints",
            str(ckpt),
            "--data",
            "/tmp/gsm8k/test.parquet",
            "--limit",
            "16",
            "--max-new-tokens",
            "64",
            "--out",
            str(WORK / "eval-2gpu"),
            "--logs",
            "",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return {
        "exit_code": evaluated.returncode,
        "output": evaluated.stdout.strip().splitlines()[-3:],
        "error": evaluated.stderr.strip().splitlines()[-1:],
    }


def kept_on_gpu(notes: list[str]) -> str:
    """The states the layout brought back onto the GPU, from bench's notes ("actor Adam states kept on the GPU")."""
    kept = [n.split(" kept on the GPU")[0] for n in notes if " kept on the GPU" in n]
    return ", ".join(kept) or "none (the profile's offloading)"


def p40_rate(result: dict) -> tuple[float, float]:
    """(s/step, prompts/s) of the same layout on P40s, by bench/project.py from the run's own steps: each GPU's share
    of the work, and FSDP's traffic between the cards over PCIe 3.0 (P40s have no NVLink)."""
    from lib import run_projection as project
    from verl_p40.perf import projection

    shape = projection.Shape.from_config(json.loads((project.SHARED / "config.json").read_text()))
    # a scale run's record names no speed-up of issue 67 (those committed ran before they were the defaults, and the
    # multi-GPU runs, where they are not set, keep them off): projected as it ran
    row = project.project_run("scale", result["command"], result["steps"], shape, recent=True, recorded=True)
    if row["train_batch_size"] != result["settings"]["train_batch_size"]:
        # run before 2026-12-04, when several GPUs multiplied the batch: today's plan of that is `--batch per-gpu`
        command = f"{result['command']} --batch per-gpu"
        row = project.project_run("scale", command, result["steps"], shape, recent=True, recorded=True)
    step = row["p40_projection"]["step"]
    return step, row["train_batch_size"] / step


def report(folder: Path) -> str:
    rows, results = [], {}
    for n, name in NAMES.items():
        path = folder / f"scale-{name}.json"
        if path.exists() and "seconds_per_step" in json.loads(path.read_text()):
            results[n] = json.loads(path.read_text())
    base = results.get(1)
    p40_rates = {n: p40_rate(r) for n, r in results.items()}
    for n, r in results.items():
        peaks = ", ".join(f"GPU {k}: {v} GB" for k, v in sorted(r["memory"]["nvml_peak_device_gb"].items()))
        step_s, rate = p40_rates[n]
        speed = f"{r['prompts_per_s'] / base['prompts_per_s']:.2f}x" if base else "-"
        p40_speed = f"{rate / p40_rates[1][1]:.2f}x" if base else "-"
        rows.append(
            [
                f"{n} GPU" + ("s" if n > 1 else ""),
                r["settings"]["train_batch_size"],
                r["seconds_per_step"],
                r["prompts_per_s"],
                speed,
                peaks,
                kept_on_gpu(r.get("notes", [])),
                f"{step_s} s, {rate:.2f} prompts/s, {p40_speed}",
            ]
        )
    headers = ["layout", "batch", "s/step", "prompts/s", "vs 1 GPU", "peak per GPU (NVML)", "kept on the GPU"]
    table = markdown_table([*headers, "P40s projected (step, prompts/s, vs 1)"], rows)
    if base:
        for n, r in results.items():
            if n in TARGET:
                factor = r["prompts_per_s"] / base["prompts_per_s"]
                verdict = "reached" if factor >= TARGET[n] else "NOT reached"
                table += f"\n\n{n} GPUs: {factor:.2f}x the prompts/s of 1 (target {TARGET[n]}x: {verdict})."
        table += "\n"
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("phase", choices=["bench", "cluster", "report"])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--dir", type=Path)
    parser.add_argument("--counts", default="1,2", help="bench: the GPU counts to run, e.g. 1,2,4 [1,2]")
    args = parser.parse_args()
    if args.phase == "report":
        print(report(args.dir))
        return
    WORK.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    bench(args.out, args.counts) if args.phase == "bench" else cluster(args.out)


if __name__ == "__main__":
    sys.exit(main())
