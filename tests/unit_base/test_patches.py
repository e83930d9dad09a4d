import ast
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import cli
from verl_p40 import patches
from verl_p40.patches import Edit, PatchError
from verl_p40.patches.verl_050 import EDITS


@pytest.fixture
def verl_copy(verl_source, tmp_path) -> Path:
    shutil.copytree(verl_source, tmp_path / "verl")
    return tmp_path / "verl"


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.py"))}


def test_applies_once_then_is_idempotent_and_check_passes(verl_copy):
    before = _snapshot(verl_copy)
    assert cli("patch-verl", "--check", str(verl_copy)).returncode == 1
    first = cli("patch-verl", str(verl_copy))
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("  applied  ") == len(EDITS)
    after = _snapshot(verl_copy)
    second = cli("patch-verl", str(verl_copy))
    assert second.returncode == 0 and second.stdout.count("already applied") == len(EDITS)
    assert _snapshot(verl_copy) == after
    check = cli("patch-verl", "--check", str(verl_copy))
    assert check.returncode == 0 and f"{len(EDITS)}/{len(EDITS)} patches applied" in check.stdout
    changed = {k for k in after if before.get(k) != after[k]}
    assert changed == {e.file for e in EDITS}
    for name in changed:  # every patched file is still valid Python
        ast.parse(after[name])


def test_patched_source_no_longer_hard_codes_flash_attention_or_bf16_autocast(verl_copy):
    patches.apply(verl_copy)
    workers = (verl_copy / "workers" / "fsdp_workers.py").read_text()
    model = (verl_copy / "utils" / "model.py").read_text()
    assert 'override_model_config.get("attn_implementation", "flash_attention_2")' in workers
    assert 'override_config.get("attn_implementation", "flash_attention_2")' in workers
    assert 'attn_implementation="flash_attention_2"' not in model
    for file in ("workers/actor/dp_actor.py", "workers/critic/dp_critic.py", "workers/rollout/hf_rollout.py"):
        assert "dtype=torch.bfloat16" not in (verl_copy / file).read_text(), file


def test_stale_target_fails_with_name_and_file_and_writes_nothing(verl_copy):
    target = verl_copy / "workers" / "critic" / "dp_critic.py"
    target.write_text(target.read_text().replace("dtype=torch.bfloat16", "dtype=torch.float16"))
    before = _snapshot(verl_copy)
    result = cli("patch-verl", str(verl_copy))
    assert result.returncode == 2
    assert "patch 'critic-autocast-dtype' (workers/critic/dp_critic.py): target text not found" in result.stderr
    assert _snapshot(verl_copy) == before  # all-or-nothing: not even the edits before it were written


def test_ambiguous_target_is_refused(tmp_path):
    (tmp_path / "workers").mkdir()
    (tmp_path / "version").mkdir()
    (tmp_path / "version" / "version").write_text("0.5.0")
    (tmp_path / "workers" / "x.py").write_text("a = 1\na = 1\n")
    with pytest.raises(PatchError, match="found 2 times"):
        patches.apply(tmp_path, edits=[Edit("dup", "workers/x.py", "a = 1\n", "a = 2\n", "test")])


def test_other_verl_version_refused_unless_forced(verl_copy):
    (verl_copy / "version" / "version").write_text("0.4.1")
    result = cli("patch-verl", str(verl_copy))
    assert result.returncode == 2 and "verl 0.4.1" in result.stderr
    assert cli("patch-verl", "--force", str(verl_copy)).returncode == 0


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_autocast_helper_follows_configured_dtype(verl_copy):
    patches.apply(verl_copy)
    dtypes = _load(verl_copy / "utils" / "p40_dtypes.py", "patched_p40_dtypes")
    assert dtypes.autocast_dtype_from_config(None) == torch.bfloat16  # verl's default is unchanged
    assert dtypes.autocast_dtype_from_config({"mixed_precision": {"param_dtype": "fp32"}}) == torch.float32
    assert dtypes.autocast_dtype_from_config({"mixed_precision": None}) == torch.bfloat16


class _FakeAllocator:
    """torch.cuda's peak statistics as the caching allocator keeps them: `use(n)` allocates up to n bytes."""

    def __init__(self):
        self.now = self.peak = 0

    def use(self, now: int) -> None:
        self.now = now
        self.peak = max(self.peak, now)

    def reset(self) -> None:
        self.peak = self.now


