"""The memory plan (verl_p40.plan.memory and the plan's memory step): its model reproduces the peaks it was calibrated
on, and the sizes it picks fit each card, grow with the card, and leave the run's own settings alone."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from verl_p40.plan import memory
from verl_p40.plan.facts import Facts
from verl_p40.plan.planner import plan
from verl_p40.plan.run_options import RunOptions

RECIPE = memory.Step(
    sequences=256, prompt_width=168, response_width=512, critic=False, reference=True, lora=False, mini_batch=128
)  # grpo-gsm8k's step at the widths its runs had (longest prompt ~168 + 512)
ALL = frozenset(memory.STATES)


@pytest.mark.parametrize(
    "sizes,measured_gib",
    [
        # bench/results/learning-2026-12-01/p40: the p40 plan, 8 steps, torch peak 14.2 GiB
        (memory.Sizes(64, 4, 8, True, frozenset()), 14.2),
        # ../shared/learning-2026-12-02 (fast mode, 20 steps): 35.3 GiB from the second step on
        (memory.Sizes(256, 16, 32, True, ALL), 35.28),
    ],
)
def test_the_model_reproduces_the_peaks_it_was_calibrated_on(sizes, measured_gib):
    peak = max(memory.phase_peaks(memory.QWEN_05B, RECIPE, sizes).values())
    assert peak == pytest.approx(measured_gib * 2**30, rel=0.03)


def _sizes(card: str, cap: float | None = None, algorithm: str = "grpo-gsm8k", sets=()):
    run = plan(
        RunOptions(profile="auto", algorithm=algorithm, gpu_memory_cap_gb=cap, sets=list(sets)), Facts.of_card(card)
    )
    return run, run.record["memory"]


def test_a_p40_generates_the_whole_step_at_once_and_updates_without_recomputation():
    run, mem = _sizes("p40", cap=24)
    cfg = run.config()
    assert cfg.actor_rollout_ref.rollout.micro_batch_size == 256  # one chunk (the profile's was 64: four)
    assert cfg.actor_rollout_ref.model.enable_gradient_checkpointing is False
    assert mem["predicted_peak_gb"] <= mem["budget_gb"] <= 0.8 * 24 + 1e-9
    assert any(n.startswith("memory plan for 24.0 GB: generation 256 sequences at once") for n in run.notes)


def test_sizes_grow_with_the_card_and_states_stay_on_a_large_one():
    small, large = _sizes("h200", cap=16)[1], _sizes("h200")[1]
    assert small["sizes"]["generation"] <= large["sizes"]["generation"]
    assert small["sizes"]["update_micro"] <= large["sizes"]["update_micro"] == memory.MAX_UPDATE_MICRO
    assert large["sizes"]["logprob_micro"] == memory.MAX_LOGPROB_MICRO
    assert {"actor_optimizer", "reference_params"} <= set(large["sizes"]["on_gpu"])
    assert small["predicted_peak_gb"] <= small["budget_gb"]


def test_the_runs_own_sizes_stay_theirs():
    run, mem = _sizes(
        "h200",
        sets=["actor_rollout_ref.rollout.micro_batch_size=32", "actor_rollout_ref.ref.fsdp_config.param_offload=true"],
    )
    cfg = run.config()
    assert cfg.actor_rollout_ref.rollout.micro_batch_size == 32
    assert cfg.actor_rollout_ref.ref.fsdp_config.param_offload is True
    assert mem["sizes"]["generation"] == 32 and "reference_params" not in mem["sizes"]["on_gpu"]


def test_a_card_the_profile_was_measured_on_keeps_at_least_the_profiles_sizes():
    """The 16 GB profiles' sizes were measured to fit 16 GB (FSDP2): the model, calibrated on FSDP1, predicts more,
    and the plan keeps the measured micro-batch rather than shrinking below it."""
    run, mem = _sizes("v100")
    assert run.profile.name == "volta-turing"
    assert mem["sizes"]["update_micro"] >= 2


def test_the_update_micro_batch_divides_the_mini_batch():
    for card in ("p40", "a100-40gb", "h200"):
        cfg = _sizes(card, algorithm="ppo")[0].config()
        assert (
            cfg.actor_rollout_ref.actor.ppo_mini_batch_size % cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu
            == 0
        )


@pytest.mark.parametrize(
    "card,cap,algorithm", [("p40", 24, "grpo-gsm8k"), ("p40", 24, "ppo-gsm8k"), ("h200", 20, "grpo-gsm8k")]
)
def test_the_regrouped_update_is_offered_in_tokens_within_the_cap(card, cap, algorithm):
    """The length-grouped update (patches/p40_update.py) is set where a 20-step run validated it (one Pascal GPU, GRPO
    without a critic: p40-path-compact-2026-12-06), and offered elsewhere (PPO's critic, a newer GPU): there the plan
    keeps verl's micro-batches and says the `--set` of the token budget it found room for. Set (by the plan or as
    offered), the budget is no smaller than the sequences it would have run at full width, the micro-batch (which
    weighs the loss's tokens) stays the one chosen without it, and the predicted peak, the validation's generation
    included, stays in the budget."""
    run, mem = _sizes(card, cap=cap, algorithm=algorithm)
    if (card, algorithm) == ("p40", "grpo-gsm8k"):
        tokens = mem["sizes"]["update_tokens"]
        assert tokens > 0 and run.config().actor_rollout_ref.actor.p40_update_tokens == tokens
        line = next(n for n in run.notes if n.startswith(f"update: length-grouped micro-batches of {tokens} tokens"))
        keys = ["actor_rollout_ref.actor.p40_update_tokens"]
        assert line.endswith("verl's own: --set " + " ".join(f"{key}=0" for key in keys))
        offer = f"--set {' '.join(f'{key}={tokens}' for key in keys)}"  # the same budget, set by the run
        run, mem = _sizes(card, cap=cap, algorithm=algorithm, sets=[f"{key}=0" for key in keys])
        assert mem["sizes"]["update_tokens"] == 0  # the run's own 0 keeps verl's micro-batches
    else:
        assert mem["sizes"]["update_tokens"] == 0 and run.config().actor_rollout_ref.actor.p40_update_tokens == 0
        offer = next(n for n in run.notes if n.startswith("update: verl's micro-batches; length-grouped ones of "))
    sets = offer.split("--set ", 1)[1].split()
    assert len(sets) == (2 if algorithm == "ppo-gsm8k" else 1)  # the critic's too, where there is one
    tokens = int(sets[0].split("=")[1])
    taken, with_tokens = _sizes(card, cap=cap, algorithm=algorithm, sets=sets)
    cfg = taken.config()
    width = cfg.data.max_prompt_length + cfg.data.max_response_length
    assert with_tokens["sizes"]["update_tokens"] == tokens >= with_tokens["sizes"]["update_micro"] * width
    assert with_tokens["sizes"]["update_micro"] == mem["sizes"]["update_micro"]
    assert cfg.actor_rollout_ref.actor.p40_update_tokens == tokens
    if algorithm == "ppo-gsm8k":
        assert cfg.critic.p40_update_tokens == tokens
    assert with_tokens["predicted_peak_gb"] <= with_tokens["budget_gb"] <= 0.8 * cap + 1e-9
    assert any(f"length-grouped within {tokens} tokens" in n for n in taken.notes)


def test_a_token_budget_counts_rows_times_columns(monkeypatch):
    monkeypatch.setattr(memory, "UPDATE_TOKENS_FILL", 1.0)  # the fill's own test is below
    base = memory.Sizes(64, 2, 8, False, frozenset())
    same = memory.phase_peaks(memory.QWEN_05B, RECIPE, replace(base, update_tokens=2 * RECIPE.width))
    verls = memory.phase_peaks(memory.QWEN_05B, RECIPE, base)
    assert {k: v for k, v in same.items() if k != "update_actor"} == {
        k: v for k, v in verls.items() if k != "update_actor"
    }
    # 2 full-width rows' tokens: verl's micro-batch of 2, and the answer-wide tensors of the rows they may be cut into
    assert verls["update_actor"] < same["update_actor"] < verls["update_actor"] + 4e6
    more = memory.phase_peaks(memory.QWEN_05B, RECIPE, replace(base, update_tokens=4 * RECIPE.width))
    assert more["update_actor"] > same["update_actor"] and more["generation"] == same["generation"]


def test_a_token_budget_is_priced_at_least_at_what_the_p40_path_measured():
    """Issue 67: at 2,048 tokens the P40 path's update held 19.49 GB (every answer at the limit) and 20.10 GB (real
    answers) at torch's peak, at 1,792 tokens 19.65 GB (real answers, 20 steps), where the model fitted on verl's
    micro-batches predicted 18.79 and 17.21 GB: a token budget is filled by rows packed by length, verl's micro-batches
    are not. Priced UPDATE_TOKENS_FILL times the per-token terms, the prediction is at least each measurement at its
    budget and not far over it; verl's own micro-batches are priced as before."""
    root = Path(__file__).resolve().parents[2] / "bench/results"
    runs = {
        "timing-pair-2026-12-06/both.json": 2048,
        "speedups-real-2026-12-06/validation/p40-path-both.json": 2048,
        "p40-path-compact-2026-12-06/p40-path-compact.json": 1792,
    }
    step = replace(RECIPE, prompt_width=320, regrouped=True)  # the p40 plan's widths
    sizes = memory.Sizes(256, 2, 8, False, frozenset({"actor_optimizer"}))  # the runs' sizes
    largest: dict[int, float] = {}  # a budget's largest measured peak
    for run, tokens in runs.items():
        record = json.loads((root / run).read_text())
        assert record["predicted"]["sizes"]["update_tokens"] == tokens  # the budget the run had
        largest[tokens] = max(largest.get(tokens, 0.0), record["torch_phase_peaks_gb"]["update_actor"])
    for tokens, measured in largest.items():
        predicted = memory.phase_peaks(memory.QWEN_05B, step, replace(sizes, update_tokens=tokens))["update_actor"]
        assert measured <= predicted / 1e9 <= 1.06 * measured, (tokens, measured, predicted / 1e9)
    verls = memory.phase_peaks(memory.QWEN_05B, step, sizes)["update_actor"] / 1e9
    assert verls == pytest.approx(16.84, abs=0.01)  # timing-pair-2026-12-06/before.json's prediction (16.3 measured)


