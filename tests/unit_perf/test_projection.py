"""The P40 projection: FLOPs and bytes of each phase from the run's token counts, over a card's constants, and the
summary `verl-p40 bench` writes (checked on a recorded verl log; the command itself needs a GPU)."""

import json

import pytest

from conftest import cli
from verl_p40.perf import bench as benchmark
from verl_p40.perf import projection
from verl_p40.plan.planner import plan
from verl_p40.plan.run_options import RunOptions


@pytest.fixture(scope="module")
def shape(tokenizer_dir):
    return projection.Shape.from_config(json.loads((tokenizer_dir / "config.json").read_text()))


# the p40 profile's own sizes, pinned: these tests are of the projection's arithmetic, not of the memory plan's choices
PROFILE_SIZES = [
    "actor_rollout_ref.rollout.micro_batch_size=64",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "critic.ppo_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.model.enable_gradient_checkpointing=true",
    "critic.model.enable_gradient_checkpointing=true",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true",
    "actor_rollout_ref.rollout.p40_log_probs=pass",  # verl's old_log_prob pass, priced: the phases' yardstick below
    "actor_rollout_ref.ref.fsdp_config.param_offload=true",
    "critic.model.fsdp_config.param_offload=true",
    "critic.model.fsdp_config.optimizer_offload=true",
]


def _run(profile="p40", *sets):
    options = RunOptions(algorithm="ppo", profile=profile, sets=[*PROFILE_SIZES, *sets])
    return projection.run_from_config(plan(options).config(), generated=256)


def test_shape_of_qwen25_05b(shape):
    assert shape.parameters == 494_032_768  # the published count of Qwen2.5-0.5B
    assert (shape.hidden, shape.layers, shape.kv_dim, shape.intermediate) == (896, 24, 128, 4864)


def test_phase_costs_follow_the_settings(shape):
    ppo = projection.phases(shape, _run())
    assert set(ppo) == {"old_log_prob", "ref", "values", "update_actor", "update_critic"}
    tokens = 64 * (320 + 256)  # padded: every sequence at the full prompt + response width
    lm = shape.block_parameters + shape.vocab * shape.hidden
    assert ppo["old_log_prob"]["flops"] == pytest.approx(2 * lm * tokens, rel=0.1)
    assert ppo["update_actor"]["flops"] == 4 * ppo["old_log_prob"]["flops"]  # fwd + bwd + checkpoint recompute
    without = projection.phases(shape, _run("p40", "actor_rollout_ref.model.enable_gradient_checkpointing=false"))
    assert without["update_actor"]["flops"] == 3 * ppo["old_log_prob"]["flops"]  # no recomputation
    assert ppo["values"]["flops"] < ppo["old_log_prob"]["flops"]  # the critic has no vocabulary projection
    # the profile offloads the actor's optimizer and the critic: both cross PCIe each step
    assert ppo["update_actor"]["host_bytes"] == 2 * 2 * 4 * shape.parameters
    grpo = projection.phases(
        shape, _run("p40", "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4", "data.train_batch_size=16")
    )
    assert "values" not in grpo and "update_critic" not in grpo


def test_a_slower_card_takes_longer_and_generation_keeps_the_host_floor(shape):
    run = _run()
    fast = projection.Card("fast", 50.0, 4000.0, 50.0, "test")
    host = 0.03
    on_fast, on_p40 = projection.project(shape, run, fast, host), projection.project(shape, run, projection.P40, host)
    assert on_p40["step"] > 3 * on_fast["step"]
    prefill, _ = projection.generation_gpu_seconds(shape, run, fast)
    assert on_fast["gen"] == pytest.approx(prefill + 256 * host, abs=1e-3)  # the host's per-token overhead dominates
    assert on_p40["gen"] >= on_fast["gen"]
    assert projection.epoch_hours(52.0, 64) == round(52.0 * 113 / 3600, 2)  # 7,217 prompts: 113 steps of 64


