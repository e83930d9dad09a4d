"""The one P40 time figure (bench/p40_time.py): the committed p40-time.json is what the committed results give."""

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import p40_time  # noqa: E402

OUT = REPO / "bench" / "results" / "p40-time-adopted-2026-12-06" / "p40-time.json"


def _figure() -> dict:
    return p40_time.p40_time(
        p40_time.RECIPE, p40_time.STEP_RESULT, p40_time.BAND, p40_time.FIGURE, p40_time.LIMIT_FIGURE, p40_time.RUN_LOG
    )


def test_the_committed_figure_is_what_the_committed_results_give():
    assert json.loads(OUT.read_text(encoding="utf-8")) == _figure()


def test_the_run_is_its_steps_validations_and_saves_at_the_corrected_band():
    figure = _figure()
    assert (figure["steps"], figure["validations"], figure["saves"]) == (60, 7, 6)  # steps 0, 10, ..., 60; saves 10-60
    # the 58.9 s of p40-path-compact-2026-12-06 corrected by the eleven calibrations' errors
    # (pair67-grouped-2026-12-08's band)
    assert (figure["step_s"]["low"], figure["step_s"]["high"]) == (66.4, 73.8)
    assert (figure["validation_s"], figure["save_s"]) == (12.7, 10.0)
    low = (60 * 66.4 + 7 * 12.7 + 6 * 10.0) / 3600
    assert figure["run_hours"]["low"] == round(low, 2) == 1.15
    assert p40_time.headline(figure) == "1.1-1.3"
    assert figure["hours_at_step"]["60"] == {"low": figure["run_hours"]["low"], "high": figure["run_hours"]["high"]}


def test_a_validation_costs_what_the_steps_generation_cost_on_the_masked_path():
    """The basis of pricing a validation as the step's generation: the masked P40 path's two of each agree."""
    basis = _figure()["validation_basis"]
    generation = basis["masked_generation_s_median"]
    assert all(abs(v - generation) / generation < 0.05 for v in basis["masked_validation_s"]), basis


def test_logged_reads_verls_metrics():
    assert p40_time.logged("step:3 - timing_s/testing:9.05 - timing_s/gen:8.9", "timing_s/testing") == [9.05]
