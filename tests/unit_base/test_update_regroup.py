"""The regrouped update (patches/p40_update.py): verl's actor and critic updates on length-grouped micro-batches
within a token budget give the gradients and the metrics of verl's own micro-batches (fp32, CPU, trimming on in
both), every token weighted as in verl's micro-batch."""

import importlib.util
from pathlib import Path

import pytest

from conftest import run_two_ranks, run_verl_probe

TESTS = Path(__file__).resolve().parents[1]
TOLERANCE = 1e-5  # fp32: the same sum of the same per-token terms, added in another order and at other widths
BUDGET = 60  # rows x columns an update micro-batch may hold: 2 to 4 of the probe's rows (widths 14-22)


@pytest.fixture(scope="module")
def probe(patched_verl, tmp_path_factory) -> dict:
    return run_verl_probe("update_probe.py", patched_verl, tmp_path_factory.mktemp("update"), str(BUDGET))


def test_the_regrouped_update_has_verls_gradient(probe):
    for role, grads in probe["grads"].items():  # every parameter, at both optimizer steps
        assert grads["norm"] > 0.1, role  # a real gradient, not zeros compared with zeros
        assert grads["largest"] < TOLERANCE * max(1.0, grads["norm"]), (role, grads)


def test_the_regrouped_update_reports_verls_metrics(probe):
    verl, regrouped = probe["metrics"]["verl"], probe["metrics"]["regrouped"]
    assert verl.keys() == regrouped.keys() and "actor/kl_loss" in verl and "critic/vf_loss" in verl
    for key, value in verl.items():  # losses, clip fractions, KL, value mean, gradient norms
        assert abs(regrouped[key] - value) < TOLERANCE * max(1.0, abs(value)), (key, value, regrouped[key])


@pytest.fixture(scope="module")
def other_losses(patched_verl, tmp_path_factory) -> dict:
    """The probe with the actor's other policy losses (verl 0.5.0's core_algos.py)."""
    folder = tmp_path_factory.mktemp("update-losses")
    return {
        mode: run_verl_probe("update_probe.py", patched_verl, folder, str(BUDGET), mode) for mode in ("gpg", "clip_cov")
    }


def test_gpg_is_regrouped_with_verls_gradient(other_losses):
    """gpg weighs each token alone, as vanilla: regrouped (other micro-batches), the same gradient."""
    gpg = other_losses["gpg"]
    assert len(gpg["widths"]["regrouped"]["actor"]) != len(gpg["widths"]["verl"]["actor"])
    for role, grads in gpg["grads"].items():
        assert grads["norm"] > 0.1 and grads["largest"] < TOLERANCE * max(1.0, grads["norm"]), (role, grads)


def test_clip_cov_keeps_verls_micro_batches(other_losses):
    """clip_cov (and kl_cov) choose tokens per micro-batch: regrouped, the actor's gradient moved by 1.19 (issue 67).
    The patch keeps verl's micro-batches for the actor there (its gradient verl's exactly); the critic, whose value
    loss weighs each token alone, still regroups."""
    clip_cov = other_losses["clip_cov"]
    assert clip_cov["widths"]["regrouped"]["actor"] == clip_cov["widths"]["verl"]["actor"]
    assert clip_cov["grads"]["actor"]["largest"] == 0.0, clip_cov["grads"]
    assert len(clip_cov["widths"]["regrouped"]["critic"]) != len(clip_cov["widths"]["verl"]["critic"])


def test_the_regrouped_update_ran_other_micro_batches(probe):
    verl, regrouped = probe["widths"]["verl"], probe["widths"]["regrouped"]
    for role in ("actor", "critic"):
        assert len(verl[role]) == 6  # 2 mini-batches of 3 micro-batches of 2 rows
        assert len(regrouped[role]) != len(verl[role]), regrouped  # not verl's cut: the weights are exercised


def _update_module():
    spec = importlib.util.spec_from_file_location(
        "p40_update", TESTS.parent / "app" / "verl_p40" / "patches" / "p40_update.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_token_groups_keep_every_row_once_within_the_budget():
    import torch

    update = _update_module()
    # prompt width 3, response width 3: prompts of 1..3 tokens (left padded), responses of 0..3 (right padded)
    mask = torch.tensor(
        [[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 0], [0, 0, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]]
    )
    groups = update.token_groups(mask, 3, 8)
    assert sorted(r for g in groups for r in g) == [0, 1, 2, 3, 4]
    for rows in groups:
        width = max(int(mask[r, :3].sum()) for r in rows) + max(max(int(mask[r, 3:].sum()), 1) for r in rows)
        assert len(rows) == 1 or len(rows) * width <= 8, groups
    assert update.token_groups(mask, 3, 0) == [[r] for r in torch.argsort(mask.sum(-1), stable=True).tolist()]


def test_today_weights_give_each_micro_batch_one_share():
    import torch

    update = _update_module()
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0]])  # micro-batches of 2: 3 and 3 tokens
    weights, divisor = update.today_weights(mask, 2, 2)
    assert divisor == 3.0 * 2
    assert torch.allclose(weights.sum(dim=-1), torch.tensor([2.0, 1.0, 3.0, 0.0]))  # c / N_m = 1 for both
    weights, _ = update.today_weights(torch.tensor([[1, 1, 1, 1], [0, 0, 0, 0]]), 1, 2)  # an empty micro-batch
    assert torch.isfinite(weights).all() and float(weights[1].sum()) == 0.0


_TWO_RANKS = """
def body(r, update):
    groups = [[0, 1, 2, 3, 4, 5]] if r == 0 else [[0, 1], [2, 3], [4], [5]]  # 1 group here, 4 on the other rank
    return update.as_many_as_every_rank(groups)
"""


def test_every_rank_runs_as_many_micro_batches(tmp_path):
    """FSDP gathers weights in every micro-batch: a rank with fewer regrouped micro-batches than another would hang
    the update; the rank with fewer splits its largest until the counts agree (gloo, two processes)."""
    path = TESTS.parent / "app" / "verl_p40" / "patches" / "p40_update.py"
    first, second = run_two_ranks(tmp_path, _TWO_RANKS, path)
    assert len(first) == len(second) == 4
    assert sorted(r for g in first for r in g) == list(range(6)) and all(first)
    assert second == [[0, 1], [2, 3], [4], [5]]  # the rank with the most keeps its own