def test_each_phase_reports_its_own_peak_and_the_process_peak_stays_verls(verl_copy, monkeypatch):
    patches.apply(verl_copy)
    peaks = _load(verl_copy / "utils" / "p40_phase_peaks.py", "patched_p40_phase_peaks")
    gpu = _FakeAllocator()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: gpu.peak)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda *a: gpu.peak + 2**30)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a: gpu.reset())
    gib = 2**30

    def phase(top: int, rest: int = 1 * gib):
        gpu.use(top)
        gpu.use(rest)

    generation = peaks.measured("generation")(lambda: phase(6 * gib))
    log_prob = peaks.measured("old_log_prob")(lambda: phase(3 * gib))
    reference = peaks.measured("ref")(lambda: (phase(4 * gib), log_prob()))  # LoRA: the reference through the actor

    def update():
        phase(5 * gib, 2 * gib)
        return peaks.take("update_actor")

    update_actor = peaks.measured("update_actor")(update)
    phase(9 * gib)  # loading the model, before any phase
    generation(), reference(), log_prob()
    first = update_actor()
    assert first == {
        "perf/peak_allocated_gb/generation": 6.0,
        "perf/peak_allocated_gb/ref": 4.0,  # its inner log-prob pass is the reference's, not a second phase
        "perf/peak_allocated_gb/old_log_prob": 3.0,
        "perf/peak_allocated_gb/update_actor": 5.0,
        "perf/max_memory_allocated_gb": 9.0,  # since the process started, as verl's metric means
        "perf/max_memory_reserved_gb": 10.0,
    }
    generation()
    validate = type("Batch", (), {"meta_info": {"validate": True}})()
    peaks.measured("generation")(lambda self, batch: phase(11 * gib))(None, validate)  # the trainer's validation
    second = update_actor()
    assert second["perf/peak_allocated_gb/generation"] == 6.0 and "perf/peak_allocated_gb/ref" not in second
    assert second["perf/peak_allocated_gb/validation"] == 11.0  # not the training generation's
    assert second["perf/max_memory_allocated_gb"] == 11.0 and second["perf/max_memory_reserved_gb"] == 12.0
    phase(12 * gib)  # between phases (verl's reward, advantages): still the process's peak
    third = update_actor()
    assert third["perf/max_memory_allocated_gb"] == 12.0 and third["perf/max_memory_reserved_gb"] == 13.0


