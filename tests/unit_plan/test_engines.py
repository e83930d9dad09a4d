"""Which rollout engine and torch.compile setting a profile gets, for each GPU generation and installed packages."""

import copy

import pytest

from conftest import cli
from verl_p40.plan import engines, profiles
from verl_p40.plan import planner as train
from verl_p40.plan.engines import Where
from verl_p40.plan.facts import Facts

P40, V100, T4, A100, H200 = 6.1, 7.0, 7.5, 8.0, 9.0


@pytest.mark.parametrize(
    "profile,sm,vllm,triton,rollout,compile_",
    [
        # the default image: no vLLM, Triton present (torch's dependency)
        ("p40", P40, False, True, "hf", False),
        ("volta-turing", V100, False, True, "hf", False),
        ("volta-turing", T4, False, True, "hf", False),
        ("ampere", A100, False, True, "hf", False),
        ("ampere", H200, False, True, "hf", False),
        # the -vllm image variant on sm_70+
        ("volta-turing", V100, True, True, "vllm", False),
        ("ampere", H200, True, True, "vllm", False),
        # vLLM installed but the card is older than sm_70 (a forced profile on a P40)
        ("ampere", P40, True, True, "hf", False),
        # the p40 profile never asks for vLLM, even where it is installed
        ("p40", H200, True, True, "hf", False),
        # no GPU visible (config on a laptop): the choice follows what is installed
        ("ampere", None, False, False, "hf", False),
        ("ampere", None, True, False, "vllm", False),
    ],
)
def test_rollout_and_compile_for_each_generation(profile, sm, vllm, triton, rollout, compile_):
    verl, notes = engines.complete(profiles.load(profile).verl, Where(sm=sm, vllm=vllm, triton=triton))
    arr = verl["actor_rollout_ref"]
    assert arr["rollout"]["name"] == rollout
    assert arr["actor"].get("use_torch_compile", True) is compile_
    assert any(note.startswith(f"rollout: {rollout}") for note in notes), notes


def test_the_reason_is_given():
    verl, notes = engines.complete(profiles.load("ampere").verl, Where(sm=H200, vllm=False, triton=True))
    assert notes[0] == (
        "rollout: hf (float32) instead of the profile's vllm: vLLM is not installed here (the default "
        "image has none; the -vllm image variant carries it)"
    )
    # the run's own rollout dtype wins over the profile's, and the note names it (a bf16 run said "float32")
    _, notes = engines.complete(
        profiles.load("ampere").verl,
        Where(sm=H200, vllm=False, triton=True),
        {"actor_rollout_ref.rollout.dtype": "bfloat16"},
    )
    assert notes[0].startswith("rollout: hf (bfloat16) instead of the profile's vllm")
    verl, notes = engines.complete(profiles.load("volta-turing").verl, Where(sm=P40, vllm=True, triton=True))
    assert notes[0].endswith("vLLM needs sm_70 or newer, this GPU is sm_61")
    assert verl["actor_rollout_ref"]["rollout"]["dtype"] == "float16"  # the profile's dtype is kept


def test_the_decoder_is_said_with_the_hf_rollout():
    """patches/p40_decode.py: a CUDA graph where there is a GPU, the static cache alone where there is none, and
    transformers' generate() where the run turns it off; nothing for vLLM, which decodes on its own. The p40 profile
    sets the compaction (issue 67's validation); the run's own false turns it off."""
    hf = profiles.load("p40").verl
    _, notes = engines.complete(hf, Where(sm=P40, vllm=False, triton=False), {engines.COMPACT: "false"})
    assert notes[1] == (
        "rollout decoding: a static KV cache and one CUDA graph a token "
        "(p40_decode=auto; off: transformers' generate())"
    )
    _, notes = engines.complete(hf, Where(sm=None, vllm=False, triton=False))
    assert notes[1].startswith("rollout decoding: a static KV cache (no GPU: no CUDA graph)")
    _, notes = engines.complete(
        hf, Where(sm=P40, vllm=False, triton=False), {"actor_rollout_ref.rollout.p40_decode": "off"}
    )
    assert notes[1] == "rollout decoding: transformers' generate() (p40_decode=off)"
    _, notes = engines.complete(hf, Where(sm=P40, vllm=False, triton=False))  # the profile's own
    assert notes[1] == (
        "rollout decoding: a static KV cache and one CUDA graph a token, the prompts' padding cut and ended rows "
        "leaving the batch every 16 tokens (p40_decode=auto; off: transformers' generate())"
    )
    _, notes = engines.complete(profiles.load("ampere").verl, Where(sm=H200, vllm=True, triton=True))
    assert not any(note.startswith("rollout decoding") for note in notes)


def test_the_compaction_note_reads_the_composed_config(monkeypatch):
    """A profile that adopts p40_decode_compact is said as the run's own --set is (the user's false wins over it),
    and the interval named is the decoder's own STOP_CHECK, not a number written twice."""
    from verl_p40.patches import p40_decode_rules

    hf = copy.deepcopy(profiles.load("p40").verl)
    hf["actor_rollout_ref"]["rollout"]["p40_decode_compact"] = True
    monkeypatch.setattr(p40_decode_rules, "STOP_CHECK", 32)
    _, notes = engines.complete(hf, Where(sm=P40, vllm=False, triton=False))
    assert "ended rows leaving the batch every 32 tokens" in notes[1]
    _, notes = engines.complete(hf, Where(sm=P40, vllm=False, triton=False), {engines.COMPACT: "false"})
    assert "leaving the batch" not in notes[1]


@pytest.mark.parametrize("sm,triton,expected", [(P40, True, False), (V100, False, False), (A100, True, True)])
def test_torch_compile_needs_triton_on_sm70(sm, triton, expected):
    verl = {"actor_rollout_ref": {"rollout": {"name": "hf"}, "actor": {}}}  # verl's default: compile on
    completed, notes = engines.complete(verl, Where(sm=sm, vllm=False, triton=triton))
    assert completed["actor_rollout_ref"]["actor"].get("use_torch_compile", True) is expected
    assert any("use_torch_compile: false" in n for n in notes) is (not expected)


def test_config_and_dry_run_show_the_choice(tiny_model, prepared):
    """On this machine (no GPU, no vLLM) the ampere profile trains with the HF rollout, and says why."""
    for command in (
        ["config", "--profile", "ampere", "--overrides-only"],
        ["train", "--profile", "ampere", "--dry-run", "--model", str(tiny_model), "--data", str(prepared)],
    ):
        result = cli(*command)
        assert result.returncode == 0, result.stderr
        assert "[verl-p40] rollout: hf (float32) instead of the profile's vllm: vLLM is not installed" in result.stderr
        assert "actor_rollout_ref.rollout.name=hf" in result.stdout


def test_plan_uses_the_completed_profile():
    run = train.plan(train.RunOptions(profile="ampere"), Facts(gpus=None, vllm=True))
    assert "actor_rollout_ref.rollout.name=vllm" in run.overrides
