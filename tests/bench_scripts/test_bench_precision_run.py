"""The precision bench's table (bench/precision_run.py report): speed against the fp32 plan, and whether every
step's gradient norms were present and finite, a NaN counted as such (never dropped)."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import precision_run  # noqa: E402


def bench_json(prompts_per_s: float, norms: list[float]) -> dict:
    return {
        "seconds_per_step": round(64 / prompts_per_s, 2),
        "prompts_per_s": prompts_per_s,
        "memory": {"nvml_peak_process_gb": 19.7},
        "torch_max_allocated_gb": 14.8,
        "steps": [{"step": i + 1, "actor/grad_norm": n, "critic/grad_norm": 1.0} for i, n in enumerate(norms)],
    }


def test_the_table_gives_each_plan_against_fp32_and_flags_a_nan(tmp_path):
    (tmp_path / "precision-fp32.json").write_text(json.dumps(bench_json(3.0, [1.0, 2.0])))
    (tmp_path / "precision-fp32-tf32.json").write_text(json.dumps(bench_json(3.3, [1.0, float("nan")])))
    log = "(TaskRunner pid=1) step:{} - actor/grad_norm:np.float64({}) - critic/grad_norm:np.float64(2.0)"
    log += " - timing_s/step:{}\n"
    (tmp_path / "precision-bf16.log").write_text(log.format(1, 3.5, 60.0) + log.format(2, "nan", 25.0))
    rows = precision_run.report(tmp_path).splitlines()[2:]
    assert rows[0].startswith("| fp32 |") and "| 1.00x |" in rows[0] and rows[0].endswith("actor yes, critic yes |")
    assert "| 1.10x |" in rows[1] and rows[1].endswith("actor NO, critic yes |")  # json.dumps wrote NaN
    assert "incomplete: 2 steps logged, timed [25.0]" in rows[2] and rows[2].endswith("actor NO, critic yes |")


def test_each_row_benches_the_ampere_profile_with_its_own_precision_setting(tmp_path, monkeypatch):
    """A row runs `verl-p40 bench --profile ampere` unmasked with the 24 GB cap and its one setting, and its JSON
    keeps what the bench returned beside how it ran; a bench that wrote nothing is recorded as failed."""
    calls = []

    def bench(*args, env, log, timeout):
        calls.append(list(args))
        target = Path(args[args.index("--out") + 1])
        if "bf16" not in target.name:
            target.write_text(json.dumps(bench_json(3.0, [1.0])))
        return 0 if "bf16" not in target.name else 1

    monkeypatch.setattr(precision_run, "WORK", tmp_path / "work")
    monkeypatch.setattr(precision_run, "verl_p40", bench)
    (tmp_path / "work").mkdir()
    for name in ("fp32", "fp32-tf32", "bf16"):
        precision_run.row(name, tmp_path)
    fp32, shipped, bf16 = calls
    for command in calls:
        assert (
            command[:3] == ["bench", "--profile", "ampere"]
            and command[command.index("--gpu-memory-cap-gb") + 1] == "24"
        )
    assert fp32[-2:] == ["--tf32", "off"] and "--tf32" not in shipped
    assert "actor_rollout_ref.rollout.dtype=bfloat16" in bf16 and "--tf32" not in bf16
    assert json.loads((tmp_path / "precision-fp32.json").read_text())["precision"]["options"] == ["--tf32", "off"]
    failed = json.loads((tmp_path / "precision-bf16.json").read_text())
    assert failed["error"] == "exit code 1" and failed["precision"]["exit_code"] == 1


def test_agree_lays_the_bf16_run_against_the_band_of_two_fp32_runs(tmp_path):
    line = "(TaskRunner pid=1) step:{} - actor/pg_loss:{} - critic/vf_loss:1.0 - actor/ppo_kl:0.01"
    line += " - critic/score/mean:0.2 - actor/grad_norm:3.0\n"
    curves = {"fp32-a": [0.10, 0.20, 0.30], "fp32-b": [0.12, 0.22, 0.32], "bf16": [0.11, 0.50, 0.31]}
    for name, losses in curves.items():
        (tmp_path / f"train-{name}.log").write_text("".join(line.format(i + 1, x) for i, x in enumerate(losses)))
    table, result = precision_run.agree(tmp_path)
    loss = result["metrics"]["actor/pg_loss"]
    assert loss["steps"] == 3 and loss["within_band"] == 2  # step 2 lies far outside 0.20..0.22 (+-0.02)
    assert abs(loss["fp32_gap_mean"] - 0.02) < 1e-9 and loss["bf16_to_fp32_mean"] > loss["fp32_gap_mean"]
    assert result["metrics"]["critic/vf_loss"]["within_band"] == 3
    assert "| actor/pg_loss | 2/3 |" in table
    (tmp_path / "train-bf16.log").unlink()
    import pytest

    with pytest.raises(SystemExit, match="needs train-"):
        precision_run.agree(tmp_path)
