"""`verl-p40 doctor`: each check's PASS and FAIL lines (with the fix), skipping by name, and the CLI's exit codes.

GPU-facing checks are driven through stand-ins for NVML / torch's kernel list (this machine has no GPU); the GPU
machine run under the Pascal mask is in bench/results/doctor-*."""

import json
import shutil
from types import SimpleNamespace

import pytest

from conftest import NVML_STANDINS, cli
from verl_p40 import child, patches
from verl_p40.doctor import host_checks
from verl_p40.doctor import runner as doctor
from verl_p40.doctor import stack_checks as checks
from verl_p40.gpu import nvml as gpu
from verl_p40.plan.facts import Facts
from verl_p40.plan.run_options import RunOptions


def _ctx(tmp_path, facts: Facts | None = None, **kw) -> doctor.Context:
    options = RunOptions(
        profile="p40",
        model=str(tmp_path / "model"),
        data=str(tmp_path / "data"),
        checkpoints=str(tmp_path / "ckpt"),
        logs=str(tmp_path / "logs"),
    )
    for key, value in kw.items():
        setattr(options, key, value)
    return doctor.Context(options, facts=facts)


def _one(ctx, name, **kw) -> doctor.Result:
    (result,) = doctor.run_checks(ctx, only=[name], **kw)
    return result


def _p40(index=0, cc=(6, 1)):
    return gpu.GPUInfo(index=index, name="Tesla P40", compute_capability=cc, memory_total_gib=23.9)


# ---------------------------------------------------------------------------------------------- gpu, kernels, compute


@pytest.mark.usefixtures("no_driver")
def test_gpu_check_without_a_driver_fails_with_the_fix():
    result = cli("doctor", "--profile", "p40", "--only", "gpu")
    assert result.returncode == 2, result.stdout + result.stderr
    line = result.stdout.splitlines()[0]
    assert line.startswith("FAIL  gpu") and "no NVIDIA GPU visible through NVML" in line
    assert "fix: install the NVIDIA driver" in line and "Traceback" not in result.stdout + result.stderr
    assert "a driver newer than R580 does not drive a P40" in line  # R590+ on a P40 host looks like no GPU at all


def test_gpu_check_on_a_p40_host_passes(monkeypatch):
    """The stand-in NVML the suite runs under in CI (tests/nvml/p40) is a P40 host's, as the product reads it."""
    monkeypatch.setenv("PYTHONPATH", str(NVML_STANDINS / "p40"))
    result = cli("doctor", "--profile", "p40", "--only", "gpu")
    assert result.returncode == 0, result.stdout + result.stderr
    (line, _) = result.stdout.splitlines()
    assert line.split() == "PASS gpu driver 535.183.01 (CUDA 12.2), GPU 0: Tesla P40, sm_61, 24.0 GiB".split()


def test_gpu_check_refuses_a_driver_too_old_for_the_torch_build(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.version, "cuda", "11.8")
    old = Facts(gpus=(_p40(),), driver="418.67", driver_cuda=(10, 1))
    result = _one(_ctx(tmp_path, old), "gpu")
    assert result.status == "FAIL" and "driver 418.67 (CUDA 10.1)" in result.detail
    assert "needs driver >= 450.80.02" in result.detail and result.fix.startswith("update the NVIDIA driver")
    assert _one(_ctx(tmp_path, Facts(gpus=(_p40(),), driver="535.183.01", driver_cuda=(12, 2))), "gpu").status == "PASS"


def test_gpu_check_names_a_driver_branch_too_new_for_a_pascal_card(tmp_path, monkeypatch):
    """NVIDIA's R580 is the last branch that drives Maxwell, Pascal and Volta; R590 and newer do not."""
    import torch

    monkeypatch.setattr(torch.version, "cuda", "11.8")
    new = Facts(gpus=(_p40(0), _p40(1)), driver="590.44.01", driver_cuda=(13, 1))
    result = _one(_ctx(tmp_path, new), "gpu")
    assert result.status == "FAIL" and "driver branch R590 is too new for GPU 0 (Tesla P40, sm_61)" in result.detail
    assert "GPU 1 (Tesla P40, sm_61)" in result.detail
    assert result.fix.startswith("install an R580 driver or older (e.g. 580.xx")
    last = Facts(gpus=(_p40(),), driver="580.105.08", driver_cuda=(13, 0))
    assert _one(_ctx(tmp_path, last), "gpu").status == "PASS"
    turing = gpu.GPUInfo(index=0, name="Tesla T4", compute_capability=(7, 5), memory_total_gib=15.0)
    assert _one(_ctx(tmp_path, Facts(gpus=(turing,), driver="590.44.01", driver_cuda=(13, 1))), "gpu").status == "PASS"