def test_host_overhead_is_what_the_gpu_work_does_not_explain(shape):
    run = _run()
    card = projection.Card("fast", 50.0, 4000.0, 50.0, "test")
    prefill, per_token = projection.generation_gpu_seconds(shape, run, card)
    assert projection.host_overhead_per_token(prefill + 256 * 0.02, shape, run, card) == pytest.approx(0.02)
    assert projection.host_overhead_per_token(0.0, shape, run, card) == per_token  # never below the GPU's own time


def test_bench_summary_from_recorded_steps(shape):
    steps = [
        {
            "step": i,
            "timing_s/step": 20.0 + (i == 1) * 30,
            "timing_s/gen": 8.0,
            "timing_s/update_actor": 4.2,
            "timing_s/update_critic": 4.1,
            "timing_s/old_log_prob": 1.0,
            "timing_s/ref": 1.1,
            "timing_s/values": 1.0,
            "response_length/max": 256.0,
            "prompt_length/max": 150.0 + i,
            "perf/max_memory_allocated_gb": 14.8,
            "perf/peak_allocated_gb/generation": 9.0 + i / 4,  # GiB, as the phase-peak patch logs them
            "perf/peak_allocated_gb/update_actor": 13.5,
        }
        for i in range(1, 5)
    ]
    cfg = plan(RunOptions(algorithm="ppo", profile="p40")).config()
    card = projection.Card("H200 (measured)", 45.0, 4000.0, 40.0, "test")
    summary = benchmark.summarise(steps, cfg, shape, card)
    assert summary["seconds_per_step"] == 20.0 and summary["prompts_per_s"] == 3.2  # warm-up step left out
    # verl logs GiB; the summary gives GB of 1e9 bytes as the plan predicts them: 14.8 GiB whole-run, and each
    # phase's largest peak over the steps, 10 GiB and 13.5 GiB
    assert summary["steps_timed"] == 3 and summary["torch_max_allocated_gb"] == 15.89
    assert summary["torch_phase_peaks_gb"] == {"generation": 10.74, "update_actor": 14.5}
    line = benchmark.phase_lines(summary["torch_phase_peaks_gb"], {"update_actor": 12.59})
    assert line == ["torch's peak by phase, GB: generation 10.74, update_actor 14.5 (plan 12.59)"]
    assert benchmark.phase_lines({}, {"update_actor": 12.59}) == []  # a log from before the patch: no line
    here, p40 = summary["projection"]["this_gpu"], summary["projection"]["p40"]
    assert here["error_pct_vs_measured"] == round(100 * (here["step"] - 20.0) / 20.0, 1)
    assert p40["step"] > here["step"] and p40["hours_per_gsm8k_epoch"] == projection.epoch_hours(p40["step"], 64)
    # each phase's error beside the step's, and the P40 step corrected by it
    assert here["error_pct_by_phase"]["update_actor"] == round(100 * (here["update_actor"] - 4.2) / 4.2, 1)
    assert here["error_pct_by_phase"]["step"] == here["error_pct_vs_measured"]
    corrected = round(p40["step"] / (1 + here["error_pct_vs_measured"] / 100), 1)
    assert p40["error_band"] == {"low_s": corrected, "high_s": corrected, "errors_pct": [here["error_pct_vs_measured"]]}
    assert "Tesla P4" in p40["card"]["source"]
    # the p40 profile trims padding: its passes are projected at the steps' longest prompt + response (median of
    # 151, 152, 153 and 154 -> 152.5, plus 256), beside the same run at verl's full width
    assert summary["projection"]["pass_width"] == 152.5 + 256
    full = summary["projection"]["p40_at_full_width"]
    # the p40 profile's decoder cuts the prompts' padding (p40_decode_compact): at full width its prefill is not cut
    assert full["pass_width"] == 320 + 256 and full["step"] > p40["step"] and full["gen"] > p40["gen"]
    assert full["update_actor"] > p40["update_actor"] * 1.3


