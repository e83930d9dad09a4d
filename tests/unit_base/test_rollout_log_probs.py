"""The rollout's old log-probs (patches/p40_decode.py, p40_old_log_probs.py) against verl's old_log_prob pass, on a
CPU in fp32: verl's patched HF rollout samples GSM8K answers with the decoder and returns each token's log-prob and
entropy; verl's actor (DataParallelPPOActor.compute_log_prob) computes them again on the same sequences
(bench/experiments/rollout_log_probs.py does both, and the same pass on a float64 copy of the weights).

Tolerance: the two fp32 sources sum in different orders (a token at a time against the whole sequence at once), so
they cannot agree bit for bit; what is asked is that the rollout's values are as close to exact (fp64) arithmetic as
the pass's own (the rollout's largest distance from the fp64 pass within 2x the fp32 pass's), so that the two differ
by rounding alone, and never by more than CEILING. A tiny model with initializer_range 1.0 samples from peaked
distributions (a sampled token's mean log-prob about -2.7: the report's mean_log_prob), as a trained model does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from conftest import cli, run_two_ranks

REPO = Path(__file__).resolve().parents[2]
CEILING = 1e-3  # whatever the fp64 check says: a log-prob or entropy further off than this is not rounding


@pytest.fixture(scope="module")
def setup(patched_verl, prepared, tokenizer_dir, tmp_path_factory):
    from conftest import make_tiny_qwen

    folder = tmp_path_factory.mktemp("log-probs")
    # the default recipe (grpo-gsm8k), the rollout's log-probs taken (p40_log_probs=auto): the plan skips the pass
    config = cli("config", "--profile", "p40", "--set", "actor_rollout_ref.rollout.p40_log_probs=auto")
    assert config.returncode == 0, config.stderr
    assert "verl's old_log_prob pass skipped" in config.stderr
    (folder / "p40.yaml").write_text(config.stdout)
    model = make_tiny_qwen(tokenizer_dir, folder / "model", initializer_range=1.0)
    return patched_verl, prepared, folder, model


@pytest.fixture(scope="module")
def ending(setup, tokenizer_dir):
    """The same, with a model whose answers end (the end-of-answer token) at several lengths before the limit."""
    from conftest import make_tiny_qwen

    patched, prepared, folder, _ = setup
    model = make_tiny_qwen(tokenizer_dir, folder / "model-ending", initializer_range=1.0, eos_scale=7.0)
    return patched, prepared, folder, model


def _run(setup, *extra: str) -> dict:
    patched, prepared, folder, model = setup
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "cpu_shims"), str(patched), str(REPO / "app")]),
        "VERL_P40_CPU_SHIMS": "1",
        "HF_HUB_OFFLINE": "1",
        "MASTER_PORT": str(29100 + os.getpid() % 800),
    }
    out = folder / ("out" + "".join(extra) + model.name)
    command = [sys.executable, str(REPO / "bench" / "experiments" / "rollout_log_probs.py"), "--cpu", "--fp64"]
    command += ["--config", str(folder / "p40.yaml"), "--model", str(model)]
    command += ["--data", str(prepared / "test.parquet"), "--questions", "6", "--new-tokens", "16", "--out", str(out)]
    result = subprocess.run([*command, *extra], capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((out / "rollout-log-probs.json").read_text())


@pytest.mark.parametrize(
    "sampling",
    [(), ("--temperature", "0.7", "--top-p", "0.8", "--top-k", "20")],
    ids=["recipe", "warped"],  # warped: log-probs of the whole distribution at 0.7, as verl's pass (no filtering)
)
def test_the_rollouts_log_probs_are_the_passs(setup, sampling):
    report = _run(setup, *sampling)
    assert report["finite"] and report["tokens"] >= 6 * 8  # answers of several tokens, every one compared
    assert report["mean_log_prob"] < -0.1  # sampled tokens, not a sure thing: the values mean something
    assert report["same_tokens_with_and_without_log_probs"]  # computing them does not change what is sampled
    for name in ("log_probs", "entropy"):
        own = report["against_fp64"][name]
        assert own["rollout"] <= 2 * own["pass"] + 1e-7, (name, own)  # as exact as the pass itself
        assert report[name]["max_abs_diff"] < CEILING, (name, report[name])
    assert report["actor_entropy"]["abs_diff"] < 1e-5 * max(1.0, report["actor_entropy"]["pass"])


def test_answers_that_end_before_the_limit_agree_through_their_end(ending):
    """Issue 67: every agreement so far ran its answers to the limit (tiny and random-weight models never sample the
    end-of-answer token), so an off-by-one at that token would have passed unseen. Here answers end at several
    lengths before the limit; the rollout's log-prob and entropy of each answer's tokens, its end-of-answer token
    included (verl's response mask), are the pass's, and nothing past it differs (0 there in both, masked)."""
    report = _run(ending)
    assert report["ended_before_the_limit"] >= 3, report["answer_lengths"]
    assert len([n for n in report["answer_lengths"] if n < 16]) >= 2, report["answer_lengths"]  # several ends
    assert report["finite"] and report["same_tokens_with_and_without_log_probs"]
    for name in ("log_probs", "entropy"):
        own = report["against_fp64"][name]
        assert own["rollout"] <= 2 * own["pass"] + 1e-7, (name, own)
        assert report[name]["max_abs_diff"] < CEILING, (name, report[name])
    assert report["actor_entropy"]["abs_diff"] < 1e-5 * max(1.0, report["actor_entropy"]["pass"])


def test_log_probs_only_when_asked_and_padded_to_the_response(monkeypatch):
    """generator() passes a temperature to the decoder only where the rollout's config wants log-probs; add_log_probs
    pads them (and the entropies) to verl's response width with 0, and adds nothing for generate()'s output."""
    from types import SimpleNamespace

    from verl_p40.patches import p40_decode

    assert p40_decode.wants_log_probs({"p40_log_probs": "rollout"})
    assert p40_decode.wants_log_probs({"calculate_log_probs": True})  # verl's own switch (its diff metrics)
    assert not p40_decode.wants_log_probs({"p40_log_probs": "pass"}) and not p40_decode.wants_log_probs({})
    batch: dict = {}
    p40_decode.add_log_probs(batch, SimpleNamespace(sequences=None), 5)
    assert batch == {}
    values = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, -0.25, -3.0]])
    p40_decode.add_log_probs(batch, SimpleNamespace(log_probs=values, entropy=values.abs(), temperature=1.0), 5)
    assert batch["rollout_log_probs"].tolist() == [[-1.0, -2.0, 0.0, 0.0, 0.0], [-0.5, -0.25, -3.0, 0.0, 0.0]]
    assert batch["rollout_entropys"].tolist() == [[1.0, 2.0, 0.0, 0.0, 0.0], [0.5, 0.25, 3.0, 0.0, 0.0]]


def test_token_log_probs_are_the_whole_distributions_at_the_temperature():
    from verl_p40.patches import p40_decode

    torch.manual_seed(0)
    logits, tokens = torch.randn(4, 50) * 5, torch.tensor([3, 7, 0, 49])
    log_probs, entropy = p40_decode.token_log_probs(logits, tokens, 0.7)
    expected = torch.log_softmax(logits / 0.7, -1)
    torch.testing.assert_close(log_probs, expected.gather(-1, tokens[:, None]).squeeze(-1))
    torch.testing.assert_close(entropy, -(expected.exp() * expected).sum(-1))


def test_the_trainer_takes_them_only_where_the_plan_says_and_the_rollout_gave_them(capsys):
    """p40_old_log_probs.from_rollout: verl's compute_log_prob output from the batch's rollout values (removed from the
    batch, so verl's rollout-vs-actor diff metrics do not compare them with themselves); None (verl's pass runs) with
    p40_log_probs=pass or a batch without them (generate() decoded), said once."""
    from omegaconf import OmegaConf
    from verl import DataProto

    from verl_p40.patches import p40_old_log_probs

    def batch(with_values: bool, at: float = 0.7) -> DataProto:
        tensors = {"responses": torch.ones(2, 3, dtype=torch.long)}
        if with_values:
            tensors |= {"rollout_log_probs": -torch.rand(2, 3), "rollout_entropys": torch.rand(2, 3)}
            tensors |= {p40_old_log_probs.TEMPERATURE_KEY: torch.full((2,), at)}
        return DataProto.from_dict(tensors=tensors)

    def config(source: str):
        return OmegaConf.create({"actor_rollout_ref": {"rollout": {"p40_log_probs": source, "temperature": 0.7}}})

    p40_old_log_probs._said.clear()
    assert p40_old_log_probs.from_rollout(batch(True), config("pass")) is None
    assert p40_old_log_probs.from_rollout(batch(False), config("rollout")) is None
    assert "the rollout returned none (it decoded with generate())" in capsys.readouterr().out
    given = batch(True)
    values = given.batch["rollout_log_probs"].clone(), given.batch["rollout_entropys"].clone()
    taken = p40_old_log_probs.from_rollout(given, config("rollout"))
    assert torch.equal(taken.batch["old_log_probs"], values[0]) and torch.equal(taken.batch["entropys"], values[1])
    assert taken.meta_info == {"temperature": 0.7}
    assert set(given.batch.keys()) == {"responses"}
    assert "verl's old_log_prob pass skipped" in capsys.readouterr().out


def test_log_probs_at_another_temperature_do_not_replace_the_pass(capsys):
    """Issue 67: the decoder's log-probs carry the temperature they were computed at, and the trainer takes them
    only where it is rollout.temperature, the one verl's pass and the update divide the logits by; otherwise the
    pass runs (said once) and they leave the batch."""
    from omegaconf import OmegaConf
    from verl import DataProto

    from verl_p40.patches import p40_decode, p40_old_log_probs

    assert p40_old_log_probs.TEMPERATURE_KEY == p40_decode.TEMPERATURE_KEY
    out: dict = {}
    values = -torch.rand(2, 3)
    p40_decode.add_log_probs(out, SimpleNamespace(log_probs=values, entropy=values.abs(), temperature=0.7), 4)
    assert out[p40_decode.TEMPERATURE_KEY].tolist() == pytest.approx([0.7, 0.7])
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"p40_log_probs": "rollout", "temperature": 1.0}}})
    given = DataProto.from_dict(tensors={"responses": torch.ones(2, 4, dtype=torch.long), **out})
    p40_old_log_probs._said.clear()
    assert p40_old_log_probs.from_rollout(given, config) is None
    assert "at temperature 0.7, not rollout.temperature 1" in capsys.readouterr().out
    assert set(given.batch.keys()) == {"responses"}


def test_a_step_whose_pieces_did_not_all_return_log_probs_keeps_none():
    """The decoder failing after a first piece (generate() for the rest): verl's concat needs equal keys; the pieces
    lose their log-probs and the trainer runs its pass. Pieces that all have them keep them."""
    from verl import DataProto

    from verl_p40.patches import p40_decode

    def piece(with_values: bool) -> DataProto:
        tensors = {"responses": torch.ones(2, 3, dtype=torch.long)}
        if with_values:
            tensors |= {"rollout_log_probs": -torch.rand(2, 3), "rollout_entropys": torch.rand(2, 3)}
            tensors |= {p40_decode.TEMPERATURE_KEY: torch.ones(2)}
        return DataProto.from_dict(tensors=tensors)

    mixed = DataProto.concat(p40_decode.all_or_none([piece(True), piece(False)]))
    assert set(mixed.batch.keys()) == {"responses"} and len(mixed) == 4
    whole = DataProto.concat(p40_decode.all_or_none([piece(True), piece(True)]))
    assert set(whole.batch.keys()) == {"responses", *p40_decode.KEYS}


_TWO_RANKS = """
import torch


def body(r, decode):
    from verl import DataProto

    def piece(with_values):
        tensors = {"responses": torch.ones(2, 3, dtype=torch.long)}
        if with_values:
            tensors |= {"rollout_log_probs": -torch.rand(2, 3), "rollout_entropys": torch.rand(2, 3)}
            tensors |= {decode.TEMPERATURE_KEY: torch.ones(2)}
        return DataProto.from_dict(tensors=tensors)

    kept = {}
    for case, decoded in (("one_rank_fell_back", r == 0), ("both_decoded", True)):
        parts = decode.all_or_none([piece(decoded), piece(decoded)])
        kept[case] = sorted(DataProto.concat(parts).batch.keys())
    return kept
"""


def test_every_rank_keeps_the_log_probs_or_none_does(tmp_path):
    """Issue 67: on 2 and 4 GPUs each rank decodes its share; a decoder that falls back to generate() on one rank only
    left ranks with and without log-probs, and combining their outputs needs equal keys. all_or_none agrees across
    ranks (an all-reduce of the flag): rank 1 fell back, so neither keeps them and the pass runs; both decoded, both
    keep them (gloo, two processes)."""
    from verl_p40.patches import p40_decode

    first, second = run_two_ranks(tmp_path, _TWO_RANKS, Path(p40_decode.__file__))
    assert first == second
    assert first["one_rank_fell_back"] == ["responses"]
    assert first["both_decoded"] == sorted(["responses", *p40_decode.KEYS])