@pytest.mark.usefixtures("p40_host")
def test_doctor_on_a_p40_host_with_an_r590_driver_fails_in_one_line():
    result = cli("doctor", "--profile", "p40", "--only", "gpu", env={"VERL_P40_TEST_NVML_DRIVER": "590.44.01"})
    assert result.returncode == 2 and "Traceback" not in result.stdout + result.stderr
    line = result.stdout.splitlines()[0]
    assert line.startswith("FAIL  gpu") and "driver branch R590 is too new for GPU 0 (Tesla P40, sm_61)" in line
    assert "fix: install an R580 driver or older" in line


@pytest.mark.parametrize(
    "archs,cc,ok",
    [
        ("sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90", (6, 1), True),  # the image's torch on a P40
        ("sm_75 sm_80 sm_86 sm_90 sm_100 sm_120", (6, 1), False),  # the GPU machine's torch under the Pascal mask
        ("sm_60", (7, 0), False),  # binary code does not cross a major version
        ("sm_80 compute_80", (9, 0), True),  # PTX is compiled forward by the driver
    ],
)
def test_kernel_list_against_the_compute_capability(tmp_path, monkeypatch, archs, cc, ok):
    monkeypatch.setattr(checks, "arch_flags", lambda: archs.split())
    ctx = _ctx(tmp_path, Facts(gpus=(_p40(cc=cc),)))
    result = _one(ctx, "kernels")
    assert result.status == ("PASS" if ok else "FAIL"), result.line()
    if not ok:
        assert f"has no kernels for GPU 0 Tesla P40 (sm_{cc[0]}{cc[1]})" in result.detail
        assert "use the verl-p40 image" in result.fix


@pytest.mark.usefixtures("no_driver")
def test_kernel_and_compute_checks_skip_without_a_gpu(tmp_path):
    results = doctor.run_checks(_ctx(tmp_path), only=["kernels", "compute"])
    assert [(r.status, r.detail) for r in results] == [("SKIP", "needs a GPU (see the gpu check)")] * 2


def test_compute_check_reports_the_probe_error(tmp_path, monkeypatch):
    ctx = _ctx(tmp_path, Facts(gpus=(_p40(),)))
    answer = SimpleNamespace(
        stdout='{"error": "GPU 0: CUDA error: no kernel image is available for execution"}\n', stderr=""
    )
    monkeypatch.setattr(child.subprocess, "run", lambda *a, **k: answer)
    result = _one(ctx, "compute")
    assert result.status == "FAIL" and "no kernel image is available" in result.detail
    # the real probe on this CPU-only machine finds no CUDA device
    monkeypatch.undo()
    result = _one(ctx, "compute")
    assert result.status == "FAIL" and result.detail == "torch sees no CUDA device"


def test_torch_build_check_wants_sm_60(monkeypatch, tmp_path):
    import torch

    assert "is a CPU-only build" in _one(_ctx(tmp_path), "torch-build").detail  # this machine's torch
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(checks, "arch_flags", lambda: ["sm_75", "sm_80", "sm_90"])
    result = _one(_ctx(tmp_path), "torch-build")
    assert result.status == "FAIL" and "has no sm_60 kernels" in result.detail
    monkeypatch.setattr(checks, "arch_flags", lambda: "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90".split())
    assert _one(_ctx(tmp_path), "torch-build").status == "PASS"


def test_apex_and_vllm_checks_when_they_are_missing(tmp_path):
    result = _one(_ctx(tmp_path), "apex")
    assert result.status == "FAIL" and result.detail == "apex is not installed"
    result = _one(_ctx(tmp_path), "vllm")
    assert result.status == "FAIL" and result.detail == "vllm is not installed" and "-vllm image variant" in result.fix


