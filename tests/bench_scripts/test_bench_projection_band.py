"""The P40 projection's error bar (bench/projection_band.py) from the committed bench results of 2026-12-04: every
calibration's error by phase, and each P40 figure corrected by each calibration's step error."""

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import projection_band  # noqa: E402

BENCH = REPO / "bench" / "results" / "default-2026-12-04" / "bench"


def test_the_committed_band_is_what_the_committed_results_give():
    calibrations = [projection_band.calibration(BENCH / f"{n}.json") for n in ("masked-p40-cap24", "unmasked")]
    out = projection_band.band(calibrations, {"real-weights stand-in (plan-check-2026-12-03, p40-after)": 88.1})
    masked, unmasked = out["calibrations"]
    assert masked["error_pct"]["step"] == -17.4 and unmasked["error_pct"]["step"] == 104.8  # as bench reported
    assert masked["error_pct"]["update_actor"] == -30.7
    bands = list(out["bands"].values())
    assert (bands[0]["projected_s"], bands[0]["low_s"], bands[0]["high_s"]) == (110.772, 54.1, 134.1)
    assert (bands[-1]["low_s"], bands[-1]["high_s"]) == (43.0, 106.7)
    committed = json.loads((REPO / "bench" / "results" / "projection-band-2026-12-05" / "band.json").read_text())
    assert committed["bands"] == out["bands"]  # the committed file is this computation (paths as given)
