"""GPUs and hosts -> verl's config (verl_p40.plan.layout): which config each layout produces, on a machine without GPUs
(the plan takes the GPUs each test describes as its Facts)."""

import pytest

from conftest import cli, run_args
from verl_p40 import UserError
from verl_p40.gpu.nvml import GPUInfo, parse_gpus
from verl_p40.plan import layout
from verl_p40.plan.facts import Facts
from verl_p40.plan.planner import plan
from verl_p40.plan.run_options import RunOptions

P40 = dict(name="Tesla P40", compute_capability=(6, 1), memory_total_gib=23.9)
P100 = dict(name="Tesla P100-PCIE-16GB", compute_capability=(6, 0), memory_total_gib=15.9)
PARAMS = 494_032_768  # Qwen2.5-0.5B, the model the profiles' memory was measured with


def gpus(*kinds):
    return [GPUInfo(index=i, **kind) for i, kind in enumerate(kinds)]


def composed(monkeypatch, found, model, **options):
    options.setdefault("algorithm", "ppo")  # the profile's own batch: PPO's one answer a prompt, with a critic
    run = plan(RunOptions(model=str(model), **options), Facts(gpus=tuple(found) if found is not None else None))
    return run, run.config()


def test_every_gpu_of_the_host_by_default_splitting_the_step_and_per_gpu_multiplies_it(monkeypatch, tokenizer_dir):
    """By default a step takes the recipe's prompts on any GPU count (the learning per step measured on one GPU),
    split over the GPUs; --batch per-gpu gives each GPU the recipe's work (the batch and mini-batches x W)."""
    one, cfg1 = composed(monkeypatch, gpus(P40), tokenizer_dir, profile="p40")
    split, cfg_split = composed(monkeypatch, gpus(P40, P40), tokenizer_dir, profile="p40")
    assert cfg_split.trainer.n_gpus_per_node == 2 and cfg_split.data.train_batch_size == cfg1.data.train_batch_size
    assert any(n.startswith("batch: the recipe's, split over 2 GPUs") for n in split.notes)
    two, cfg2 = composed(monkeypatch, gpus(P40, P40), tokenizer_dir, profile="p40", batch="per-gpu")
    assert (cfg1.trainer.n_gpus_per_node, cfg1.trainer.nnodes) == (1, 1)
    assert (cfg2.trainer.n_gpus_per_node, cfg2.trainer.nnodes) == (2, 1)
    assert cfg2.data.train_batch_size == 2 * cfg1.data.train_batch_size == 128
    for key in ("actor_rollout_ref.actor.ppo_mini_batch_size", "critic.ppo_mini_batch_size"):
        assert _get(cfg2, key) == 2 * _get(cfg1, key)
        assert _get(cfg_split, key) == _get(cfg1, key)
    for key in (
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        "critic.ppo_micro_batch_size_per_gpu",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
        "actor_rollout_ref.rollout.micro_batch_size",
    ):
        assert _get(cfg2, key) >= _get(cfg1, key)  # per GPU: sharded states leave at least the room one GPU had
    assert "CUDA_VISIBLE_DEVICES" not in two.env  # all of them: nothing to hide
    assert any(n.startswith("layout: 2 GPUs (0, 1), 2 in all") for n in two.notes)


STATE_KEYS = (
    "critic.model.fsdp_config.optimizer_offload",
    "critic.model.fsdp_config.param_offload",
    "actor_rollout_ref.ref.fsdp_config.param_offload",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
)


def _offloaded(cfg) -> set[str]:
    return {key for key in STATE_KEYS if _get(cfg, key)}


def test_sharded_states_come_back_to_the_gpu_as_the_memory_plan_finds_room(monkeypatch, tokenizer_dir):
    """FSDP shards every state W ways: the memory plan keeps more of them on each GPU as W grows."""
    _, one = composed(monkeypatch, gpus(P40), tokenizer_dir, profile="p40")
    run, two = composed(monkeypatch, gpus(P40, P40), tokenizer_dir, profile="p40")
    _, four = composed(monkeypatch, gpus(P40, P40, P40, P40), tokenizer_dir, profile="p40")
    assert "critic.model.fsdp_config.param_offload" in _offloaded(one)  # one P40: the critic waits in host memory
    assert _offloaded(four) <= _offloaded(two) < _offloaded(one)
    assert not _offloaded(four)
    assert any(n.startswith("memory plan for ") and "critic weights" in n for n in run.notes)


def test_a_larger_model_keeps_more_offloaded(monkeypatch, tmp_path, tokenizer_dir):
    import json
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tokenizer_dir, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 48}))
    _, small = composed(monkeypatch, gpus(P40, P40), tokenizer_dir, profile="p40")
    _, large = composed(monkeypatch, gpus(P40, P40), model, profile="p40")
    assert _offloaded(large) > _offloaded(small)


