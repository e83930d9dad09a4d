"""The GPU experiment of the update's phases and the regrouped update's before/after (bench/experiments/
update_phases.py): its phases part runs here on a CPU (--cpu: two layers, a small vocabulary), and its before/after
pair plans the P40 path with verl's micro-batches and with the length-grouped ones."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "bench" / "experiments"))

import update_phases  # noqa: E402

from verl_p40.plan.facts import Facts  # noqa: E402
from verl_p40.plan.planner import plan  # noqa: E402
from verl_p40.plan.run_options import RunOptions  # noqa: E402


def test_the_phases_are_timed_on_a_cpu(tokenizer_dir, tmp_path):
    command = [sys.executable, str(REPO / "bench" / "experiments" / "update_phases.py"), "phases", "--cpu"]
    command += ["--config", str(tokenizer_dir), "--reps", "1", "--out", str(tmp_path / "out")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "update-phases.json").read_text())
    measured = report["measured"]
    for phase in ("forward_s", "backward_s", "adamw_foreach_s", "offload_round_trip_s"):
        assert measured[phase] > 0, phase
    assert "recomputation_s" in measured and measured["state_bytes"] > 0
    assert report["micro_batch"] == {"rows": 3, "width": 64, "tokens": 192} and report["projection_prices"] is None


def test_before_runs_verls_micro_batches_and_after_the_length_grouped_ones():
    def planned(sets):
        options = RunOptions(profile="p40", algorithm="grpo-gsm8k", gpu_memory_cap_gb=24, sets=sets)
        return plan(options, Facts.of_card("p40")).config()

    sets = [update_phases.VERLS[i + 1] for i in range(0, len(update_phases.VERLS), 2)]
    default = plan(RunOptions(profile="p40", algorithm="grpo-gsm8k", gpu_memory_cap_gb=24), Facts.of_card("p40"))
    offer = update_phases.offered("\n".join(f"[verl-p40] {n}" for n in default.notes))
    before, after = planned(sets), planned(offer[1::2])
    assert before.actor_rollout_ref.actor.p40_update_tokens == 0 and before.critic.p40_update_tokens == 0
    # set on a P40 since issue 67's validation: `offered` reads the budget from the line that says so
    assert default.config().actor_rollout_ref.actor.p40_update_tokens == after.actor_rollout_ref.actor.p40_update_tokens
    assert after.actor_rollout_ref.actor.p40_update_tokens > 0 and offer[0] == "--set"
    h200 = plan(RunOptions(profile="p40", algorithm="grpo-gsm8k", gpu_memory_cap_gb=24), Facts.of_card("h200"))
    assert update_phases.offered("\n".join(h200.notes)) == offer  # offered, not set, on a newer GPU: the same budget
    assert "--gpu-memory-cap-gb" in update_phases.P40_PATH and "kernels" in update_phases.P40_PATH
    both = planned(update_phases.variant_sets("both", offer)[1::2])
    assert both.actor_rollout_ref.rollout.p40_log_probs == "rollout"  # auto resolved: the pass is skipped
    assert both.actor_rollout_ref.actor.p40_update_tokens == after.actor_rollout_ref.actor.p40_update_tokens
    kept = planned(update_phases.variant_sets("before", offer)[1::2])
    assert kept.actor_rollout_ref.rollout.p40_log_probs == "pass"
    compact = planned(update_phases.variant_sets("compact", offer)[1::2])  # both, and the decoder's compaction
    assert compact.actor_rollout_ref.rollout.p40_decode_compact is True
    assert kept.actor_rollout_ref.rollout.p40_decode_compact is False and not both.actor_rollout_ref.rollout.get(
        "p40_decode_compact", False
    )  # the profile sets it since 2026-12-06: every variant but `compact` turns it off
    assert compact.actor_rollout_ref.actor.p40_update_tokens == after.actor_rollout_ref.actor.p40_update_tokens
    # the op audit of the path the plan set on 2026-12-06/07: the same config as `compact`
    audited = planned(update_phases.variant_sets("compact-audited", offer)[1::2])
    assert audited == compact and update_phases.variant_sets("compact-audited", offer) == update_phases.variant_sets(
        "compact", offer
    )
    assert audited.actor_rollout_ref.rollout.p40_decode_compact == default.config().actor_rollout_ref.rollout.get(
        "p40_decode_compact"
    )
    grouped = planned(update_phases.variant_sets("grouped", offer)[1::2])  # the adopted path, prompt passes by length
    assert grouped.actor_rollout_ref.rollout.p40_prefill_groups == 8 and grouped.actor_rollout_ref.rollout.get(
        "p40_decode_compact"
    )
    # the p40 profile sets 8 groups since 2026-12-07: the plan's path is `grouped`, audited as it runs, and every
    # variant measured before keeps the one prompt pass it ran with
    assert default.config().actor_rollout_ref.rollout.p40_prefill_groups == 8
    assert planned(update_phases.variant_sets("grouped-audited", offer)[1::2]) == grouped
    for name in ("before", "log-probs", "update", "both", "compact", "audited", "compact-audited"):
        assert planned(update_phases.variant_sets(name, offer)[1::2]).actor_rollout_ref.rollout.p40_prefill_groups == 1
