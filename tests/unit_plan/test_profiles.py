import pytest

from conftest import NVML_STANDINS, cli
from verl_p40 import UserError
from verl_p40.gpu.nvml import GPUInfo
from verl_p40.plan import profiles
from verl_p40.plan.planner import plan
from verl_p40.plan.run_options import RunOptions


def _gpu(cc, mem, name="GPU"):
    return GPUInfo(index=0, name=name, compute_capability=cc, memory_total_gib=mem)


@pytest.mark.parametrize("name", ["p40", "pascal-16gb", "volta-turing", "ampere"])
def test_every_profile_composes_against_verl_config(name):
    from verl_p40.plan.verlconfig import compose

    run = plan(RunOptions(profile=name, model="/m", data="/d"))
    cfg = compose(run.overrides)
    assert cfg.actor_rollout_ref.model.path == "/m" and cfg.critic.model.path == "/m"
    assert cfg.data.train_files == "/d/train.parquet" and cfg.trainer.resume_mode == "auto"
    assert cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == 1
    assert cfg.data.train_batch_size >= 16


def test_p40_profile_is_fp32_sdpa_hf_without_compile():
    from verl_p40.plan.verlconfig import compose

    cfg = compose(plan(RunOptions(profile="p40", algorithm="ppo")).overrides)
    arr = cfg.actor_rollout_ref
    assert cfg.algorithm.adv_estimator == "gae"
    for fsdp in (arr.actor.fsdp_config, arr.ref.fsdp_config, cfg.critic.model.fsdp_config):
        assert fsdp.model_dtype == "fp32"
        assert dict(fsdp.mixed_precision) == {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
    assert arr.rollout.dtype == "float32" and arr.rollout.name == "hf"
    assert arr.model.override_config.attn_implementation == "sdpa"
    assert cfg.critic.model.override_config.attn_implementation == "sdpa"
    assert arr.actor.use_torch_compile is False and arr.ref.use_torch_compile is False
    assert arr.model.use_remove_padding is False and cfg.critic.model.use_remove_padding is False
    assert arr.model.use_fused_kernels is False
    assert cfg.data.max_prompt_length >= 256 and cfg.data.train_batch_size >= 16
    assert "console" in cfg.trainer.logger
    assert cfg.custom_reward_function.name == "compute_score"
    assert cfg.custom_reward_function.path.endswith("verl_p40/reward.py")


def test_unknown_key_fails_naming_its_origin(tmp_path, monkeypatch):
    result = cli("config", "--profile", "p40", "--set", "trainer.no_such_key=1")
    assert result.returncode == 2
    assert "--set trainer.no_such_key=1: verl 0.5.0 has no config key 'trainer.no_such_key'" in result.stderr
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "typo.yaml").write_text("verl:\n  trainer:\n    totl_epochs: 3\n")
    monkeypatch.setenv("VERL_P40_PROFILES_DIR", str(folder))
    with pytest.raises(UserError, match=r"typo.yaml: verl 0.5.0 has no config key 'trainer.totl_epochs'"):
        plan(RunOptions(profile="typo"))


def test_bad_value_is_reported_by_verl_config():
    result = cli("config", "--profile", "p40", "--set", "data.train_batch_size=[unclosed")
    assert result.returncode == 2 and "data.train_batch_size=[unclosed: not a Hydra override" in result.stderr


def test_config_prints_complete_yaml():
    result = cli("config", "--profile", "p40", "--model", "/models/q", "--set", "trainer.total_epochs=3")
    assert result.returncode == 0, result.stderr
    assert "total_epochs: 3" in result.stdout and "path: /models/q" in result.stdout
    assert "ppo_mini_batch_size:" in result.stdout and "profile: p40" in result.stderr


def test_auto_on_a_p40_host_picks_the_p40_profile(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(NVML_STANDINS / "p40"))  # NVML as a P40 host's driver answers
    result = cli("config", "--profile", "auto")
    assert result.returncode == 0, result.stderr
    assert "profile: p40" in result.stderr


@pytest.mark.usefixtures("no_driver")
def test_auto_without_gpu_says_so_and_fails():
    result = cli("config", "--profile", "auto")
    assert result.returncode == 3
    assert "no NVIDIA GPU visible through NVML" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "cc, mem, expected",
    [
        ((6, 1), 23.9, "p40"),
        ((6, 1), 22.4, "p40"),
        ((6, 0), 15.9, "pascal-16gb"),
        ((6, 1), 7.9, "pascal-16gb"),
        ((7, 0), 31.7, "volta-turing"),
        ((7, 0), 15.8, "volta-turing"),
        ((7, 5), 14.6, "volta-turing"),
        ((8, 0), 79.2, "ampere"),
        ((8, 6), 23.6, "ampere"),
        ((9, 0), 139.8, "ampere"),
    ],
)
def test_auto_selection_from_nvml_facts(cc, mem, expected):
    profile, notes = profiles.select([_gpu(cc, mem)])
    assert profile.name == expected and expected in notes[0]


def test_small_card_gets_a_warning_and_old_card_an_error():
    _, notes = profiles.select([_gpu((6, 1), 7.9, "Tesla P4")])
    assert any("sized for 16 GB" in n for n in notes)
    with pytest.raises(UserError, match="below 6.0"):
        profiles.select([_gpu((5, 2), 12.0, "Tesla M40")])


def test_unknown_profile_lists_the_available_ones():
    result = cli("config", "--profile", "p4O")
    assert result.returncode == 2 and "available: ampere, p40, pascal-16gb, volta-turing" in result.stderr


def test_profiles_extend_each_other_through_omegaconf(tmp_path, monkeypatch):
    """A profile names its parent with `extends`; values merge base -> parent -> profile, the latest winning."""
    p40, p16, volta = profiles.load("p40").verl, profiles.load("pascal-16gb").verl, profiles.load("volta-turing").verl
    assert p16["data"]["train_batch_size"] == 32 and p40["data"]["train_batch_size"] == 64
    assert p16["critic"]["model"]["fsdp_config"] == p40["critic"]["model"]["fsdp_config"]  # inherited
    assert (
        volta["actor_rollout_ref"]["rollout"]["name"] == "vllm"
        and volta["actor_rollout_ref"]["actor"]["ppo_micro_batch_size_per_gpu"] == 2
    )
    assert p40["actor_rollout_ref"]["model"]["override_config"]["attn_implementation"] == "sdpa"  # from base.yaml
    ampere = profiles.load("ampere").verl
    assert ampere["actor_rollout_ref"]["actor"]["fsdp_config"]["mixed_precision"]["param_dtype"] == "fp32"
    assert ampere["actor_rollout_ref"]["actor"]["fsdp_config"]["optimizer_offload"] is True
    for name in ("pascal-16gb", "volta-turing"):  # FSDP1 ran out of memory at 16 GB; FSDP2 fitted (measured)
        arr = profiles.load(name).verl["actor_rollout_ref"]
        assert arr["actor"]["strategy"] == arr["ref"]["strategy"] == "fsdp2"
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "a.yaml").write_text("extends: b\nverl: {}\n")
    (folder / "b.yaml").write_text("extends: a\nverl: {}\n")
    monkeypatch.setenv("VERL_P40_PROFILES_DIR", str(folder))
    with pytest.raises(UserError, match="'extends' forms a loop"):
        profiles.load("a")
