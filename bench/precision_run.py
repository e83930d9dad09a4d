"""GPU bench (the modern-cards issue): the ampere profile's precision plans on one unmasked GPU, in one device call,
through `verl-p40 bench` (random-weight Qwen2.5-0.5B shape, real GSM8K prompts, a 24 GB cap as on an RTX 3090/4090):
- fp32: the p40 profile's fp32 plan, `--tf32 off` (matmuls in full fp32, tensor cores idle);
- fp32-tf32: the ampere profile as shipped (`--tf32 auto`: TF32 matmuls on sm_80+);
- bf16: the same with FSDP mixed precision in bf16 (params fp32, compute bf16, reduce and buffers fp32) for the
  actor, the reference and the critic, and the HF rollout in bf16.
Each row keeps every step's `actor/grad_norm` and `critic/grad_norm` as logged (a NaN is recorded as NaN: a bf16
plan is only worth shipping when they are finite). After
`bash /tmp/bundle/install.sh && source bench/device/gpu_setup.sh`:

    python3 bench/precision_run.py rows fp32 fp32-tf32 --out $OUT     # ~190 s a row; bf16 in the next call
    python3 bench/precision_run.py report --dir DIR                   # here, from the returned JSONs

Whether bf16 trains as fp32 does (the issue's bar for shipping it): `train` runs `verl-p40 train --profile ampere` (PPO,
the profile's settings) for --steps steps on the real-weights proxy (staged as in bench/results/README.md, "Real
weights"), one run per device call: twice as shipped (fp32-a, fp32-b: the spread two fp32 runs on the same data
have, their answers being sampled) and once in bf16; `agree` then lays each step's losses, KL and training score of
the bf16 run against the band of the two fp32 runs:

    python3 bench/precision_run.py train fp32-a --model /tmp/learn/qwen-real --data /tmp/learn/gsm8k --out $OUT
    python3 bench/precision_run.py agree --dir DIR                    # here: agree.md and agree.png
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from lib.device_runs import COMMON, WORK, markdown_table, mask_env, pack_logs, save, torch_of, verl_p40
from verl_p40.run.trainer_log import read_steps

BF16 = [
    *(
        f"{key}.fsdp_config.mixed_precision.param_dtype=bf16"
        for key in ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic.model")
    ),
    "actor_rollout_ref.rollout.dtype=bfloat16",
]
# name: (what it is, `verl-p40 bench` options after --profile ampere)
ROWS = {
    "fp32": ("the fp32 plan, TF32 off", ["--tf32", "off"]),
    "fp32-tf32": ("the ampere profile as shipped (fp32, TF32 matmuls)", []),
    "bf16": ("bf16 mixed precision (FSDP), bf16 rollout", BF16),
}
CAP_GB, STEPS = 24, 3
GRAD_NORMS = ("actor/grad_norm", "critic/grad_norm")


def row(name: str, out: Path) -> None:
    _, options = ROWS[name]
    target = WORK / f"precision-{name}.json"
    started = time.time()
    code = verl_p40(
        "bench",
        "--profile",
        "ampere",
        "--gpu-memory-cap-gb",
        str(CAP_GB),
        "--steps",
        str(STEPS),
        "--out",
        str(target),
        "--logs",
        str(WORK / f"logs-precision-{name}"),
        *COMMON,
        *options,
        env=mask_env(None),
        log=WORK / f"precision-{name}.log",
        timeout=200 + 60 * STEPS,
    )
    result = json.loads(target.read_text()) if target.exists() else {"error": f"exit code {code}"}
    run = {"row": name, "options": options, "cap_gb": CAP_GB, "exit_code": code, "wall_s": round(time.time() - started)}
    save(result, "precision", run, None, out / f"precision-{name}.json")


def grad_norms(steps: list[dict]) -> dict:
    """Per key: every step's value as logged (NaN kept), and whether all were present and finite."""
    summary = {}
    for key in GRAD_NORMS:
        values = [s.get(key) for s in steps]
        summary[key] = {
            "per_step": values,
            "all_finite": bool(values) and all(isinstance(v, (int, float)) and math.isfinite(v) for v in values),
        }
    return summary


def report(folder: Path) -> str:
    rows, base = [], None
    for name, (what, _) in ROWS.items():
        path, log = folder / f"precision-{name}.json", folder / f"precision-{name}.log"
        if not path.exists() and log.exists():  # the call's time ran out mid-row: what its steps logged
            steps = read_steps(log)
            norms = grad_norms(steps)
            finite = ", ".join(f"{k.split('/')[0]} {'yes' if v['all_finite'] else 'NO'}" for k, v in norms.items())
            timed = [round(s["timing_s/step"], 2) for s in steps[1:] if "timing_s/step" in s]
            rows.append([name, what, f"incomplete: {len(steps)} steps logged, timed {timed}", "", "", "", finite])
            continue
        if not path.exists():
            continue
        r = json.loads(path.read_text())
        if "seconds_per_step" not in r:
            rows.append([name, what, f"failed (exit {r['precision']['exit_code']})", "", "", "", ""])
            continue
        base = r["prompts_per_s"] if name == "fp32" else base
        norms = grad_norms(r.get("steps", []))
        finite = ", ".join(f"{k.split('/')[0]} {'yes' if v['all_finite'] else 'NO'}" for k, v in norms.items())
        rows.append(
            [
                name,
                what,
                r["seconds_per_step"],
                r["prompts_per_s"],
                f"{r['prompts_per_s'] / base:.2f}x" if base else "-",
                f"{r['memory']['nvml_peak_process_gb']} GB / {r['torch_max_allocated_gb']:.2f} GB",
                finite,
            ]
        )
    return markdown_table(
        ["row", "plan", "s/step", "prompts/s", "vs fp32", "peak (NVML / torch)", "grad norms finite every step"],
        rows,
    )