def test_apex_check_wants_its_cuda_extensions_only_where_the_image_built_them(monkeypatch, tmp_path):
    """The default image builds Apex's Python package only (no profile imports its CUDA extensions): the check passes
    on it, and wants the extensions only in an image built with APEX_CUDA_EXT=1."""
    (tmp_path / "site" / "apex").mkdir(parents=True)
    (tmp_path / "site" / "apex" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delenv("VERL_P40_APEX_CUDA_EXT", raising=False)
    result = _one(_ctx(tmp_path), "apex")
    assert result.status == "PASS" and "no CUDA extensions" in result.detail and "APEX_CUDA_EXT=1" in result.detail
    monkeypatch.setenv("VERL_P40_APEX_CUDA_EXT", "1")
    result = _one(_ctx(tmp_path), "apex")
    assert result.status == "FAIL" and result.detail.startswith("apex extensions do not import: amp_C")


# ---------------------------------------------------------------------------------------------- verl, model, data


def test_verl_check_sees_missing_and_applied_patches(patched_verl):
    unpatched = cli("doctor", "--profile", "p40", "--only", "verl")
    assert (
        unpatched.returncode == 2
        and "patches missing" in unpatched.stdout
        and "fix: verl-p40 patch-verl" in unpatched.stdout
    )
    patched = cli("doctor", "--profile", "p40", "--only", "verl", env={"PYTHONPATH": str(patched_verl)})
    assert patched.returncode == 0, patched.stdout
    n = len(patches.all_edits())
    assert patched.stdout.startswith(f"PASS  verl        verl 0.5.0, {n}/{n} patches applied")


def test_model_check(tmp_path, tokenizer_dir):
    assert "no model here (config.json missing)" in _one(_ctx(tmp_path), "model").detail
    no_weights = _one(_ctx(tmp_path, model=str(tokenizer_dir)), "model")
    assert no_weights.status == "FAIL" and "no weights (*.safetensors)" in no_weights.detail
    assert no_weights.fix.startswith("verl-p40 fetch-model --out")
    folder = tmp_path / "copied"
    shutil.copytree(tokenizer_dir, folder)
    (folder / "model.safetensors").write_bytes(b"")
    assert "model.safetensors: empty" in _one(_ctx(tmp_path, model=str(folder)), "model").detail
    (folder / "model.safetensors").write_bytes(b"x" * 10)
    files = {p.name: p.stat().st_size for p in folder.iterdir()} | {"model.safetensors": 99}
    (folder / ".verl-p40-model.json").write_text(json.dumps({"repo": "r", "files": files}))
    assert "model.safetensors: 10 bytes, expected 99" in _one(_ctx(tmp_path, model=str(folder)), "model").detail


def test_model_check_passes_a_complete_folder(tmp_path, tokenizer_dir):
    from conftest import make_tiny_qwen

    model = make_tiny_qwen(tokenizer_dir, tmp_path / "tiny")
    result = _one(_ctx(tmp_path, model=str(model)), "model")
    assert result.status == "PASS" and result.detail.endswith("parameters")


def test_data_check(tmp_path, prepared, gsm8k_dir, tiny_model):
    folder = tmp_path / "data"
    assert "train.parquet: missing" in _one(_ctx(tmp_path), "data").detail
    folder.mkdir()
    (folder / "train.parquet").write_bytes(b"")
    shutil.copy(prepared / "test.parquet", folder / "test.parquet")
    result = _one(_ctx(tmp_path), "data")
    assert result.status == "FAIL" and "train.parquet: not a readable parquet file" in result.detail
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"question": ["q"], "answer": ["#### 1"]}), folder / "train.parquet")
    assert "not in verl's RL schema (no column data_source" in _one(_ctx(tmp_path), "data").detail
    ok = _one(_ctx(tmp_path, data=str(prepared)), "data")
    assert ok.status == "PASS" and ok.detail.endswith("train 7473 rows, test 1319 rows")
    # the folder's own train.parquet named as a verl key, by another spelling of its path: checked once, not "moved"
    spelled = f"data.train_files={prepared.parent}/./{prepared.name}/train.parquet"
    same = _one(_ctx(tmp_path, model=str(tiny_model), data=str(prepared), sets=[spelled]), "data")
    assert same.status == "PASS" and same.detail.endswith("train 7473 rows, test 1319 rows"), same.detail
    other = _one(
        _ctx(tmp_path, model=str(tiny_model), data=str(prepared), sets=[f"{spelled[:-8]}-small.parquet"]), "data"
    )
    assert other.status == "FAIL" and "train-small.parquet: missing" in other.detail, other.detail


