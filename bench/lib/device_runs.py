"""Running the product's CLI on the lent GPU machine, as the bench scripts do: the Pascal mask's environment, one
`verl-p40` call logged, the op audit's summary, a run's JSON, the logs packed, a Markdown table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from collections import Counter
from pathlib import Path

# PASCAL_MASK_DIR: a copy outside the checkout, for processes that outlive the device call that carried .gpu-shared
MASK = os.environ.get("PASCAL_MASK_DIR") or str(Path(".gpu-shared/pascal-mask").absolute())


WORK = Path("/tmp/generations")


COMMON = ["--model", ".gpu-shared/qwen2.5-0.5b-instruct", "--keep-model", "/tmp/qwen-random", "--data", "/tmp/gsm8k"]


def mask_env(cc: str | None, audit: Path | None = None) -> dict:
    env = {**os.environ, "VERL_P40_DOCTOR_SKIP": ""}
    if cc is None:
        return env
    # the GPU machine's torch has no sm_60/sm_70 kernels: the preflight's kernel check is skipped there, by name
    env.update(
        {
            "PYTHONPATH": f"{MASK}:{env.get('PYTHONPATH', '')}",
            "PASCAL_MASK": "1",
            "PASCAL_MASK_CC": cc,
            "VERL_P40_DOCTOR_SKIP": "kernels",
        }
    )
    if audit:
        env["PASCAL_MASK_AUDIT"] = str(audit)
    return env


def verl_p40(*args: str, env: dict, log: Path, timeout: float = 280) -> int:
    cmd = [sys.executable, "-m", "verl_p40.cli", *args]
    print(f"== {' '.join(cmd)}", flush=True)
    with open(log, "a") as handle:
        handle.write(f"$ {' '.join(cmd)}\n")
        handle.flush()  # before the child writes to the same file: the command heads its output
        try:
            return subprocess.run(cmd, env=env, stdout=handle, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            return 124


def audit_summary(path: Path) -> dict:
    entries = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    ops = [e for e in entries if "op" in e]
    half = Counter(d for e in ops if e.get("half_precision") for d in e["dtypes"] if "16" in d)
    return {
        "entries": len(entries),
        "masked_processes": sum(e.get("event") == "masked" for e in entries),
        "half_precision_ops": sum(bool(e.get("half_precision")) for e in ops),
        "half_precision_dtypes": dict(half),
        "bf16_ops": sum(any("bfloat16" in d for d in e["dtypes"]) for e in ops),
        "sdpa_ops": sorted({f"{e['op']} {'/'.join(e['dtypes'])}" for e in ops if "attention" in e["op"]}),
    }


def torch_of(env: dict | None = None) -> dict:
    """The torch a process in `env` imports (default: this one's environment): version, CUDA, where from, and
    nvidia-ml-py's version. Every GPU result records it: which torch a number was measured on."""
    code = (
        "import json, torch, importlib.metadata as m; print(json.dumps({'torch': torch.__version__, "
        "'cuda': torch.version.cuda, 'file': torch.__file__, 'nvidia-ml-py': m.version('nvidia-ml-py')}))"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {"error": done.stderr[-500:]}


def save(result: dict, key: str, run: dict, audit_file: Path | None, path: Path) -> None:
    """A run's JSON: what it returned, plus how it ran under `key` (with the audit's summary when audited), and the
    torch it ran on (once per result)."""
    result.setdefault("torch", torch_of())
    result[key] = {**run, **({"audit_summary": audit_summary(audit_file)} if audit_file else {})}
    path.write_text(json.dumps(result, indent=2) + "\n")


def pack_logs(work: Path, target: Path) -> None:
    """Every log, audit, CSV, JSON and picture under `work` into one .tgz (paths relative to `work`), but none from a
    checkpoint (ckpt*: its tokenizer.json files alone are 11 MB each)."""
    with tarfile.open(target, "w:gz") as tar:
        for path in sorted(work.rglob("*")):
            if any(part.startswith("ckpt") for part in path.relative_to(work).parts):
                continue
            if path.is_file() and path.suffix in (".log", ".jsonl", ".csv", ".json", ".png"):
                tar.add(path, arcname=str(path.relative_to(work)))


def markdown_table(header: list[str], rows: list[list]) -> str:
    return "\n".join(
        [
            "| " + " | ".join(header) + " |",
            "| " + " | ".join("---" for _ in header) + " |",
            *("| " + " | ".join(str(cell) for cell in row) + " |" for row in rows),
        ]
    )