def test_trimmed_width_only_where_trimming_is_on(shape):
    cfg = plan(RunOptions(algorithm="ppo", profile="p40")).config()
    assert projection.run_from_config(cfg, 256, (150.0, 256.0)).width == 406
    assert projection.run_from_config(cfg, 256, (400.0, 256.0)).width == 576  # never wider than verl's own
    assert projection.run_from_config(cfg, 256).width == 576  # no lengths logged: the full width
    off = plan(RunOptions(algorithm="ppo", profile="p40", sets=["actor_rollout_ref.model.trim_padding=false"])).config()
    assert projection.run_from_config(off, 256, (150.0, 256.0)).width == 576
    narrow, wide = (
        projection.phases(shape, projection.run_from_config(cfg, 256, lengths))["ref"]["flops"]
        for lengths in ((150.0, 256.0), (320.0, 256.0))
    )
    assert narrow < wide * 406 / 576 * 1.01


def test_bench_needs_a_gpu_and_says_so(tmp_path):
    result = cli("bench", "--profile", "p40", "--model", str(tmp_path / "none"), "--out", str(tmp_path / "b.json"))
    assert result.returncode == 2 and not (tmp_path / "b.json").exists()
    assert result.stderr.strip().splitlines()[-1].startswith("verl-p40 bench: error: ")
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # nor a ledger, nor its logs folder


def test_bench_replaces_its_own_result_and_never_a_users_file(tmp_path):
    from verl_p40 import UserError
    from verl_p40.outputs import LEDGER

    out = tmp_path / "bench.json"
    for seconds in (20.0, 21.0):
        benchmark.save(benchmark.check_outputs(out), out, {"verl_p40_bench": 1, "seconds_per_step": seconds})
    assert json.loads(out.read_text())["seconds_per_step"] == 21.0  # the second run's, over its own
    with pytest.raises(TypeError):  # a write that fails half way leaves the earlier result and no temporary
        benchmark.save(benchmark.check_outputs(out), out, {"verl_p40_bench": 1, "seconds_per_step": object()})
    assert json.loads(out.read_text())["seconds_per_step"] == 21.0
    assert sorted(p.name for p in tmp_path.iterdir()) == [LEDGER, "bench.json"]
    mine = tmp_path / "mine.json"
    mine.write_text('{"my": "numbers"}')
    with pytest.raises(UserError, match=r"mine.json: already there and not written by verl-p40 bench; move it away"):
        benchmark.check_outputs(mine)
    (tmp_path / "link.json").symlink_to(mine)
    with pytest.raises(UserError, match=r"link.json: a symbolic link; verl-p40 bench writes only inside --out"):
        benchmark.check_outputs(tmp_path / "link.json")
    (tmp_path / "b-logs" / "gpu").mkdir(parents=True)
    (tmp_path / "b-logs" / "gpu" / "gpu.csv").write_text("my,own\n")  # where bench's GPU samples go
    with pytest.raises(UserError, match=r"b-logs/gpu/gpu.csv: already there and not written by verl-p40 bench"):
        benchmark.check_outputs(tmp_path / "b.json")
    assert mine.read_text() == '{"my": "numbers"}' and not (tmp_path / "b.json").exists()


def test_bench_takes_an_earlier_versions_result_for_its_own(tmp_path):
    out = tmp_path / "bench.json"
    out.write_text(json.dumps({"verl_p40_bench": 1, "seconds_per_step": 20.0}, indent=2) + "\n")  # no ledger then
    benchmark.save(benchmark.check_outputs(out), out, {"verl_p40_bench": 1, "seconds_per_step": 19.0})
    assert json.loads(out.read_text())["seconds_per_step"] == 19.0


