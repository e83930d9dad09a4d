"""Every GPU generation from the default image's stack (no vLLM), on the lent H200 under the Pascal mask: `verl-p40
doctor` and `verl-p40 bench` as a P40, a 16 GB Pascal card (P100), a V100 (with the op audit), a T4, and unmasked
(the ampere profile), each with `--profile auto` and the emulated card's memory as the cap.

Run on the GPU machine after `bash /tmp/bundle/install.sh && source bench/device/gpu_setup.sh`, in two calls that
each fit the device's 10 minutes:  python3 bench/experiments/generations.py a --out $OUT  (then b, c, d1, d2)
`report` rebuilds the summary table from the returned JSONs here:
    python3 bench/experiments/generations.py report --dir DIR
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from lib.device_runs import COMMON, WORK, markdown_table, mask_env, pack_logs, save, verl_p40

# name: (mask capability or None for unmasked, memory cap GB, steps, audit, extra verl overrides)
CARDS = {
    "p40": ("6.1", 24, 4, False, []),
    "v100": ("7.0", 16, 3, True, []),
    "t4": ("7.5", 15, 3, False, []),
    "p100": ("6.0", 16, 3, False, []),
    "h200-unmasked": (None, 24, 3, False, []),
    # the first v100/t4 runs ran out of memory in update_actor; the same card with the HF rollout in fp32
    "v100-rollout-fp32": ("7.0", 16, 2, False, ["actor_rollout_ref.rollout.dtype=float32"]),
    # then FSDP2 for the actor and reference model (now in the 16 GB profiles); run by hand, see the results README
    "v100-fsdp2": (
        "7.0",
        16,
        3,
        False,
        ["actor_rollout_ref.actor.strategy=fsdp2", "actor_rollout_ref.ref.strategy=fsdp2"],
    ),
    "t4-fsdp2": (
        "7.5",
        15,
        2,
        False,
        ["actor_rollout_ref.actor.strategy=fsdp2", "actor_rollout_ref.ref.strategy=fsdp2"],
    ),
    # phase d, with the profiles as they now are (`auto` picks volta-turing / pascal-16gb / ampere's fp32 plan)
    "v100-profile": ("7.0", 16, 3, True, []),
    "p100-profile": ("6.0", 16, 3, False, []),
    "h200-auto": (None, 24, 3, False, []),
}
PHASES = {
    "a": ["doctor", "p40"],
    "b": ["v100", "t4"],
    "c": ["p100", "v100-rollout-fp32", "h200-unmasked"],
    "d1": ["v100-profile"],
    "d2": ["p100-profile", "h200-auto"],
}


def doctor(out: Path) -> None:
    log = WORK / "doctor.log"
    args = [
        "doctor",
        "--profile",
        "auto",
        "--model",
        "/tmp/qwen-random",
        "--data",
        "/tmp/gsm8k",
        "--checkpoints",
        str(WORK / "ckpt"),
        "--logs",
        str(WORK / "logs"),
    ]
    env = mask_env("6.1")
    env["VERL_P40_DOCTOR_SKIP"] = ""
    results = {}
    for label, extra in (("all-checks", []), ("skip-kernels", ["--skip-check", "kernels"])):
        text = subprocess.run(
            [sys.executable, "-m", "verl_p40.cli", *args, *extra], env=env, capture_output=True, text=True
        )
        results[label] = {
            "command": "verl-p40 " + " ".join(args + extra),
            "exit_code": text.returncode,
            "stdout": text.stdout.splitlines(),
            "stderr_tail": text.stderr.splitlines()[-5:],
        }
        log.open("a").write(text.stdout + text.stderr)
        print(text.stdout, flush=True)
    (out / "doctor-p40-mask.json").write_text(json.dumps(results, indent=2) + "\n")


def bench(name: str, out: Path) -> None:
    cc, cap, steps, audit, extra = CARDS[name]
    audit_file = WORK / f"audit-{name}.jsonl" if audit else None
    target = WORK / f"bench-{name}.json"
    started = time.time()
    code = verl_p40(
        "bench",
        "--profile",
        "auto",
        "--gpu-memory-cap-gb",
        str(cap),
        "--steps",
        str(steps),
        "--out",
        str(target),
        "--logs",
        str(WORK / f"logs-{name}"),
        *COMMON,
        *extra,
        env=mask_env(cc, audit_file),
        log=WORK / f"bench-{name}.log",
        timeout=200 + 45 * steps,
    )
    result = json.loads(target.read_text()) if target.exists() else {"error": f"exit code {code}"}
    save(
        result,
        "generations",
        {
            "card": name,
            "mask_cc": cc,
            "cap_gb": cap,
            "audit": audit,
            "overrides": extra,
            "exit_code": code,
            "wall_s": round(time.time() - started, 1),
        },
        audit_file,
        out / f"bench-{name}.json",
    )


def phase(which: str, out: Path) -> None:
    WORK.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    for step in PHASES[which]:
        doctor(out) if step == "doctor" else bench(step, out)
    pack_logs(WORK, out / f"logs-{which}.tgz")


def report(folder: Path) -> str:
    rows = []
    for name in CARDS:
        path = folder / f"bench-{name}.json"
        if not path.exists():
            continue
        r = json.loads(path.read_text())
        cc, cap, *_ = CARDS[name]
        g = r.get("generations") or {"mask_cc": cc, "cap_gb": cap, "exit_code": 0}
        if "seconds_per_step" not in r:
            rows.append([name, "-", f"{g['cap_gb']} GB", "-", f"failed (exit {g['exit_code']})", "", "", "", "", ""])
            continue
        p = r["projection"]
        audit = ", op audit on: not a timing" if g.get("audit") else ""
        rows.append(
            [
                f"{name} ({g['mask_cc'] or 'unmasked'}{audit})",
                r["profile"],
                f"{g['cap_gb']} GB",
                r["settings"]["train_batch_size"],
                r["seconds_per_step"],
                r["prompts_per_s"],
                f"{r['memory']['nvml_peak_process_gb']} GB",
                f"{r['torch_max_allocated_gb']:.2f} GB",
                f"{p['p40']['step']} s/step, {p['p40']['hours_per_gsm8k_epoch']} h/epoch",
                f"{p['this_gpu']['error_pct_vs_measured']:+} %",
            ]
        )
    return markdown_table(
        [
            "card (mask)",
            "profile",
            "cap",
            "batch",
            "s/step",
            "prompts/s",
            "worker peak (NVML)",
            "torch peak",
            "P40 projection",
            "projection error here",
        ],
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("phase", choices=[*PHASES, "report"])
    parser.add_argument("--out", type=Path, help="where the results go ($OUT)")
    parser.add_argument("--dir", type=Path, help="report: the folder holding the returned JSONs")
    args = parser.parse_args()
    if args.phase == "report":
        print(report(args.dir))
    else:
        phase(args.phase, args.out)


if __name__ == "__main__":
    main()