def test_a_data_folder_of_gsm8k_as_published_is_prepared_into_another_folder(tmp_path, gsm8k_dir, monkeypatch):
    # `prep --out` the folder itself would read the hub (prep's default source) and write beside the user's files: the
    # fix names the folder as the source and a folder to write, and the --data that then reads it
    monkeypatch.delenv("VERL_P40_SERVICE", raising=False)
    monkeypatch.delenv("VERL_P40_DATA", raising=False)
    raw = _one(_ctx(tmp_path, data=str(gsm8k_dir)), "data")
    assert raw.status == "FAIL" and "train.parquet: missing" in raw.detail
    assert raw.fix == f"verl-p40 prep --source {gsm8k_dir} --out data/gsm8k, then --data data/gsm8k", raw.fix
    named = tmp_path / "data" / "gsm8k"  # the source is where prep would write by default: another folder beside it
    shutil.copytree(gsm8k_dir, named)
    monkeypatch.chdir(tmp_path)
    beside = _one(_ctx(tmp_path, data="data/gsm8k"), "data")
    assert beside.fix == "verl-p40 prep --source data/gsm8k --out data/gsm8k-prepared, then --data data/gsm8k-prepared"
    empty = _one(_ctx(tmp_path, data=str(tmp_path / "empty")), "data")  # nothing there: prep's own source, as before
    assert empty.fix == f"verl-p40 prep --out {tmp_path / 'empty'}", empty.fix


# ------------------------------------------------------------------------------------------ writable, disk, shm, ram


def test_writable_check_names_the_folder(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = _one(_ctx(tmp_path, checkpoints=str(blocker / "ckpt")), "writable")
    assert result.status == "FAIL" and str(blocker / "ckpt") in result.detail and "uid" in result.fix
    assert _one(_ctx(tmp_path), "writable").status == "PASS"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]  # the folders it tried are not left made


def test_the_cluster_check_leaves_no_checkpoints_folder_it_made_for_the_try(tmp_path, monkeypatch):
    from verl_p40.doctor import cluster_check

    seen = []
    monkeypatch.setenv("RAY_ADDRESS", "head:6379")
    monkeypatch.setattr(cluster_check, "node_problems", lambda address, paths, marker: seen.append(marker) or ["b: no"])
    ctx = _ctx(tmp_path, nodes=2, checkpoints=str(tmp_path / "new" / "ckpt"))
    result = _one(ctx, "cluster")
    assert result.status == "FAIL" and "b: no" in result.detail
    assert len(seen) == 1 and seen[0].startswith(str(tmp_path / "new" / "ckpt" / ".verl-p40-shared-"))
    assert list(tmp_path.iterdir()) == []  # the marker and the folders made for it are gone


def test_disk_check_counts_the_checkpoints_kept(tmp_path, tokenizer_dir, monkeypatch):
    from conftest import make_tiny_qwen

    model = make_tiny_qwen(tokenizer_dir, tmp_path / "tiny")
    monkeypatch.setattr(host_checks.shutil, "disk_usage", lambda path: SimpleNamespace(total=10**9, free=1000))
    result = _one(_ctx(tmp_path, model=str(model)), "disk")
    assert result.status == "FAIL" and "the run keeps 2 checkpoints" in result.detail
    assert "trainer.max_actor_ckpt_to_keep=1" in result.fix


def test_disk_and_memory_estimates_for_the_real_05b_shape(tokenizer_dir):
    from verl_p40.plan import budget
    from verl_p40.plan.inputs import model_config
    from verl_p40.plan.planner import plan

    parameters = budget.parameter_count(model_config(tokenizer_dir))
    assert 494.0e6 < parameters < 494.1e6  # Qwen2.5-0.5B: 494.03M
    need = budget.needs(plan(RunOptions(algorithm="ppo", profile="p40")).config(), parameters)
    assert need.checkpoints_kept == 2
    assert round(need.checkpoint_bytes / 1e9, 1) == 11.9  # actor and critic: fp32 weights + Adam states
    # offloaded on a P40 by the memory plan: critic weights 1.98 + optimizer 3.95 (the actor's Adam states and the
    # reference stay on the GPU); the CLI, verl's driver and Ray 5.2, one GPU worker 6.3 (timing-pair-2026-12-06)
    assert round(need.host_bytes / 1e9, 1) == 17.4
    assert (need.host_fixed_bytes, need.host_workers, need.host_worker_bytes) == (5.2e9, 1, 6.3e9)
    assert round(need.disk_bytes / 1e9, 1) == 47.4  # 2 kept + the one being written + the best validated one


