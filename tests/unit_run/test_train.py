import shlex

from conftest import cli, run_args


def test_dry_run_prints_verl_main_ppo_with_overrides(tiny_model, prepared):
    result = cli(
        "train",
        "--profile",
        "p40",
        "--dry-run",
        "--model",
        str(tiny_model),
        "--data",
        str(prepared),
        "--checkpoints",
        "/ckpt",
        "--gpu-memory-cap-gb",
        "24",
        "trainer.total_training_steps=5",
    )
    assert result.returncode == 0, result.stderr
    words = shlex.split(result.stdout.replace("\\\n", " "))
    assert words[words.index("-m") + 1] == "verl.trainer.main_ppo"
    assert "VERL_P40_WORKER_MEMORY_CAP_GB=24" in words  # the workers' name for the cap, apart from the user's
    assert "actor_rollout_ref.model.external_lib=verl_p40.worker_hooks" in words
    assert "+actor_rollout_ref.model.override_config.attn_implementation=sdpa" in words
    assert "actor_rollout_ref.rollout.name=hf" in words and "trainer.total_training_steps=5" in words
    assert "trainer.default_local_dir=/ckpt/${trainer.experiment_name}" in words
    # each validation's answers, question by question, beside the checkpoints, for `best`'s paired rule
    assert "trainer.validation_data_dir=/ckpt/${trainer.experiment_name}/validation" in words
    # the default is the GSM8K recipe: GRPO with 8 answers a prompt, the last-number reward, 60 steps unless told
    assert "algorithm.adv_estimator=grpo" in words and "actor_rollout_ref.rollout.n=8" in words
    assert "+custom_reward_function.reward_kwargs.method=flexible" in words
    steps = [w for w in words if w.startswith("trainer.total_training_steps=")]
    assert steps == ["trainer.total_training_steps=5"]  # the user's length replaces the recipe's 60


def test_later_values_win_and_reward_options_pass_through(tiny_model, prepared):
    result = cli(
        "train",
        "--profile",
        "p40",
        "--dry-run",
        "--model",
        str(tiny_model),
        "--data",
        str(prepared),
        "--reward-method",
        "flexible",
        "--format-bonus",
        "0.1",
        "--set",
        "data.train_batch_size=8",
        "data.train_batch_size=32",
    )
    words = shlex.split(result.stdout.replace("\\\n", " "))
    assert [w for w in words if w.startswith("data.train_batch_size=")] == ["data.train_batch_size=32"]
    assert "+custom_reward_function.reward_kwargs.method=flexible" in words
    assert "+custom_reward_function.reward_kwargs.format_bonus=0.1" in words


def test_train_refuses_missing_model_before_starting_ray(tmp_path):
    result = cli(
        "train",
        "--profile",
        "p40",
        "--model",
        str(tmp_path / "none"),
        "--data",
        str(tmp_path),
        "--skip-check",
        "gpu,kernels,compute",
    )
    assert result.returncode == 2 and "no model here" in result.stderr and "fetch-model" in result.stderr


def test_train_refuses_missing_data(tmp_path, tokenizer_dir):
    result = cli(
        "train",
        "--profile",
        "p40",
        "--model",
        str(tokenizer_dir),
        "--data",
        str(tmp_path / "nodata"),
        "--skip-check",
        "gpu,kernels,compute,model",
    )
    assert result.returncode == 2 and "train.parquet: missing" in result.stderr


def test_bad_cap_rejected():
    result = cli("train", "--profile", "p40", "--dry-run", "--gpu-memory-cap-gb", "0")
    assert result.returncode == 2 and "--gpu-memory-cap-gb: '0' is not a number from 0.5" in result.stderr


def test_cap_refuses_a_competing_external_lib():
    result = cli(
        "train",
        "--profile",
        "p40",
        "--dry-run",
        "--gpu-memory-cap-gb",
        "24",
        "actor_rollout_ref.model.external_lib=my_lib",
    )
    assert result.returncode == 2 and "cannot be combined" in result.stderr