def test_the_run_can_keep_verls_update_micro_batches():
    run, mem = _sizes("p40", cap=24, sets=["actor_rollout_ref.actor.p40_update_tokens=0"])
    assert run.config().actor_rollout_ref.actor.p40_update_tokens == 0 and mem["sizes"]["update_tokens"] == 0


def test_a_token_budget_the_card_cannot_hold_is_refused_before_ray():
    """A user's token budget is not one of the profile's measured sizes: on a card of the profile's size it was once
    let through as 'the profile's measured sizes' (a 342 GB peak on a 24 GB P40)."""
    from verl_p40 import UserError

    with pytest.raises(UserError, match="the plan does not fit.*p40_update_tokens"):
        _sizes("p40", sets=["actor_rollout_ref.actor.p40_update_tokens=65536"])


@pytest.mark.parametrize("tokens", [2560, 3072])
def test_a_token_budget_the_run_sets_above_the_offer_recomputes_rather_than_refuses(tokens):
    """A token budget larger than the one offered fits a P40 with gradient checkpointing; the plan chose checkpointing
    at verl's micro-batches and then refused the run's budget in a line that called a 16-19 GB peak over its 19.2 GB
    and said to offload no states ("offload them ()"). The micro-batch, which weighs the loss's tokens, stays the one
    chosen without the budget."""
    run, mem = _sizes("p40", cap=24, sets=[f"actor_rollout_ref.actor.p40_update_tokens={tokens}"])
    assert mem["sizes"]["update_tokens"] == tokens and mem["sizes"]["gradient_checkpointing"] is True
    assert mem["sizes"]["update_micro"] == _sizes("p40", cap=24)[1]["sizes"]["update_micro"]
    assert mem["predicted_peak_gb"] <= mem["budget_gb"]
    assert run.config().actor_rollout_ref.model.enable_gradient_checkpointing is True