def test_sigterm_while_bench_works_ends_like_ctrl_c_and_leaves_nothing(tmp_path, tokenizer_dir):
    """Stopped while it makes the random-weight model (before any GPU work): exit 130, its work folder (2 GB for the
    0.5B shape) and any temporary gone, no result."""
    import os
    import signal
    import subprocess
    import sys
    import time

    temp = tmp_path / "tmp"
    temp.mkdir()
    args = ["bench", "--profile", "p40", "--model", str(tokenizer_dir), "--out", str(tmp_path / "b.json")]
    child = subprocess.Popen(
        [sys.executable, "-m", "verl_p40.cli", *args],
        env={**os.environ, "TMPDIR": str(temp)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not list(temp.glob("verl-p40-bench-*/model")) and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # until the model is being saved (torch imported: a signal inside an import reads otherwise)
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=120)
    assert child.returncode == 130, err
    assert "Traceback" not in err and not list(temp.glob("verl-p40-bench-*"))
    assert list(temp.iterdir()) == []  # nor torch's compiler cache, which importing transformers made there
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmp"]


def test_several_gpus_share_the_sequences_and_pay_for_fsdp_traffic(shape):
    one = _run()
    two = _run("p40", "trainer.n_gpus_per_node=2", "data.train_batch_size=128")
    assert (one.sequences, one.gpus, two.sequences, two.gpus) == (64, 1, 64, 2)  # each GPU does its 64
    assert two.micro_batches == {"old_log_prob": 8, "ref": 8, "values": 16, "update_actor": 16, "update_critic": 16}
    assert all("link_bytes" not in cost for cost in projection.phases(shape, one).values())
    half = shape.parameters * 4 / 2  # (N-1)/N of the fp32 weights per collective
    costs = projection.phases(shape, two)
    assert costs["ref"]["link_bytes"] == 8 * half and costs["update_actor"]["link_bytes"] == 3 * 16 * half
    # the same per-GPU work, plus the weights' traffic over a P40's PCIe (no NVLink): slower per step, not 2x slower
    p40_one, p40_two = (projection.project(shape, run, projection.P40, 0.02)["step"] for run in (one, two))
    assert p40_one < p40_two < 2 * p40_one
    nvlink = projection.Card("two H200s", 41.0, 4251.0, 22.3, "test", link_gbs=300.0)
    assert (
        projection.project(shape, two, nvlink, 0.02)["step"]
        < projection.project(shape, two, projection.Card("two H200s", 41.0, 4251.0, 22.3, "test"), 0.02)["step"]
    )


def test_logged_tokens_price_each_phase_at_what_its_passes_ran_on(shape):
    """perf/p40_tokens/* (the patch set's rows x columns of every pass, tests/unit_base/test_trim.py): the medians
    over the steps, old log-probs and the reference sharing the actor's forward count; a phase priced at the tokens
    it ran on, so as many tokens as the bound give the bound's FLOPs, and half as many about half."""
    steps = [
        {
            "perf/p40_tokens/actor_forward": 2 * 64 * 300.0 * k,
            "perf/p40_tokens/actor_update": 64 * 320.0 * k,
            "perf/p40_tokens/critic_forward": 64 * 290.0 * k,
            "perf/p40_tokens/critic_update": 64 * 310.0 * k,
        }
        for k in (3.0, 1.0, 1.0, 2.0)  # the first step (warm-up) is left out, as from the times; the median of the rest
    ]
    tokens = projection.measured_tokens(steps, reference=True)
    assert tokens == {
        "old_log_prob": 64 * 300.0,
        "ref": 64 * 300.0,
        "update_actor": 64 * 320.0,
        "values": 64 * 290.0,
        "update_critic": 64 * 310.0,
    }
    assert projection.measured_tokens(steps, reference=False)["old_log_prob"] == 2 * 64 * 300.0  # no reference pass
    assert projection.measured_tokens([{"step": 1}], reference=True) is None  # an older run logged none
    cfg = plan(RunOptions(algorithm="ppo", profile="p40")).config()
    bound = projection.run_from_config(cfg, 256, (150.0, 256.0))  # every pass at 406 columns
    at_bound = projection.run_from_config(cfg, 256, (150.0, 256.0), {p: 64 * 406.0 for p in tokens})
    assert projection.phases(shape, at_bound) == projection.phases(shape, bound)
    half = projection.run_from_config(cfg, 256, (150.0, 256.0), {p: 64 * 203.0 for p in tokens})
    for phase, cost in projection.phases(shape, half).items():
        full = projection.phases(shape, bound)[phase]
        assert 0.45 * full["flops"] < cost["flops"] < 0.5 * full["flops"], phase  # attention shrinks twice


def test_the_p40_figure_moves_as_the_calibrations_erred():
    """bench/results/bench-2026-12-04: the projection was 17.4 % under the masked H200 and 104.8 % over the
    unmasked one; a P40 step of 110.8 s projected is 134.1 s if it errs as the first, 54.1 s as the second."""
    band = projection.error_band(110.772, [104.8, -17.4])
    assert band == {"low_s": 54.1, "high_s": 134.1, "errors_pct": [-17.4, 104.8]}
    measured = {"gen": 9.034, "old_log_prob": 4.603, "update_actor": 17.779, "step": 36.051, "reward": 0.18}
    projected = {"gen": 9.034, "old_log_prob": 4.108, "update_actor": 12.329, "step": 29.79}
    errors = projection.phase_errors(measured, projected)
    assert errors == {"gen": 0.0, "old_log_prob": -10.8, "update_actor": -30.7, "step": -17.4}


def test_old_log_probs_from_the_rollout_price_no_pass_and_their_decoding_reads(shape):
    """p40_log_probs=rollout (the p40 plan's default): no old_log_prob phase; each decoding step reads the logits a
    few more times for the log-probs; the logged actor forwards are the reference's alone."""
    passed, taken = _run(), _run("p40", "actor_rollout_ref.rollout.p40_log_probs=rollout")
    assert not passed.log_probs_in_rollout and taken.log_probs_in_rollout
    assert "old_log_prob" in projection.phases(shape, passed) and "old_log_prob" not in projection.phases(shape, taken)
    before, after = (
        projection.project(shape, passed, projection.P40, 0.0),
        projection.project(shape, taken, projection.P40, 0.0),
    )
    extra = projection.LOG_PROB_PASSES * passed.sequences * shape.vocab * 4 / (projection.P40.memory_gbs * 1e9)
    assert after["gen"] == pytest.approx(before["gen"] + passed.generated * extra, abs=2e-3)  # rounded to ms
    assert after["step"] == pytest.approx(
        before["step"] - before["old_log_prob"] + passed.generated * extra, abs=2e-3
    )  # rounded to ms
    logged = {"step": 1, "perf/p40_tokens/actor_forward": 64 * 300.0, "perf/p40_tokens/actor_update": 1.0}
    skipped = {**logged, projection.OLD_LOG_PROB_PASS: 0.0}  # the patch set logs whether the pass ran
    tokens = projection.measured_tokens([skipped], reference=True)
    assert tokens["ref"] == 64 * 300.0 and "old_log_prob" not in tokens
    assert projection.old_log_prob_pass([skipped]) is False and projection.old_log_prob_pass([logged]) is None
    ran = projection.measured_tokens([{**logged, projection.OLD_LOG_PROB_PASS: 1.0}], reference=True)
    assert ran["ref"] == ran["old_log_prob"] == 32 * 300.0  # two passes over the same rows, logged together
    assert projection.measured_tokens([logged], reference=True) == ran  # a log without the metric: the pass ran


def test_generation_is_priced_at_the_rows_its_decoding_steps_ran_on(shape):
    """perf/p40_tokens/rollout_decode (the decoder's rows x decoding steps, patches/p40_decode.take_rows): where every
    row stayed to the end (as many as every sequence at every step, or more: the stop is checked every 16 tokens) the
    projection is the one without the count; where ended rows left the batch (p40_decode_compact) a decoding step's
    FLOPs and cache reads follow the rows still going, never its weights' read."""
    steps = [{"perf/p40_tokens/actor_forward": 1.0, "perf/p40_tokens/rollout_decode": 64 * 256.0 * k} for k in (9, 1)]
    assert projection.measured_tokens(steps, reference=True)["gen"] == 64 * 256.0
    sets = [*PROFILE_SIZES, "data.train_batch_size=32"]  # 256 answers a step: a decoding step is compute-bound
    cfg = plan(RunOptions(algorithm="grpo-gsm8k", profile="p40", sets=sets)).config()
    plain = projection.run_from_config(cfg, 256)
    sequences = plain.sequences
    assert sequences == 256
    every = projection.run_from_config(cfg, 256, None, {"gen": sequences * 256.0})
    over = projection.run_from_config(cfg, 256, None, {"gen": sequences * 270.0})
    half = projection.run_from_config(cfg, 256, None, {"gen": sequences * 128.0})
    seconds = lambda run: projection.project(shape, run, projection.P40, 0.0)["gen"]  # noqa: E731
    assert seconds(every) == seconds(over) == seconds(plain)
    prefill, _ = projection.generation_gpu_seconds(shape, plain, projection.P40)
    decoding = seconds(plain) - prefill
    assert 0.5 * decoding <= seconds(half) - prefill < 0.75 * decoding  # compute-bound at 256 rows a step
    weights_read = shape.parameters * 4 / (projection.P40.memory_gbs * 1e9)
    one_row = projection.run_from_config(cfg, 256, None, {"gen": 256.0})
    assert seconds(one_row) - prefill >= 256 * weights_read - 1e-3


def test_a_compacting_decoder_prefills_the_longest_prompt_not_the_padded_width(shape):
    """With p40_decode_compact the decoder's prompt pass and cache run on the columns some row attends to: the
    projection prices the prefill at the step's longest prompt (verl's prompt_length/max) instead of
    data.max_prompt_length; without it, or with generate(), at the padded width."""
    sets = [*PROFILE_SIZES, "data.train_batch_size=32"]
    off_sets = [*sets, "actor_rollout_ref.rollout.p40_decode_compact=false"]  # the p40 profile sets it
    plain_cfg = plan(RunOptions(algorithm="grpo-gsm8k", profile="p40", sets=off_sets)).config()
    compact_cfg = plan(
        RunOptions(
            algorithm="grpo-gsm8k", profile="p40", sets=[*sets, "actor_rollout_ref.rollout.p40_decode_compact=true"]
        )
    ).config()
    off_cfg = plan(
        RunOptions(
            algorithm="grpo-gsm8k",
            profile="p40",
            sets=[
                *sets,
                "actor_rollout_ref.rollout.p40_decode_compact=true",
                "actor_rollout_ref.rollout.p40_decode=off",
            ],
        )
    ).config()
    longest = (160.0, 512.0)
    plain, compact, off = (projection.run_from_config(c, 512, longest) for c in (plain_cfg, compact_cfg, off_cfg))
    assert plain.prompt_columns is None and off.prompt_columns is None and compact.prompt_columns == 160.0
    before, _ = projection.generation_gpu_seconds(shape, plain, projection.P40)
    after, _ = projection.generation_gpu_seconds(shape, compact, projection.P40)
    assert plain.prompt_width == 320 and 0.4 * before < after < 0.5 * before  # half the columns, attention quadratic


def test_the_prefill_is_priced_at_the_prompt_passes_logged_columns(shape):
    """perf/p40_tokens/rollout_prefill (the decoder's prompt passes, rows x columns: fewer by length groups,
    p40_prefill_groups): the prefill's FLOPs follow it; as many as every sequence at the longest prompt give the same
    price, and none logged falls back to that."""
    cfg = plan(RunOptions(algorithm="grpo-gsm8k", profile="p40", sets=[*PROFILE_SIZES, "data.train_batch_size=32"]))
    cfg = cfg.config()
    steps = [{"perf/p40_tokens/actor_forward": 1.0, "perf/p40_tokens/rollout_prefill": 256 * 108.0 * k} for k in (3, 1)]
    tokens = projection.measured_tokens(steps, reference=True)
    assert tokens["prefill"] == 256 * 108.0  # the warm-up step left out
    longest = (160.0, 512.0)
    bound = projection.run_from_config(cfg, 512, longest)
    same = projection.run_from_config(cfg, 512, longest, {"prefill": 256 * 160.0})
    grouped = projection.run_from_config(cfg, 512, longest, tokens)
    at_bound = projection.generation_gpu_seconds(shape, bound, projection.P40)[0]
    assert projection.generation_gpu_seconds(shape, same, projection.P40)[0] == at_bound
    fewer = projection.generation_gpu_seconds(shape, grouped, projection.P40)[0]
    assert 0.6 * at_bound < fewer < 108 / 160 * at_bound  # fewer columns, and attention over narrower rows