def test_train_log_shows_each_line_while_the_trainer_still_runs(tmp_path):
    """A bench or a user following logs/train-*.log must see a step line when verl prints it, not at exit."""
    import subprocess
    import sys
    import time

    release = tmp_path / "release"
    trainer = (
        "import pathlib, sys, time\n"
        "print('step:3 - critic/score/mean:0.5', flush=True)\n"
        f"deadline = time.time() + 30\n"
        f"while not pathlib.Path({str(release)!r}).exists() and time.time() < deadline:\n"
        "    time.sleep(0.05)\n"
    )
    runner = (
        "import sys\n"
        "from verl_p40.run.trainer import run_trainer\n"
        "class Plan:\n"
        "    env, overrides, validation_questions = {}, [], None\n"
        f"    def command(self): return [sys.executable, '-c', {trainer!r}]\n"
        f"sys.exit(run_trainer(Plan(), {str(tmp_path / 'logs')!r}))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", runner], stdout=subprocess.DEVNULL)
    try:
        seen = False
        deadline = time.monotonic() + 120  # generous: a loaded CI host is slow to start Python
        while not seen and time.monotonic() < deadline and proc.poll() is None:
            logs = list((tmp_path / "logs").glob("train-*.log"))
            seen = bool(logs) and "step:3 - critic/score/mean:0.5" in logs[0].read_text()
            time.sleep(0 if seen else 0.05)
        assert proc.poll() is None, "the stand-in trainer must still be running while the log is read"
        assert seen, "the step line was not in the log while the trainer ran"
    finally:
        release.touch()
        proc.wait(timeout=30)
    assert proc.returncode == 0


def _stand_in_runner(tmp_path, trainer: str, plan: str = "") -> str:
    """A script that runs run_trainer on `trainer` (Python source) as verl's trainer; `plan`: more of the Plan."""
    return (
        "import sys\n"
        "from verl_p40.run.trainer import run_trainer\n"
        "class Plan:\n"
        "    env, overrides, validation_questions = {}, [], None\n"
        f"    def command(self): return [sys.executable, '-c', {trainer!r}]\n"
        f"{plan}"
        f"sys.exit(run_trainer(Plan(), {str(tmp_path / 'logs')!r}))\n"
    )


# a stand-in for verl's patched loop: it finishes its "step" when trainer.stop_file appears, or never
STOPPABLE = (
    "import os, sys, time\n"
    "stop = next(a.split('=', 1)[1] for a in sys.argv if a.startswith('+trainer.stop_file='))\n"
    "print('step:1 - critic/score/mean:0.5', flush=True)\n"
    "while not os.path.exists(stop):\n"
    "    time.sleep(0.05)\n"
    "print('verl-p40: stopped on request after step 1', flush=True)\n"
)


def _start_after_step_one(tmp_path, trainer: str):
    """run_trainer on a stand-in trainer, returned once its first step line is in the log."""
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-c", _stand_in_runner(tmp_path, trainer)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120  # a loaded 2-core CI host took over 10 s to get there once (stop 64)
    while time.monotonic() < deadline:
        logs = list((tmp_path / "logs").glob("train-*.log"))
        if logs and "step:1" in logs[0].read_text():
            return proc
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)  # twice: the runner's second one kills the stand-in's process group too
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    raise AssertionError(f"no step line in the log after 120 s: {proc.communicate(timeout=30)}")


def test_the_first_sigterm_asks_the_loop_to_stop_and_the_run_ends_cleanly(tmp_path):
    import signal

    proc = _start_after_step_one(tmp_path, STOPPABLE)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "stop requested" in err and "stopped on request with the last step saved" in err
    assert not list((tmp_path / "logs").glob(".stop-requested-*"))


def test_a_second_sigterm_stops_the_trainer_at_once(tmp_path):
    import signal
    import time

    stubborn = STOPPABLE.replace("while not os.path.exists(stop):", "while True:")  # a step that never ends
    proc = _start_after_step_one(tmp_path, stubborn)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert proc.poll() is None  # the first only asked
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode != 0  # the trainer was killed by the second


def _planned(monkeypatch, found, **options):
    from verl_p40.plan import planner as train
    from verl_p40.plan.facts import Facts

    return train.plan(train.RunOptions(**options), Facts(gpus=tuple(found) if found is not None else None))