def test_host_memory_adds_a_gpu_worker_per_card_and_the_offloaded_state_once():
    """Ray runs one worker process a GPU (actor, rollout and reference): its resident memory is paid per card; the
    offloaded state is sharded over the cards by FSDP, so it is counted once."""
    from omegaconf import OmegaConf

    from verl_p40.plan import budget

    base = {"algorithm": {"adv_estimator": "grpo"}, "actor_rollout_ref": {"actor": {"use_kl_loss": True}}}
    base["actor_rollout_ref"]["ref"] = {"fsdp_config": {"param_offload": True}}
    one, four = (
        budget.needs(OmegaConf.merge(base, {"trainer": {"n_gpus_per_node": n, "nnodes": 1}}), 10**9) for n in (1, 4)
    )
    assert one.host_bytes == budget.HOST_FIXED_BYTES + budget.HOST_PER_GPU_WORKER_BYTES + 4 * 10**9  # the reference
    assert four.host_bytes - one.host_bytes == 3 * budget.HOST_PER_GPU_WORKER_BYTES
    assert (one.host_workers, four.host_workers) == (1, 4)


def test_the_ram_line_names_the_terms_and_calls_more_than_one_card_an_estimate(tmp_path, tokenizer_dir, monkeypatch):
    from conftest import make_tiny_qwen

    model = make_tiny_qwen(tokenizer_dir, tmp_path / "tiny")
    monkeypatch.setattr(host_checks, "_host_memory", lambda: (10**12, "MemAvailable"))
    one = _one(_ctx(tmp_path, model=str(model)), "ram")
    assert one.status == "PASS" and "5.2 GB the CLI, verl's driver and Ray, 6.3 GB a GPU worker x 1" in one.detail
    assert "estimate" not in one.detail
    from omegaconf import OmegaConf

    two_gpus = OmegaConf.create({"trainer": {"n_gpus_per_node": 2, "nnodes": 1}})
    monkeypatch.setattr(host_checks, "_needs", lambda ctx: host_checks.budget.needs(two_gpus, 10**6))
    two = _one(_ctx(tmp_path, model=str(model)), "ram")
    assert "6.3 GB a GPU worker x 2 (measured on one GPU: an estimate for 2-4 cards)" in two.detail
    monkeypatch.setattr(host_checks, "_host_memory", lambda: (10**9, "MemAvailable"))
    short = _one(_ctx(tmp_path, model=str(model)), "ram")
    assert short.status == "FAIL" and "or train on fewer GPUs (--gpus; with compose GPUS= in .env)" in short.fix


def test_shm_and_ram_checks(tmp_path, tokenizer_dir, monkeypatch):
    from conftest import make_tiny_qwen

    real = shutil.disk_usage
    monkeypatch.setattr(
        host_checks.shutil,
        "disk_usage",
        lambda path: SimpleNamespace(total=64 * 2**20, free=0) if str(path) == "/dev/shm" else real(path),
    )
    result = _one(_ctx(tmp_path), "shm")
    assert result.status == "FAIL" and "/dev/shm 0.1 GB" in result.detail and "shm_size: 16gb" in result.fix
    model = make_tiny_qwen(tokenizer_dir, tmp_path / "tiny")
    monkeypatch.setattr(host_checks, "_host_memory", lambda: (10**9, "container memory limit"))
    result = _one(_ctx(tmp_path, model=str(model)), "ram")
    assert result.status == "FAIL" and "1.0 GB available (container memory limit)" in result.detail


# ---------------------------------------------------------------------------------------------- skipping, the CLI


def test_skip_by_flag_and_by_environment(tmp_path):
    result = cli(
        "doctor",
        "--profile",
        "p40",
        "--only",
        "gpu,kernels",
        "--skip-check",
        "gpu",
        env={"VERL_P40_DOCTOR_SKIP": "kernels"},
    )
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines() == [
        "SKIP  gpu         skipped by --skip-check gpu",
        "SKIP  kernels     skipped by VERL_P40_DOCTOR_SKIP=kernels",
        "doctor: all 2 checks passed or skipped",
    ]


@pytest.mark.parametrize(
    "args,env,origin",
    [
        (["--skip-check", "kernel"], {}, "--skip-check: unknown check 'kernel'"),
        (["--only", "gpus"], {}, "--only: unknown check 'gpus'"),
        ([], {"VERL_P40_DOCTOR_SKIP": "nvml"}, "VERL_P40_DOCTOR_SKIP: unknown check 'nvml'"),
    ],
)
def test_unknown_check_names_are_refused(args, env, origin):
    result = cli("doctor", "--profile", "p40", *args, env=env)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"verl-p40 doctor: error: {origin}; checks: " + ", ".join(doctor.BY_NAME)
    ]