@pytest.mark.parametrize("mode", ["clip_cov", "kl_cov"])
def test_no_regrouped_update_for_a_loss_that_chooses_tokens_per_micro_batch(mode):
    """clip_cov and kl_cov choose their tokens per micro-batch (verl's core_algos.py), so length-grouped micro-batches
    are another gradient (tests/update_probe.py: 1.19 and 0.041 apart): the plan offers no token budget for them, and
    refuses one the run sets, in one line that names the loss."""
    from verl_p40 import UserError

    loss = f"actor_rollout_ref.actor.policy_loss.loss_mode={mode}"
    run, mem = _sizes("p40", cap=24, sets=[loss])
    assert mem["sizes"]["update_tokens"] == 0
    assert not [n for n in run.notes if n.startswith("update: ")], run.notes
    with pytest.raises(UserError) as refused:
        _sizes("p40", cap=24, sets=[loss, "actor_rollout_ref.actor.p40_update_tokens=2048"])
    assert f"loss_mode={mode}" in str(refused.value) and "\n" not in str(refused.value)
    gpg, _ = _sizes("p40", cap=24, sets=["actor_rollout_ref.actor.policy_loss.loss_mode=gpg"])
    assert [n for n in gpg.notes if n.startswith("update: length-grouped micro-batches of ")]  # set on a P40