TRAIN_RUNS = {"fp32-a": "fp32-tf32", "fp32-b": "fp32-tf32", "bf16": "bf16"}  # run: the ROWS plan it takes
AGREE_KEYS = ("actor/pg_loss", "critic/vf_loss", "actor/ppo_kl", "critic/score/mean", "actor/grad_norm")


def train(name: str, model: str, data: str, steps: int, out: Path) -> None:
    """One training run of `steps` PPO steps on real weights, its trainer log into `out`."""
    logs = WORK / f"logs-train-{name}"
    started = time.time()
    code = verl_p40(
        "train",
        "--profile",
        "ampere",
        "--gpu-memory-cap-gb",
        str(CAP_GB),
        "--model",
        model,
        "--data",
        data,
        "--checkpoints",
        str(WORK / f"ckpt-train-{name}"),
        "--logs",
        str(logs),
        *ROWS[TRAIN_RUNS[name]][1],
        f"trainer.total_training_steps={steps}",
        "trainer.save_freq=-1",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        env=mask_env(None),
        log=WORK / f"train-{name}.log",
        timeout=570,  # one device call: ~100 s start-up and ~20 s a step leave 20 steps room
    )
    for log in logs.glob("train-*.log"):
        (out / f"train-{name}.log").write_text(log.read_text(errors="replace"))
    (out / f"train-{name}.json").write_text(
        json.dumps(
            {
                "run": name,
                "plan": TRAIN_RUNS[name],
                "exit_code": code,
                "wall_s": round(time.time() - started),
                "torch": torch_of(),
            }
        )
        + "\n"
    )


def agree(folder: Path) -> tuple[str, dict]:
    """Per metric: the share of steps where the bf16 run lies within the two fp32 runs' band (min..max, widened by
    their own gap's mean so a band of two points is not zero wide), and bf16's mean distance to the fp32 runs' mean
    beside the fp32 runs' mean distance to each other."""
    runs = {
        name: read_steps(folder / f"train-{name}.log") for name in TRAIN_RUNS if (folder / f"train-{name}.log").exists()
    }
    if set(runs) != set(TRAIN_RUNS):
        raise SystemExit(f"{folder}: needs train-{{{','.join(TRAIN_RUNS)}}}.log, has {sorted(runs)}")
    steps = min(len(r) for r in runs.values())
    summary, rows = {}, []
    for key in AGREE_KEYS:
        a, b, h = ([float(s.get(key, math.nan)) for s in runs[n][:steps]] for n in TRAIN_RUNS)
        gap = [abs(x - y) for x, y in zip(a, b)]
        margin = sum(gap) / steps
        inside = sum(min(x, y) - margin <= z <= max(x, y) + margin for x, y, z in zip(a, b, h))
        to_fp32 = sum(abs(z - (x + y) / 2) for x, y, z in zip(a, b, h)) / steps
        summary[key] = {"steps": steps, "within_band": inside, "bf16_to_fp32_mean": to_fp32, "fp32_gap_mean": margin}
        rows.append([key, f"{inside}/{steps}", f"{to_fp32:.4g}", f"{margin:.4g}"])
    table = markdown_table(["metric", "bf16 steps within the fp32 band", "bf16 - fp32 mean", "fp32 a - b"], rows)
    return table, {"runs": {n: len(r) for n, r in runs.items()}, "metrics": summary, "curves": runs}


def plot_agree(curves: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(AGREE_KEYS), figsize=(4 * len(AGREE_KEYS), 3.6))
    for ax, key in zip(axes, AGREE_KEYS):
        for name, steps in curves.items():
            ax.plot([s["step"] for s in steps], [s.get(key, math.nan) for s in steps], marker=".", label=name)
        ax.set_title(key)
        ax.set_xlabel("step")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("phase", choices=("rows", "report", "train", "agree"))
    parser.add_argument("--model", help="train: the real-weights model folder")
    parser.add_argument("--data", help="train: the prepared GSM8K folder")
    parser.add_argument("--steps", type=int, default=20, help="train: PPO steps (~20 s each on an H200)")
    parser.add_argument("names", nargs="*", help=f"rows: which rows, in this order ({', '.join(ROWS)})")
    parser.add_argument("--out", type=Path, default=Path("/tmp/precision-out"))
    parser.add_argument("--dir", type=Path, help="report: the folder of precision-*.json")
    args = parser.parse_args()
    if args.phase == "report":
        table = report(args.dir)
        (args.dir / "precision.md").write_text(table + "\n")
        print(table)
        return
    if args.phase == "agree":
        table, result = agree(args.dir)
        (args.dir / "agree.md").write_text(table + "\n")
        (args.dir / "agree.json").write_text(json.dumps({k: v for k, v in result.items() if k != "curves"}, indent=2))
        plot_agree(result["curves"], args.dir / "agree.png")
        print(table)
        return
    if args.phase == "train":
        if len(args.names) != 1 or args.names[0] not in TRAIN_RUNS or not (args.model and args.data):
            parser.error(f"train: one run of {', '.join(TRAIN_RUNS)}, with --model and --data")
        WORK.mkdir(parents=True, exist_ok=True)
        args.out.mkdir(parents=True, exist_ok=True)
        train(args.names[0], args.model, args.data, args.steps, args.out)
        return
    unknown = [name for name in args.names if name not in ROWS]
    if unknown or not args.names:
        parser.error(f"rows: name rows from {', '.join(ROWS)} (got {' '.join(args.names) or 'none'})")
    WORK.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.names:
        row(name, args.out)
    pack_logs(WORK, args.out / f"logs-precision-{'-'.join(args.names)}.tgz")
    print(report(args.out))


if __name__ == "__main__":
    main()