def test_a_subset_of_gpus_is_what_the_trainer_sees(monkeypatch, tokenizer_dir):
    run, cfg = composed(monkeypatch, gpus(P40, P40, P40), tokenizer_dir, profile="p40", gpus=(2, 0))
    assert cfg.trainer.n_gpus_per_node == 2 and cfg.data.train_batch_size == 64
    assert run.env["CUDA_VISIBLE_DEVICES"] == "2,0" and run.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    gpus_in_env = r"; name GPUs it has \(--gpus; with compose GPUS= in \.env, e\.g\. GPUS=0,1\)"
    with pytest.raises(UserError, match=r"--gpus 0,5: this host has no GPU 5 \(it has 0, 1, 2\)" + gpus_in_env):
        composed(monkeypatch, gpus(P40, P40, P40), tokenizer_dir, profile="p40", gpus=(0, 5))
    for bad in ("one", "0,0", "-1"):
        with pytest.raises(UserError, match="--gpus"):
            parse_gpus(bad)


def test_mixed_cards_are_sized_for_the_weakest_and_say_so(monkeypatch, tokenizer_dir):
    run, cfg = composed(monkeypatch, gpus(P40, P100), tokenizer_dir, profile="auto")
    assert run.profile.name == "pascal-16gb"
    assert any("features for the oldest, GPU 1" in n for n in run.notes)
    assert layout.weakest(gpus(P40, P100)).index == 1


def test_grpo_on_two_gpus_divides_the_profiles_batch_per_prompt(monkeypatch, tokenizer_dir):
    _, cfg = composed(monkeypatch, gpus(P40, P40), tokenizer_dir, profile="p40", algorithm="grpo")
    assert cfg.data.train_batch_size == 16 and cfg.actor_rollout_ref.rollout.n == 4  # 64 sequences, 32 a GPU
    assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 4
    _, scaled = composed(monkeypatch, gpus(P40, P40), tokenizer_dir, profile="p40", algorithm="grpo", batch="per-gpu")
    assert scaled.data.train_batch_size == 32 and scaled.actor_rollout_ref.actor.ppo_mini_batch_size == 8


def test_hosts_split_the_batch_and_set_nnodes(monkeypatch, tokenizer_dir):
    _, cfg = composed(monkeypatch, gpus(P40), tokenizer_dir, profile="p40", nodes=2)
    assert (cfg.trainer.n_gpus_per_node, cfg.trainer.nnodes, cfg.data.train_batch_size) == (1, 2, 64)
    # no driver here (a config made for other machines): the profile's one GPU a host
    _, cfg = composed(monkeypatch, None, tokenizer_dir, profile="p40", nodes=3, batch="per-gpu")
    assert (cfg.trainer.n_gpus_per_node, cfg.trainer.nnodes, cfg.data.train_batch_size) == (1, 3, 192)
    with pytest.raises(UserError, match="64 sequences on 3 GPU.s.: the sequences must divide evenly over the GPUs; "):
        composed(monkeypatch, None, tokenizer_dir, profile="p40", nodes=3)


def test_the_users_own_setting_wins(monkeypatch, tokenizer_dir):
    _, cfg = composed(monkeypatch, gpus(P40, P40), tokenizer_dir, profile="p40", sets=["data.train_batch_size=96"])
    assert cfg.data.train_batch_size == 96 and cfg.trainer.n_gpus_per_node == 2


@pytest.mark.usefixtures("no_driver")
def test_gpus_without_a_driver_is_one_line(tmp_path):
    result = cli("config", "--profile", "p40", "--gpus", "0,1")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "verl-p40 config: error: --gpus 0,1: no GPU driver (NVML) here to check it against; leave it at all "
        "(with compose: GPUS=all in .env)"
    )


def _get(cfg, key):
    from omegaconf import OmegaConf

    return OmegaConf.select(cfg, key)


def test_a_checkpoint_of_another_gpu_count_is_refused_in_one_line(tiny_model, prepared, tmp_path):
    from verl_p40.plan.algorithms import experiment_name

    actor = tmp_path / "ckpt" / experiment_name(str(tiny_model), "ppo", 0) / "global_step_5" / "actor"
    actor.mkdir(parents=True)
    for rank in (0, 1):  # what two GPU processes save
        (actor / f"model_world_size_2_rank_{rank}.pt").write_bytes(b"")
    (actor.parent.parent / "latest_checkpointed_iteration.txt").write_text("5")
    before = sorted(p.name for p in actor.iterdir())
    args = ["train", "--dry-run", *run_args(tiny_model, prepared, tmp_path, logs=False), "--algorithm", "ppo"]
    result = cli(*args)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f"verl-p40 train: error: {actor.parent}: saved by 2 GPUs and this run has 1; ")
    assert "resume on 2 GPUs" in line and "trainer.experiment_name=NEW" in line
    assert sorted(p.name for p in actor.iterdir()) == before
    # a fresh experiment, or not resuming, is fine
    assert cli(*args, "trainer.resume_mode=disable").returncode == 0
    for rank in (0, 1):
        (actor / f"model_world_size_2_rank_{rank}.pt").rename(actor / f"model_world_size_1_rank_{rank}.pt")
    (actor / "model_world_size_1_rank_1.pt").unlink()
    assert cli(*args).returncode == 0