def test_a_token_budget_is_priced_by_its_rows_as_well_as_its_tokens():
    """Issue 67: the same 2,048 tokens held 3 long rows in the bench and hold 5-8 real-length ones; each row adds a
    logits column (the one before its answer) and its answer-wide tensors, so more rows are priced higher, and the
    logits priced bound every layout the budget lets a micro-batch take (rows x (prompt + answer) <= budget, the
    logits each row's answer columns and one more: p40_trim.py)."""
    sizes = memory.Sizes(64, 2, 8, False, frozenset(), update_tokens=2048)
    few, many = (replace(RECIPE, mini_batch=rows) for rows in (3, 8))
    assert memory.update_rows(few, sizes) == 3 and memory.update_rows(many, sizes) == 8
    peaks = [memory.phase_peaks(memory.QWEN_05B, step, sizes)["update_actor"] for step in (few, many)]
    assert peaks[0] < peaks[1]
    for rows in range(1, 2048 // 2 + 1):  # the widest answer a row may have beside one prompt column
        answer = min(RECIPE.response_width, 2048 // rows - 1)
        assert rows * (answer + 1) <= memory.update_logit_cells(RECIPE, sizes), rows


def test_the_note_names_the_states_the_estimate_counts():
    """One decision of which states a run holds (memory.Step.holds), read by the estimate and the note alike: a LoRA
    run's reference is the actor with its adapter off, so its note names no reference weights on the GPU, as its
    estimate counts none (`verl-p40 config --card a100-80gb --lora-rank 32` said "on the GPU: reference weights")."""
    run = plan(RunOptions(profile="auto", lora_rank=32), Facts.of_card("a100-80gb"))
    note = next(n for n in run.notes if n.startswith("memory plan for"))
    assert "reference weights" not in note and "actor Adam states" not in note
    step = replace(RECIPE, lora=True)
    assert not step.holds("reference_params") and not step.holds("actor_optimizer")
    assert memory.phase_peaks(memory.QWEN_05B, step, memory.Sizes(64, 4, 8, True, frozenset())) == (
        memory.phase_peaks(memory.QWEN_05B, step, memory.Sizes(64, 4, 8, True, ALL))
    )  # a state the run does not hold weighs nothing, on the GPU or off it
    full = next(n for n in plan(RunOptions(profile="auto"), Facts.of_card("a100-80gb")).notes if "memory plan" in n)
    assert "reference weights" in full  # a full-weights GRPO run keeps its reference on a card this size