def test_tf32_is_on_for_sm80_and_never_on_a_p40(monkeypatch):
    """TF32 has no verl key: the workers switch it on through verl_p40.worker_hooks (external_lib) when the plan's
    environment says so. auto: on for Ampere and newer, off on Pascal/Volta/Turing (the P40 keeps full fp32)."""
    import pytest

    from verl_p40 import UserError, defaults
    from verl_p40.gpu.nvml import GPUInfo

    h100 = [GPUInfo(0, "NVIDIA H100", (9, 0), 79.6)]
    p40 = [GPUInfo(0, "Tesla P40", (6, 1), 23.9)]
    t4 = [GPUInfo(0, "Tesla T4", (7, 5), 14.6)]
    fast = _planned(monkeypatch, h100, profile="ampere")
    assert fast.env[defaults.TF32_ENV] == "1"
    assert "actor_rollout_ref.model.external_lib=verl_p40.worker_hooks" in fast.overrides
    assert any("TF32 matmuls on (--tf32 auto, sm_90)" in note for note in fast.notes)
    for found, profile in ((p40, "p40"), (t4, "volta-turing")):
        run = _planned(monkeypatch, found, profile=profile)
        assert defaults.TF32_ENV not in run.env
        assert not any(o.startswith("actor_rollout_ref.model.external_lib") for o in run.overrides)
    capped = _planned(monkeypatch, p40, profile="p40", gpu_memory_cap_gb=24)  # the cap alone still hooks the workers
    assert (
        defaults.TF32_ENV not in capped.env
        and "actor_rollout_ref.model.external_lib=verl_p40.worker_hooks" in capped.overrides
    )
    assert defaults.TF32_ENV not in _planned(monkeypatch, h100, profile="ampere", tf32="off").env
    with pytest.raises(UserError, match="--tf32 on: TF32 needs an sm_80\\+ GPU .* this one is sm_61"):
        _planned(monkeypatch, p40, profile="p40", tf32="on")
    assert defaults.TF32_ENV not in _planned(monkeypatch, None, profile="p40").env  # no GPU seen: auto stays off


def test_cudnn_attention_is_off_in_the_workers_of_sm80_plans_only(monkeypatch):
    """cuDNN's SDPA backward has given NaN gradients in bf16 on sm_90 (pytorch/pytorch#196678): on sm_80+ the plan
    turns it off in every worker through verl_p40.worker_hooks, whatever --tf32 says; a P40 or T4 plan leaves it
    alone. A user's own external_lib keeps the hook on a run that hooks nothing else (a note says so) instead of
    failing."""
    from verl_p40 import defaults
    from verl_p40.gpu.nvml import GPUInfo

    h100 = [GPUInfo(0, "NVIDIA H100", (9, 0), 79.6)]
    for tf32 in ("auto", "off"):
        run = _planned(monkeypatch, h100, profile="ampere", tf32=tf32)
        assert run.env[defaults.NO_CUDNN_ATTENTION_ENV] == "1"
        assert "actor_rollout_ref.model.external_lib=verl_p40.worker_hooks" in run.overrides
        assert any("cuDNN attention off in the workers" in note for note in run.notes)
    for found, profile in (([GPUInfo(0, "Tesla P40", (6, 1), 23.9)], "p40"), ([GPUInfo(0, "T4", (7, 5), 14.6)], None)):
        run = _planned(monkeypatch, found, profile=profile or "volta-turing")
        assert defaults.NO_CUDNN_ATTENTION_ENV not in run.env
    own = _planned(monkeypatch, h100, profile="ampere", tf32="off", sets=["actor_rollout_ref.model.external_lib=mine"])
    assert defaults.NO_CUDNN_ATTENTION_ENV not in own.env
    assert "actor_rollout_ref.model.external_lib=mine" in own.overrides
    assert any("cuDNN attention left as PyTorch has it" in note for note in own.notes)


def test_worker_settings_left_in_the_shell_never_reach_the_workers():
    """What the worker hooks apply comes from the run's plan only: a TF32 switch or a cap exported in the shell
    (for another card) is not passed on to a P40 plan's trainer, whose plan sets neither."""
    from verl_p40 import defaults
    from verl_p40.run.trainer import worker_free

    shell = {
        "PATH": "/usr/bin",
        defaults.TF32_ENV: "1",
        defaults.NO_CUDNN_ATTENTION_ENV: "1",
        defaults.WORKER_MEMORY_CAP_ENV: "80",
        "VERL_P40_TF32": "auto",  # the user's options, read by the CLI itself
        defaults.GPU_MEMORY_CAP_ENV: "24",
    }
    assert worker_free(shell) == {"PATH": "/usr/bin", "VERL_P40_TF32": "auto", defaults.GPU_MEMORY_CAP_ENV: "24"}


