"""trim_padding on the GPU: `verl-p40 bench` with the p40 profile as it is (trim_padding on) and with it turned off,
in one call or two, on GPU 0, under the Pascal mask (a P40: sm_61, 24 GB cap, audit off), batch 64, on real weights
of Qwen2.5-0.5B's shape (the real-weights proxy: its answers have real lengths, so the response side is trimmed
too), real GSM8K.

Run on the GPU machine after staging the GGUF (bench/results/README.md, "Real weights"),
`bash /tmp/bundle/install.sh && source bench/device/gpu_setup.sh` and bench/device/gguf_to_hf.py into /tmp/qwen-real:
    python3 bench/experiments/trim_run.py run --model /tmp/qwen-real --out $OUT
`report` prints the side-by-side table from the returned JSONs: python3 bench/experiments/trim_run.py report --dir DIR
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from lib.device_runs import markdown_table, mask_env, pack_logs, save, verl_p40

WORK = Path("/tmp/trim")
PASSES = ("update_actor", "update_critic", "old_log_prob", "ref", "values")  # what trimming touches
OFF = ["--set", "actor_rollout_ref.model.trim_padding=false", "--set", "critic.model.trim_padding=false"]
RUNS = {"trimmed": [], "full-width": OFF}


def run(name: str, model: Path, steps: int, out: Path) -> None:
    args = [
        "bench",
        "--profile",
        "p40",
        "--gpu-memory-cap-gb",
        "24",
        "--gpus",
        "0",
        *RUNS[name],
        "--data",
        "/tmp/gsm8k",
        "--model",
        str(model),
        "--keep-model",
        str(model),
        "--steps",
        str(steps),
        "--out",
        str(WORK / f"{name}.json"),
        "--logs",
        str(WORK / f"logs-{name}"),
    ]
    started = time.time()
    code = verl_p40(*args, env=mask_env("6.1"), log=WORK / f"{name}.log", timeout=150 + 60 * steps)
    result = json.loads((WORK / f"{name}.json").read_text()) if (WORK / f"{name}.json").exists() else {}
    save(
        result,
        "run",
        {"name": name, "mask_cc": "6.1", "cap_gb": 24, "exit_code": code, "wall_s": round(time.time() - started, 1)},
        None,
        out / f"trim-{name}.json",
    )


def report(folder: Path) -> str:
    rows, passes = [], {}
    for name in RUNS:
        path = folder / f"trim-{name}.json"
        if not path.exists() or "phases_s" not in json.loads(path.read_text()):
            continue
        r = json.loads(path.read_text())
        passes[name] = sum(r["phases_s"].get(p, 0.0) for p in PASSES)
        p40 = r["projection"]["p40"]
        rows.append(
            [
                name,
                r["projection"].get("pass_width", ""),
                r["seconds_per_step"],
                round(passes[name], 2),
                *(r["phases_s"].get(p, "") for p in PASSES),
                f"{r['memory']['nvml_peak_process_gb']} GB",
                f"{r['torch_max_allocated_gb']:.2f} GB",
                f"{p40['step']} s/step, {p40['hours_per_gsm8k_epoch']} h/epoch",
            ]
        )
    table = markdown_table(
        [
            "run",
            "pass width (projection)",
            "s/step",
            "the five passes (s)",
            *PASSES,
            "worker peak (NVML)",
            "torch peak",
            "P40 projection",
        ],
        rows,
    )
    if len(passes) == 2 and passes["trimmed"]:
        table += f"\n\nThe five passes: {passes['full-width'] / passes['trimmed']:.2f}x faster trimmed.\n"
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("phase", choices=["run", "report"])
    parser.add_argument("--model", type=Path, default=Path("/tmp/qwen-real"))
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument(
        "--runs",
        nargs="+",
        choices=list(RUNS),
        default=list(RUNS),
        help="which runs (two device calls may each take one)",
    )
    parser.add_argument("--out", type=Path)
    parser.add_argument("--dir", type=Path)
    args = parser.parse_args()
    if args.phase == "report":
        print(report(args.dir))
        return
    WORK.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.runs:
        run(name, args.model, args.steps, args.out)
        pack_logs(WORK, args.out / "logs-trim.tgz")


if __name__ == "__main__":
    sys.exit(main())