def test_a_recipe_batch_in_prompts_is_kept_on_two_gpus_and_grows_with_per_gpu(monkeypatch, tokenizer_dir):
    """grpo-gsm8k counts its batch in prompts (32 a step, 16 an update): on two P40s a step keeps them (each GPU
    takes half); with --batch per-gpu each GPU keeps that work, so a step takes twice the prompts."""
    _, one = composed(monkeypatch, gpus(P40), tokenizer_dir, profile="p40", algorithm="grpo-gsm8k")
    _, kept = composed(monkeypatch, gpus(P40, P40), tokenizer_dir, profile="p40", algorithm="grpo-gsm8k")
    _, two = composed(
        monkeypatch, gpus(P40, P40), tokenizer_dir, profile="p40", algorithm="grpo-gsm8k", batch="per-gpu"
    )
    assert (one.data.train_batch_size, one.actor_rollout_ref.actor.ppo_mini_batch_size) == (32, 16)
    assert (kept.data.train_batch_size, kept.actor_rollout_ref.actor.ppo_mini_batch_size) == (32, 16)
    assert (two.data.train_batch_size, two.actor_rollout_ref.actor.ppo_mini_batch_size) == (64, 32)
    assert (
        one.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu
        == two.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu
    )


DISPLAY = dict(name="NVIDIA GeForce GT 1030", compute_capability=(6, 1), memory_total_gib=2.0)
MAXWELL = dict(name="NVIDIA GeForce GTX 750 Ti", compute_capability=(5, 0), memory_total_gib=2.0)


def test_three_p40s_by_default_train_on_two_and_say_which_and_why(monkeypatch, tokenizer_dir):
    """No 3-GPU host was at hand: the plans are checked here, not run. The recipes' sequences a step split evenly over
    1, 2, 4 or 8 GPUs only, so `all` with the recipe's batch takes GPUs 0 and 1 and names GPU 2; per-gpu takes 3."""
    run, cfg = composed(monkeypatch, gpus(P40, P40, P40), tokenizer_dir, profile="p40", algorithm="grpo")
    assert cfg.trainer.n_gpus_per_node == 2 and run.env["CUDA_VISIBLE_DEVICES"] == "0,1"
    (line,) = [n for n in run.notes if "left out" in n]
    assert line.startswith("layout: GPUs 0,1 of 3 train, left out: GPU 2 (Tesla P40): the recipe's sequences")
    assert "BATCH=per-gpu" in line and "GPUS=0,1 in .env" in line
    every, cfg3 = composed(monkeypatch, gpus(P40, P40, P40), tokenizer_dir, profile="p40", batch="per-gpu")
    assert cfg3.trainer.n_gpus_per_node == 3 and "CUDA_VISIBLE_DEVICES" not in every.env
    assert not [n for n in every.notes if "left out" in n]


@pytest.mark.parametrize("card", [DISPLAY, MAXWELL])
def test_a_display_card_beside_p40s_is_left_out_by_all_with_a_line_naming_it(monkeypatch, tokenizer_dir, card):
    run, cfg = composed(monkeypatch, gpus(card, P40, P40), tokenizer_dir, profile="p40", algorithm="grpo")
    assert cfg.trainer.n_gpus_per_node == 2 and run.env["CUDA_VISIBLE_DEVICES"] == "1,2"
    (line,) = [n for n in run.notes if "left out" in n]
    assert f"left out: GPU 0 ({card['name']}): " in line and "GPUS=1,2 in .env (--gpus 1,2)" in line
    # with three P40s beside it: the display card and the third P40, each named
    run, cfg = composed(monkeypatch, gpus(card, P40, P40, P40), tokenizer_dir, profile="p40", algorithm="grpo")
    assert run.env["CUDA_VISIBLE_DEVICES"] == "1,2" and "GPU 0 (" in run.notes[-1] + "".join(run.notes)
    assert any("GPU 3 (Tesla P40)" in n for n in run.notes)


def test_cards_of_two_sizes_both_fit_to_train_are_kept(monkeypatch, tokenizer_dir):
    run, cfg = composed(monkeypatch, gpus(P40, P100), tokenizer_dir, profile="auto")
    assert cfg.trainer.n_gpus_per_node == 2 and not [n for n in run.notes if "left out" in n]