def test_an_own_external_lib_is_told_which_option_to_leave_out(monkeypatch):
    import pytest

    from verl_p40 import UserError, defaults
    from verl_p40.gpu.nvml import GPUInfo

    h100 = [GPUInfo(0, "NVIDIA H100", (9, 0), 79.6)]
    with pytest.raises(
        UserError, match=r"--tf32 work through .*external_lib.* \(use --tf32 off, or drop your external_lib\)"
    ):
        _planned(monkeypatch, h100, profile="ampere", sets=["actor_rollout_ref.model.external_lib=mine"])
    own = _planned(monkeypatch, h100, profile="ampere", tf32="off", sets=["actor_rollout_ref.model.external_lib=mine"])
    assert defaults.NO_CUDNN_ATTENTION_ENV not in own.env


def test_cudnn_attention_is_switched_off_by_the_worker_hook_only_when_asked():
    import os
    import subprocess
    import sys

    from verl_p40 import defaults

    code = "import torch, verl_p40.worker_hooks; print(torch.backends.cuda.cudnn_sdp_enabled())"
    env = {k: v for k, v in os.environ.items() if k != defaults.NO_CUDNN_ATTENTION_ENV}
    on = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**env, defaults.NO_CUDNN_ATTENTION_ENV: "1"}
    )
    assert on.returncode == 0, on.stderr
    assert on.stdout.strip().splitlines()[-1] == "False" and "cuDNN attention off" in on.stdout
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert off.returncode == 0 and off.stdout.strip() == "True"  # PyTorch's default


def test_tf32_reaches_the_process_that_imports_the_worker_hook(tmp_path):
    """What a Ray worker does when verl imports external_lib: TF32 on with the plan's variable, untouched without."""
    import subprocess
    import sys

    code = (
        "import torch, verl_p40.worker_hooks; "
        "print(torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)"
    )
    import os

    on = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "VERL_P40_WORKER_TF32": "1"}
    )
    assert on.returncode == 0, on.stderr
    assert on.stdout.strip().splitlines()[-1] == "True True" and "TF32 matmuls on" in on.stdout
    env = {k: v for k, v in os.environ.items() if k != "VERL_P40_WORKER_TF32"}
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert off.returncode == 0 and off.stdout.strip() == "False True"  # PyTorch's defaults


def _count_compose(monkeypatch) -> list:
    """Every composition of a run's Hydra config (verl's own defaults, composed once per process, aside)."""
    from verl_p40.plan import planner

    calls, real = [], planner.compose
    monkeypatch.setattr(planner, "compose", lambda overrides: calls.append(list(overrides)) or real(overrides))
    return calls


def test_a_dry_run_composes_the_run_config_once(tiny_model, prepared, monkeypatch, capsys):
    from verl_p40 import cli

    composed = _count_compose(monkeypatch)
    assert (
        cli.main(["train", "--profile", "p40", "--dry-run", "--model", str(tiny_model), "--data", str(prepared)]) == 0
    )
    assert len(composed) == 1
    assert "verl.trainer.main_ppo" in capsys.readouterr().out


def test_train_plans_once_and_its_preflight_checks_that_plan(tiny_model, prepared, tmp_path, monkeypatch, capsys):
    """`train` hands the plan it made to the doctor's preflight: the checks that read verl's config (disk, ram) use
    the plan's, so the run's config is composed once, not again for the doctor and again for each check."""
    from verl_p40 import cli
    from verl_p40.doctor import host_checks
    from verl_p40.run import trainer

    composed = _count_compose(monkeypatch)
    started = []
    monkeypatch.setattr(trainer, "run_trainer", lambda run, logs, locks: started.append(run) or 0)
    # the ram check's need (a GPU worker's measured 6.3 GB and the rest) against a host of 64 GB, not this machine's
    monkeypatch.setattr(host_checks, "_host_memory", lambda: (64 * 10**9, "MemAvailable"))
    code = cli.main(
        [
            "train",
            *run_args(tiny_model, prepared, tmp_path),
            "--skip-check",
            "gpu,kernels,compute,verl,shm,cluster",
        ]
    )
    report = capsys.readouterr().err
    assert code == 0, report
    assert "PASS  disk" in report and "PASS  ram" in report  # both read the plan's config
    assert len(composed) == 1 and len(started) == 1