@pytest.mark.usefixtures("no_driver")
def test_json_output_and_the_train_preflight(tmp_path, patched_verl):
    result = cli("doctor", "--profile", "p40", "--only", "gpu", "--json")
    assert json.loads(result.stdout)[0]["status"] == "FAIL"
    # train runs the same checks before Ray starts and stops at the first failure with one error line
    train = cli(
        "train",
        "--profile",
        "p40",
        "--model",
        str(tmp_path / "none"),
        "--data",
        str(tmp_path),
        "--skip-check",
        "gpu,kernels,compute",
        env={"PYTHONPATH": str(patched_verl)},
    )
    assert train.returncode == 2
    assert (
        train.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"verl-p40 train: error: preflight: model: {tmp_path / 'none'}: no model here (config.json missing); fix: "
            "verl-p40 fetch-model --out"
        )
    )
    assert train.stderr.strip().endswith("(and 1 more failed checks above)")  # data
    assert "Traceback" not in train.stderr
    assert "SKIP  gpu         skipped by --skip-check gpu" in train.stderr


def test_a_plan_that_fails_skips_only_the_checks_that_need_it(tmp_path, tiny_model, prepared):
    """The doctor plans the run once, for the first check that needs it; when planning fails, those checks say so
    and every other check still runs and reports."""
    ctx = _ctx(tmp_path, model=str(tiny_model), data=str(prepared), sets=["no.such.key=1"])
    results = {r.name: r for r in doctor.run_checks(ctx, only=["disk", "model", "ram", "data"])}
    assert results["model"].status == doctor.PASS and results["data"].status == doctor.PASS
    for name in ("disk", "ram"):
        assert results[name].status == doctor.SKIP
        assert results[name].detail.startswith("needs the run's config, which failed: --set no.such.key=1")


def test_the_doctor_plans_as_the_trainer_will_and_fails_a_plan_the_trainer_refuses(tmp_path, tokenizer_dir):
    """With 3 GPUs `config` refused while the doctor passed (disk and ram skip when the plan fails): the plan is now a
    check of its own. No 3-GPU host was at hand; the cards are NVML stand-ins."""
    three = Facts(gpus=(_p40(0), _p40(1), _p40(2)))
    chosen = _one(_ctx(tmp_path, three, model=str(tokenizer_dir)), "plan")
    assert chosen.status == doctor.PASS and "GPUs 0,1 of 3 train, left out: GPU 2 (Tesla P40)" in chosen.detail
    refused = _one(_ctx(tmp_path, three, model=str(tokenizer_dir), gpus=(0, 1, 2), algorithm="ppo"), "plan")
    assert refused.status == doctor.FAIL and "must divide evenly over the GPUs" in refused.detail
    assert "GPUS= in .env" in refused.detail and refused.fix


@pytest.mark.usefixtures("p40_host")
def test_doctor_with_a_display_card_and_three_p40s_names_what_it_leaves_out(tokenizer_dir):
    cards = "NVIDIA GeForce GT 1030:6.1:2,Tesla P40:6.1:24,Tesla P40:6.1:24,Tesla P40:6.1:24"
    env = {"VERL_P40_TEST_NVML_GPUS": cards}
    result = cli("doctor", "--profile", "p40", "--model", str(tokenizer_dir), "--only", "plan", env=env)
    assert result.returncode == 0 and "Traceback" not in result.stdout + result.stderr, result.stdout + result.stderr
    line = result.stdout.splitlines()[0]
    assert line.startswith("PASS  plan") and "left out: GPU 0 (NVIDIA GeForce GT 1030)" in line
    assert "GPU 3 (Tesla P40)" in line and "GPUS=1,2 in .env" in line
    refused = cli(
        "doctor",
        "--profile",
        "p40",
        "--model",
        str(tokenizer_dir),
        "--only",
        "plan",
        "--gpus",
        "1,2,3",
        "--algorithm",
        "ppo",
        env=env,
    )
    assert refused.returncode == 2 and "Traceback" not in refused.stdout + refused.stderr
    assert refused.stdout.splitlines()[0].startswith("FAIL  plan") and "fix: change the option" in refused.stdout
