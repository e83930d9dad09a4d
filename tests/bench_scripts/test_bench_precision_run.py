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


def test_the_rows_are_the_ampere_profile_with_one_precision_setting_each():
    assert precision_run.ROWS["fp32"][1] == ["--tf32", "off"] and precision_run.ROWS["fp32-tf32"][1] == []
    bf16 = precision_run.ROWS["bf16"][1]
    assert "actor_rollout_ref.rollout.dtype=bfloat16" in bf16
    for key in ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic.model"):
        assert f"{key}.fsdp_config.mixed_precision.param_dtype=bf16" in bf16


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