def test_without_cuda_phase_peaks_measure_nothing_and_report_verls_own(verl_copy, monkeypatch):
    patches.apply(verl_copy)
    peaks = _load(verl_copy / "utils" / "p40_phase_peaks.py", "patched_p40_phase_peaks_cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a: pytest.fail("reset without CUDA"))
    device = type("Device", (), {"max_memory_allocated": lambda: 3 * 2**30, "max_memory_reserved": lambda: 2**31})
    monkeypatch.setattr("verl.utils.device.get_torch_device", lambda: device)
    assert peaks.measured("generation")(lambda x: x + 1)(1) == 2
    assert peaks.take("update_actor") == {"perf/max_memory_allocated_gb": 3.0, "perf/max_memory_reserved_gb": 2.0}


def test_pure_torch_bert_padding_round_trip_and_gradients(verl_copy):
    patches.apply(verl_copy)
    bp = _load(verl_copy / "utils" / "bert_padding_torch.py", "patched_bert_padding")
    torch.manual_seed(0)
    mask = torch.tensor([[0, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 1]])
    hidden = torch.randn(3, 4, 5, requires_grad=True)
    unpadded, indices, cu_seqlens, max_len, used = bp.unpad_input(hidden, mask)
    assert unpadded.shape == (int(mask.sum()), 5)
    assert cu_seqlens.tolist() == [0, 3, 5, 9] and max_len == 4 and used.tolist() == [3, 2, 4]
    assert torch.equal(unpadded, hidden.reshape(-1, 5)[mask.flatten().bool()])
    repadded = bp.pad_input(unpadded, indices, 3, 4)
    assert torch.equal(repadded, hidden * mask.unsqueeze(-1))
    repadded.sum().backward()
    assert torch.equal(hidden.grad, mask.unsqueeze(-1).expand(3, 4, 5).float())
    positions = torch.arange(4).expand(3, 4)
    flat = bp.index_first_axis(bp.rearrange(positions.unsqueeze(-1), "b s ... -> (b s) ..."), indices)
    assert flat.squeeze(-1).tolist() == [1, 2, 3, 0, 1, 0, 1, 2, 3]


def test_patched_workers_import_without_flash_attn(verl_copy):
    """The patched modules import on a machine without flash-attn (the P40 case), from the patched copy."""
    patches.apply(verl_copy)
    code = (
        "import verl, verl.workers.fsdp_workers, verl.workers.actor.dp_actor, verl.workers.critic.dp_critic, "
        "verl.workers.rollout.hf_rollout, verl.model_merger.fsdp_model_merger, verl.utils.torch_functional\n"
        "import importlib.util\n"
        "assert importlib.util.find_spec('flash_attn') is None\n"
        "from verl.single_controller.base.decorator import MAGIC_ATTR\n"
        "w = verl.workers.fsdp_workers\n"  # the phase-peak decorators keep the methods registered for dispatch
        "for cls, name in [(w.ActorRolloutRefWorker, n) for n in ('generate_sequences', 'compute_log_prob', "
        "'compute_ref_log_prob', 'update_actor')] + [(w.CriticWorker, 'compute_values'), "
        "(w.CriticWorker, 'update_critic')]:\n"
        "    method = getattr(cls, name)\n"
        "    assert hasattr(method, MAGIC_ATTR) and method.__wrapped__.__wrapped__.__name__ == name\n"
        "    assert method.__wrapped__.__code__.co_filename.endswith('p40_phase_peaks.py'), name\n"
        "print(verl.__file__)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(verl_copy.parent), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == str(verl_copy / "__init__.py")


def test_merge_dtype_defaults_to_bf16_and_follows_the_environment(verl_copy, monkeypatch):
    patches.apply(verl_copy)
    dtypes = _load(verl_copy / "utils" / "p40_dtypes.py", "patched_p40_dtypes_merge")
    monkeypatch.delenv("VERL_MERGE_DTYPE", raising=False)
    assert dtypes.merge_dtype() == torch.bfloat16
    monkeypatch.setenv("VERL_MERGE_DTYPE", "fp32")
    assert dtypes.merge_dtype() == torch.float32


def _run_probe(verl_copy: Path, model: Path, decode: str | None = None) -> subprocess.CompletedProcess:
    probe = Path(__file__).resolve().parents[1] / "hf_rollout_probe.py"
    return subprocess.run(
        [sys.executable, str(probe), str(model), *([decode] if decode else [])],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(verl_copy.parent), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
    )


def _probe_hf_rollout(verl_copy: Path, model: Path, decode: str | None = None) -> dict:
    import json

    result = _run_probe(verl_copy, model, decode)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def tiny_model(tokenizer_dir, tmp_path_factory) -> Path:
    from conftest import make_tiny_qwen

    # default-scale random weights repeat one token whatever its position; larger ones do not
    return make_tiny_qwen(tokenizer_dir, tmp_path_factory.mktemp("tiny-rollout"), initializer_range=1.0)


def test_hf_rollout_generates_what_generate_does_with_the_configured_sampling(verl_copy, tiny_model):
    """Greedy and sampled rollouts equal transformers' generate() with the rollout's own settings."""
    patches.apply(verl_copy)
    result = _probe_hf_rollout(verl_copy, tiny_model)
    assert result["greedy"]["equal"], result["greedy"]
    assert result["sample"]["equal"], result["sample"]


@pytest.mark.parametrize(
    "left_out, mode", [("hf-rollout-generate-positions", "greedy"), ("hf-rollout-sampling-settings", "sample")]
)
def test_each_hf_rollout_edit_is_needed(verl_copy, tiny_model, left_out, mode):
    """Without the edit, verl 0.5.0's rollout departs from generate(): the probe can tell."""
    patches.apply(verl_copy, edits=[edit for edit in EDITS if edit.name != left_out])
    result = _probe_hf_rollout(verl_copy, tiny_model)
    assert not result[mode]["equal"], result[mode]


def test_hf_rollout_decoding_with_a_static_cache_makes_what_generate_does(verl_copy, tiny_model):
    """rollout.p40_decode (patches/p40_decode.py) on a CPU: the decoder ran (its line said so), and its greedy and
    sampled tokens equal generate()'s with the same settings and seed; GRPO's repeated prompts still give one
    sequence each."""
    patches.apply(verl_copy)
    result = _probe_hf_rollout(verl_copy, tiny_model, "auto")
    assert result["said"] == ["static KV cache (p40_decode=auto)"], result["said"]
    assert result["greedy"]["equal"], result["greedy"]
    assert result["sample"]["equal"], result["sample"]
    assert result["grpo"]["sequences"] == 8 and result["grpo"]["distinct_per_prompt"] == [4, 4], result["grpo"]


@pytest.mark.parametrize("decode", [None, "auto"])
def test_hf_rollout_takes_a_batch_that_is_no_multiple_of_its_micro_batch(verl_copy, tiny_model, decode):
    """Validation hands the rollout its whole set (1,319 test questions stopped verl 0.5.0's equal split on the GPU):
    5 sequences at micro_batch_size 2 run as pieces of 2, 2 and 1, each row the greedy answer of its prompt."""
    patches.apply(verl_copy)
    result = _probe_hf_rollout(verl_copy, tiny_model, decode)
    assert result["uneven"] == {"sequences": 5, "pieces": [2, 2, 1], "greedy_rows_equal": True}, result["uneven"]


def test_hf_rollout_fails_an_uneven_batch_without_the_edit(verl_copy, tiny_model):
    patches.apply(verl_copy, edits=[edit for edit in EDITS if edit.name != "hf-rollout-uneven-pieces"])
    result = _run_probe(verl_copy, tiny_model)
    assert result.returncode != 0 and "only support equal chunk" in result.stderr, result.stderr[-2000:]


def test_hf_rollout_makes_one_sequence_per_repeated_prompt(verl_copy, tiny_model):
    """GRPO with rollout.n = 4: the trainer repeats each prompt 4 times, so 2 prompts make 8 sequences, sampled
    independently; without the edit, generate() was asked for 4 each again (32, and the trainer stopped)."""
    patches.apply(verl_copy)
    grpo = _probe_hf_rollout(verl_copy, tiny_model)["grpo"]
    assert grpo["sequences"] == 8 and grpo["distinct_per_prompt"] == [4, 4], grpo
    edit = next(e for e in patches.all_edits() if e.name == "hf-rollout-one-sequence-per-prompt")
    target = verl_copy / edit.file
    target.write_text(target.read_text().replace(edit.new, edit.old))
    assert _probe_hf_rollout(verl_copy, tiny_model)["grpo"]["sequences"] == 32


def test_the_worker_settings_travel_with_the_job_to_every_host(verl_copy, monkeypatch):
    """verl's job runtime_env carries the settings verl_p40.memcap applies, so workers of a Ray cluster started before
    the trainer (whose environment they do not inherit) get them too; nothing is added when the run set none."""
    patches.apply(verl_copy)
    constants = _load(verl_copy / "trainer" / "constants_ppo.py", "patched_constants_ppo")
    monkeypatch.delenv("VERL_P40_WORKER_MEMORY_CAP_GB", raising=False)
    monkeypatch.delenv("VERL_P40_WORKER_TF32", raising=False)
    monkeypatch.delenv("VERL_P40_WORKER_NO_CUDNN_ATTENTION", raising=False)
    monkeypatch.setenv("VERL_P40_TF32", "auto")  # the user's choices, read by the CLI, not worker settings
    monkeypatch.setenv("VERL_P40_GPU_MEMORY_CAP_GB", "24")
    assert not any(k.startswith("VERL_P40") for k in constants.get_ppo_ray_runtime_env()["env_vars"])
    monkeypatch.setenv("VERL_P40_WORKER_MEMORY_CAP_GB", "24")
    monkeypatch.setenv("VERL_P40_WORKER_TF32", "1")
    monkeypatch.setenv("VERL_P40_WORKER_NO_CUDNN_ATTENTION", "1")
    env = constants.get_ppo_ray_runtime_env()["env_vars"]
    assert env["VERL_P40_WORKER_MEMORY_CAP_GB"] == "24" and env["VERL_P40_WORKER_TF32"] == "1"
    assert env["VERL_P40_WORKER_NO_CUDNN_ATTENTION"] == "1" and "VERL_P40_TF32" not in env
    assert "VERL_P40_GPU_MEMORY_CAP_GB" not in env


_SAVE_PROBE = r"""
import json, os, shutil, sys, types
from omegaconf import OmegaConf
import verl.trainer.ppo.ray_trainer as rt
from verl.utils import p40_checkpoints as pc

root = sys.argv[1]
for step in (1, 2):  # two complete steps from before; step 1 validated best
    os.makedirs(f"{root}/global_step_{step}/actor")
    open(f"{root}/global_step_{step}/{pc.COMPLETE}", "w").close()
with open(f"{root}/{pc.RUN_RECORD}", "w") as f:
    json.dump({"algorithm": "ppo", "validations": {"0": 0.1, "1": 0.5, "2": 0.3}}, f)
os.makedirs(f"{root}/validation")
for step in (1, 2):  # each validation's answers: step 1 right on 10 questions step 2 gets wrong (p = 2^-10)
    with open(f"{root}/validation/{step}.jsonl", "w") as f:
        f.writelines(json.dumps({"input": f"q{i}", "score": float(step == 1 or i >= 10)}) + "\n" for i in range(15))
events, kept_args = [], []
real_fsync, real_replace, real_rmtree = os.fsync, os.replace, shutil.rmtree
os.fsync = lambda fd: (events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))), real_fsync(fd))[1]
os.replace = lambda a, b: (events.append(("replace", os.path.abspath(b))), real_replace(a, b))[1]
shutil.rmtree = lambda p, **k: (events.append(("rmtree", os.path.abspath(p))), real_rmtree(p, **k))[1]

class Group:
    def save_checkpoint(self, path, remote, step, max_ckpt_to_keep=None):
        kept_args.append(max_ckpt_to_keep)
        os.makedirs(path, exist_ok=True)
        with open(f"{path}/model_world_size_1_rank_0.pt", "wb") as f:
            f.write(b"weights")
        events.append(("wrote", os.path.abspath(path)))

trainer = types.SimpleNamespace(
    config=OmegaConf.create({"trainer": {"default_local_dir": root, "default_hdfs_dir": None,
                             "max_actor_ckpt_to_keep": 1, "max_critic_ckpt_to_keep": 1}}),
    global_steps=3, actor_rollout_wg=Group(), critic_wg=Group(), use_critic=True,
    train_dataloader=types.SimpleNamespace(state_dict=lambda: {"epoch": 0}),
)
rt.RayPPOTrainer._save_checkpoint(trainer)
print(json.dumps({"events": events, "kept_args": kept_args}))
"""


def test_a_save_fsyncs_the_step_then_marks_it_then_the_tracker_then_prunes(verl_copy, tmp_path):
    """verl's _save_checkpoint, patched, run with stand-in workers and os.fsync/os.replace/shutil.rmtree recorded: a
    power cut cannot be simulated by a signal, so the order itself is the test. Every file of the new step is fsynced
    before its completion marker is renamed into place, the marker before the tracker, the tracker (a temp file
    renamed, then its folder fsynced) before any old step is removed; the workers' own delete-before-write retention
    is off, and with max_*_ckpt_to_keep=1 the step `best` takes (1: it beats step 2 on the same validation questions
    beyond the noise, patches/p40_best.py, installed beside p40_checkpoints.py) survives beside the new one (3)."""
    patches.apply(verl_copy)
    root = tmp_path / "ckpt"
    root.mkdir()
    result = subprocess.run(
        [sys.executable, "-c", _SAVE_PROBE, str(root)],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(verl_copy.parent), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    probe = json.loads(result.stdout.strip().splitlines()[-1])
    events = [tuple(e) for e in probe["events"]]
    assert probe["kept_args"] == [None, None]  # actor and critic: no retention inside the workers
    step3, tracker = str(root / "global_step_3"), str(root / "latest_checkpointed_iteration.txt")
    marker = str(root / "global_step_3" / "verl-p40-complete")
    at = events.index
    files = [str(p) for p in (root / "global_step_3").rglob("*") if p.is_file() and p.name != "verl-p40-complete"]
    assert {str(root / "global_step_3" / d / "model_world_size_1_rank_0.pt") for d in ("actor", "critic")} <= set(files)
    assert str(root / "global_step_3" / "data.pt") in files
    for path in [*files, step3, str(root / "global_step_3" / "actor")]:
        assert at(("fsync", path)) < at(("replace", marker)), path
    assert at(("replace", marker)) < at(("replace", tracker))
    tracker_synced = min(i for i, e in enumerate(events) if e == ("fsync", str(root)) and i > at(("replace", tracker)))
    assert tracker_synced < at(("rmtree", str(root / "global_step_2")))
    assert ("rmtree", str(root / "global_step_1")) not in events  # the best validated step is kept
    assert sorted(p.name for p in root.glob("global_step_*")) == ["global_step_1", "global_step_3"]
    assert tracker == str(root / "latest_checkpointed_iteration.txt") and (root / tracker).read_text() == "3"
    assert not list(root.glob("*.tmp-*")) and not list(root.rglob("*.tmp-*"))
    record = json.loads((root / "verl-p40-run.json").read_text())
    assert record["algorithm"] == "ppo" and record["best"]["step"] == 1  # the record's other keys are kept
    assert record["best"]["gain_over_first"] == pytest.approx(0.4)
