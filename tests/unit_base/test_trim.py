"""Padding trimming (patches/p40_trim.py): verl's actor, reference and critic passes on the columns in use give the
log-probs, entropies, values and update gradients of the full-width passes (fp32, CPU)."""

import importlib.util
from pathlib import Path

import pytest
import yaml

from conftest import cli, run_verl_probe

TESTS = Path(__file__).resolve().parents[1]
TOLERANCE = 1e-5  # fp32: the trimmed and full passes differ only in the shapes of the same matrix products


@pytest.fixture(scope="module")
def probe(patched_verl, tmp_path_factory) -> dict:
    return run_verl_probe("trim_probe.py", patched_verl, tmp_path_factory.mktemp("trim"))


def test_trimmed_passes_equal_the_full_width_ones(probe):
    assert probe["finite"]
    for name in ("log_probs", "entropy", "values"):  # under the response mask: what verl reads
        assert probe[name] < TOLERANCE, (name, probe[name])
    for role in ("actor_grads", "critic_grads"):  # every parameter's gradient from one update of each
        assert probe["grads"][role]["norm"] > 0.1, role  # a real gradient, not zeros compared with zeros
        assert probe["grads"][role]["largest"] < TOLERANCE * max(1.0, probe["grads"][role]["norm"]), probe["grads"]


def test_the_models_saw_fewer_columns(probe):
    full, trimmed, width = probe["widths"]["full"], probe["widths"]["trimmed"], probe["full_width"]
    for role in ("actor", "critic"):
        assert full[role] and set(full[role]) == {width}, full  # trimming off: verl's full width every time
        assert len(trimmed[role]) == len(full[role]) and max(trimmed[role]) <= width
        # old log-probs/values (3 length-grouped micro-batches), then the update (3 of verl's own)
        assert sum(trimmed[role]) < sum(full[role]) and min(trimmed[role]) < width, trimmed


def test_the_actors_update_reports_the_tokens_each_kind_of_pass_ran_on(probe):
    """perf/p40_tokens/* (what the P40 projection prices): the rows x columns of every call, 4 rows a micro-batch,
    forward-only passes first (3 calls), then the updates (3), for the actor and the critic; trimmed and full."""
    kinds = (("forward", slice(0, 3)), ("update", slice(3, 6)))
    for run in ("full", "trimmed"):
        widths, counts, logits = probe["widths"][run], probe["counts"][run], probe["logits_columns"][run]
        expected = {
            f"{role}_{kind}": 4 * sum(widths[role][part]) for role in ("actor", "critic") for kind, part in kinds
        }
        # the actor's output layer: the columns its logits came back with (every column untrimmed; the last prompt
        # column and the kept response columns trimmed, logits_to_keep), which the projection prices apart
        expected |= {f"actor_{kind}_logits": 4 * sum(logits[part]) for kind, part in kinds}
        assert counts == expected, (run, counts, expected)
    assert probe["counts"]["trimmed"]["actor_update"] < probe["counts"]["full"]["actor_update"]
    assert probe["logits_columns"]["full"] == probe["widths"]["full"]["actor"]  # untrimmed: logits on every column
    trimmed = probe["counts"]["trimmed"]
    assert trimmed["actor_update_logits"] < trimmed["actor_update"]  # the prompts' columns make no logits


def test_log_probs_come_from_the_kept_columns_and_equal_the_padded_logits_ones(probe):
    """Issue 67: forward_trimmed padded every row's logits back to response_length + 1 columns (~1 GB a row for
    Qwen2.5 at 512 answer tokens, whatever the row's length). The actor's model now hands back the kept columns
    only, and the log-probs and entropy computed from them are padded instead: the same values as from the padded
    logits, bit for bit over every column (padding past the longest answer as verl computed it from zero logits),
    and the same gradient."""
    padded, response = probe["padded"], probe["response_width"]
    assert all(c == response + 1 for c in padded["logits_columns"]["padded"])
    trimmed = padded["logits_columns"]["trimmed"]
    assert max(trimmed) <= response + 1 and min(trimmed) < response + 1, trimmed  # the kept columns, not padded
    assert all(shape[-1] == response for shape in padded["shapes"])
    assert padded["log_probs"] == 0.0 and padded["entropy"] == 0.0, padded
    assert padded["actor_grads"] <= 1e-7, padded


def test_kept_columns_edges():
    import torch

    spec = importlib.util.spec_from_file_location(
        "p40_trim", TESTS.parent / "app" / "verl_p40" / "patches" / "p40_trim.py"
    )
    trim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trim)
    # prompt width 4, response width 3: rows [_ _ p p | r _ _] and [_ p p p | r r _]
    mask = torch.tensor([[0, 0, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1, 0]])
    assert trim.kept_columns(mask, 3) == (1, 2)
    assert trim.kept_columns(torch.ones(2, 7, dtype=torch.long), 3) == (0, 3)  # nothing to trim
    # empty responses still keep the last prompt column and one response column (verl slices response_length)
    assert trim.kept_columns(torch.tensor([[0, 0, 0, 1, 0, 0, 0]]), 3) == (3, 1)


@pytest.mark.parametrize("profile", ["p40", "pascal-16gb", "volta-turing", "ampere"])
def test_profiles_turn_it_on_for_the_actor_the_reference_and_the_critic(profile):
    result = cli("config", "--profile", profile, "--algorithm", "ppo")
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout)
    assert config["actor_rollout_ref"]["model"]["trim_padding"] is True  # the worker copies it to actor and ref
    assert config["critic"]["model"]["trim_padding"] is True
    assert config["actor_rollout_ref"]["model"]["use_remove_padding"] is False