def test_bench_plans_once_too(tiny_model, prepared, tmp_path, monkeypatch, capsys):
    """`bench` hands its plan to the preflight and reads the result's settings from the same plan: one composition.
    The GPU parts (random weights, calibration, the trainer) are stand-ins here; what is counted is the planning."""
    from bench_standins import stand_in

    from verl_p40 import cli
    from verl_p40.perf import bench

    composed = _count_compose(monkeypatch)
    stand_in(monkeypatch, tiny_model)
    monkeypatch.setattr(bench, "environment", lambda facts: {"gpus": ["GPU 0: stand-in"]})  # torch versions
    out = tmp_path / "bench.json"
    code = cli.main(
        [
            "bench",
            "--profile",
            "p40",
            "--model",
            str(tiny_model),
            "--data",
            str(prepared),
            "--out",
            str(out),
            "--steps",
            "2",
            "--skip-check",
            "gpu,kernels,compute,verl,shm,cluster,ram",
        ]
    )
    assert code == 0, capsys.readouterr().err
    assert len(composed) == 1 and out.is_file()


def test_the_algorithm_line_gives_the_batch_the_run_will_use(monkeypatch):
    """`algorithm: ... N prompts a step` is read from the composed config, so a --set data.train_batch_size shows."""
    recipe = _planned(monkeypatch, None, profile="p40", algorithm="grpo-gsm8k")
    assert "algorithm: grpo-gsm8k (grpo), 8 samples per prompt, 32 prompts a step" in recipe.notes
    halved = _planned(monkeypatch, None, profile="p40", algorithm="grpo-gsm8k", sets=["data.train_batch_size=16"])
    assert "algorithm: grpo-gsm8k (grpo), 8 samples per prompt, 16 prompts a step" in halved.notes


def test_the_checkpoints_lock_lives_as_long_as_the_trainer_process(tmp_path):
    """verl-p40 train killed alone (SIGKILL) while verl's trainer goes on: the trainer holds the folder's lock (it
    inherited the descriptor), so a second trainer is still refused until the trainer itself is gone; and the run
    says where it starts from before the trainer starts."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import pytest

    from verl_p40 import UserError
    from verl_p40.run import lock

    experiment = tmp_path / "exp"
    trainer = (
        "import os, time\nprint('step:1 - x:1', flush=True)\n"
        "open(os.environ['PIDFILE'], 'w').write(str(os.getpid()))\ntime.sleep(60)\n"
    )
    runner = (
        "import sys\n"
        "from verl_p40.run.lock import train_lock\n"
        "from verl_p40.run.trainer import run_trainer\n"
        "class Plan:\n"
        f"    env, overrides, validation_questions = {{'PIDFILE': {str(tmp_path / 'pid')!r}}}, [], None\n"
        f"    record = {{'checkpoints': {str(experiment)!r}}}\n"
        f"    def command(self): return [sys.executable, '-c', {trainer!r}]\n"
        f"held = train_lock({str(experiment)!r})\n"  # as the run sequence takes it, once, before the trainer
        f"sys.exit(run_trainer(Plan(), {str(tmp_path / 'logs')!r}, (held,)))\n"
    )
    cli = subprocess.Popen([sys.executable, "-c", runner], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    child = None
    try:
        deadline = time.monotonic() + 120
        while not ((tmp_path / "pid").is_file() and (tmp_path / "pid").read_text()):
            assert time.monotonic() < deadline and cli.poll() is None, "the stand-in trainer never wrote its pid"
            time.sleep(0.05)
        child = int((tmp_path / "pid").read_text())
        os.kill(cli.pid, signal.SIGKILL)
        assert cli.wait(timeout=30) == -signal.SIGKILL
        assert cli.stderr.read().startswith(
            f"[verl-p40] no complete checkpoint in {experiment}: training from the start"
        )
        with pytest.raises(UserError, match="another trainer is training into this folder"):
            lock.train_lock(experiment)
    finally:
        if child:
            os.kill(child, signal.SIGKILL)
    for _ in range(200):  # the child is not ours to reap: wait for the kernel to drop its lock
        try:
            lock.train_lock(experiment)
            break
        except UserError:
            time.sleep(0.05)
    assert str(experiment.absolute()) in lock._held
