"""GPU bench (the modern-cards issue): the ampere profile's precision plans on one unmasked GPU, in one device call,
through `verl-p40 bench` (random-weight Qwen2.5-0.5B shape, real GSM8K prompts, a 24 GB cap as on an RTX 3090/4090):
- fp32: the p40 profile's fp32 plan, `--tf32 off` (matmuls in full fp32, tensor cores idle);
- fp32-tf32: the ampere profile as shipped (`--tf32 auto`: TF32 matmuls on sm_80+);
- bf16: the same with FSDP mixed precision in bf16 (params fp32, compute bf16, reduce and buffers fp32) for the
  actor, the reference and the critic, and the HF rollout in bf16.
Each row keeps every step's `actor/grad_norm` and `critic/grad_norm` as logged (a NaN is recorded as NaN: a bf16
plan is only worth shipping when they are finite). After `bash .gpu-bundle/install.sh && source bench/gpu_setup.sh`:

    python3 bench/precision_run.py rows fp32 fp32-tf32 --out $OUT     # ~190 s a row; bf16 in the next call
    python3 bench/precision_run.py report --dir DIR                   # here, from the returned JSONs
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from generations import COMMON, WORK, markdown_table, mask_env, pack_logs, save, verl_p40
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
            "all_finite": bool(values) and all(isinstance(v, float) and math.isfinite(v) for v in values),
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("phase", choices=("rows", "report"))
    parser.add_argument("names", nargs="*", help=f"rows: which rows, in this order ({', '.join(ROWS)})")
    parser.add_argument("--out", type=Path, default=Path("/tmp/precision-out"))
    parser.add_argument("--dir", type=Path, help="report: the folder of precision-*.json")
    args = parser.parse_args()
    if args.phase == "report":
        table = report(args.dir)
        (args.dir / "precision.md").write_text(table + "\n")
        print(table)
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
