"""bench/device/holds/timing_pair.sh, the one home of the holds' random-weights timing pair: the random model first,
then update_phases.py bench with the hold's variants, its output and log; a failed random model stops it with 4."""

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "device" / "holds" / "timing_pair.sh"


def _run(tmp_path: Path, random_rc: int) -> tuple[subprocess.CompletedProcess, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.txt"
    fake = bin_dir / "python3"
    # a python3 that records each call and fails make_random_model.py with RANDOM_RC
    fake.write_text(
        '#!/bin/sh\necho "$*" >> "$CALLS"\ncase "$1" in *make_random_model.py) exit "$RANDOM_RC";; esac\n'
        "echo bench-output\n"
    )
    fake.chmod(0o755)
    code = tmp_path / "code"
    code.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(calls), "RANDOM_RC": str(random_rc)}
    done = subprocess.run(
        ["bash", "-c", f'source "{SCRIPT}"; timing_pair before,grouped "$0/out" "$0/bench.log"', str(tmp_path)],
        cwd=code,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = calls.read_text().splitlines() if calls.exists() else []
    return done, lines


def test_it_makes_the_random_model_then_benches_the_variants(tmp_path):
    done, calls = _run(tmp_path, 0)
    assert done.returncode == 0, done.stderr
    assert len(calls) == 2
    assert calls[0].startswith("bench/device/make_random_model.py --config tests/fixtures/qwen2.5-0.5b-instruct")
    assert calls[1] == f"bench/experiments/update_phases.py bench --variants before,grouped --out {tmp_path}/out"
    assert (tmp_path / "bench.log").read_text() == "bench-output\n"
    # bench's common arguments name .gpu-shared's tokenizer folder: linked to the code copy's fixture
    link = tmp_path / "code" / ".gpu-shared" / "qwen2.5-0.5b-instruct"
    assert os.readlink(link) == str(tmp_path / "code" / "tests" / "fixtures" / "qwen2.5-0.5b-instruct")


def test_a_failed_random_model_stops_before_the_bench(tmp_path):
    done, calls = _run(tmp_path, 1)
    assert done.returncode == 4
    assert done.stdout.strip() == "random model failed"
    assert len(calls) == 1
    assert not (tmp_path / "bench.log").exists()
