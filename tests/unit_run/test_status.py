"""The status file (logs/status.json) and `verl-p40 status`: the training run's progress a step, how it ended or
failed, and the failure of a service of the stack (model-fetch, data-prep, doctor) that `docker compose up -d` hides."""

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from conftest import REPO
from verl_p40 import UserError
from verl_p40.run import status


def cli(*args, env=None, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "verl_p40.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd or REPO,
        timeout=120,
    )


def one_line(result) -> str:
    out = result.stdout.strip().splitlines()
    assert len(out) == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return out[0]


def files_in(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def test_each_write_replaces_the_file_whole_and_a_failed_change_leaves_it_as_it_was(tmp_path):
    status.write_run(tmp_path, state="starting", started=status.now(), log="train.log")
    status.write_run(tmp_path, state="running", step=1, progress="step 1 of 3")
    data = json.loads((tmp_path / "status.json").read_text())
    assert data["version"] == 1 and data["run"]["state"] == "running" and data["run"]["log"] == "train.log"
    before = (tmp_path / "status.json").read_bytes()

    def boom(_data):
        raise RuntimeError("interrupted while writing")

    with pytest.raises(RuntimeError):
        status.update(tmp_path, boom)
    assert (tmp_path / "status.json").read_bytes() == before
    assert files_in(tmp_path) == {"status.json", ".status.json.lock"}  # no temporary file left


def test_a_new_run_replaces_the_last_ones_fields(tmp_path):
    status.write_run(tmp_path, state="failed", started=status.now(), exit_code=2, line="boom")
    status.write_run(tmp_path, state="starting", started=status.now())
    run = status.read(tmp_path)["run"]
    assert run["state"] == "starting" and "line" not in run and "exit_code" not in run


def test_a_status_file_that_cannot_be_written_never_stops_the_run(tmp_path, capsys):
    (tmp_path / "logs").write_text("a file where the folder belongs")
    status.write_run(tmp_path / "logs", state="starting", started=status.now())
    status.write_run(tmp_path / "logs", state="running", step=1)
    err = capsys.readouterr().err
    assert err.count("status not written") == 1 and "the run goes on" in err


@pytest.mark.parametrize(
    "text, why",
    [
        ("{not json", "not whole JSON"),
        (b"\xff\xfe{", "not UTF-8 text"),
        ("", "empty"),
        ("[1, 2]", "not a JSON object"),
        ('{"version": 7}', "version 7"),
        ('{"version": 1, "run": {"state": "dancing"}}', "its run has no known state"),
        ('{"version": 1, "services": {"doctor": {"state": "failed"}}}', "no known state or time"),
        ('{"version": 1, "run": {"state": "running", "updated": "yesterday"}}', "'yesterday' is not a time"),
    ],
)
def test_the_reader_says_in_one_line_what_is_wrong_with_a_corrupt_file(tmp_path, text, why):
    path, text = tmp_path / "status.json", text if isinstance(text, bytes) else text.encode()
    path.write_bytes(text)
    with pytest.raises(UserError, match="not a status file of verl-p40") as caught:
        status.read(tmp_path)
    assert why in str(caught.value) and "\n" not in str(caught.value)
    result = cli("status", "--logs", str(tmp_path))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(f"verl-p40 status: error: {tmp_path / 'status.json'}: not a status file")
    assert len(result.stderr.splitlines()) == 1 and path.read_bytes() == text


def test_status_without_a_file_says_so_in_one_line(tmp_path):
    result = cli("status", "--logs", str(tmp_path))
    assert result.returncode == 2 and result.stdout == "" and len(result.stderr.splitlines()) == 1
    assert f"no {tmp_path / 'status.json'} yet" in result.stderr and "Traceback" not in result.stderr
    assert files_in(tmp_path) == set()  # reading writes nothing


def test_status_while_running_after_the_end_and_after_a_failure(tmp_path):
    status.write_run(tmp_path, state="starting", started=status.now(), log="logs/train-1.log")
    starting = cli("status", "--logs", str(tmp_path))
    assert starting.returncode == 0 and one_line(starting).startswith("training starting since ")

    progress = (
        "step 12 of 60, 118.0 s a step, reward 0.420, validation 30.5% at step 10 (best: step 10), ~1 h 39 min left"
    )
    status.write_run(tmp_path, state="running", step=12, total_steps=60, progress=progress)
    running = cli("status", "--logs", str(tmp_path))
    assert running.returncode == 0
    assert one_line(running).startswith(f"training: {progress} (updated ")
    assert one_line(running).endswith("ago) (log: logs/train-1.log)")

    started = status.read(tmp_path)["run"]["started"]
    ended_at = (datetime.fromisoformat(started) + timedelta(seconds=7135)).isoformat()
    status.write_run(tmp_path, state="ended", ended=ended_at, exit_code=0, progress="step 60 of 60, 118.0 s a step")
    ended = cli("status", "--logs", str(tmp_path))
    assert ended.returncode == 0 and "training ended at " in one_line(ended)
    assert " after 1 h 59 min: step 60 of 60, 118.0 s a step (log: logs/train-1.log)" in one_line(ended)

    status.write_run(tmp_path, state="failed", exit_code=2, line="CUDA out of memory in generation (HF rollout)")
    failed = cli("status", "--logs", str(tmp_path))
    assert failed.returncode == 1
    assert "(exit 2) after step 60 of 60, 118.0 s a step:" in one_line(failed)
    assert one_line(failed).endswith(": CUDA out of memory in generation (HF rollout) (log: logs/train-1.log)")

    as_json = cli("status", "--logs", str(tmp_path), "--json")
    assert as_json.returncode == 0 and json.loads(as_json.stdout)["run"]["state"] == "failed"


def service_env(tmp_path, name):
    return {"VERL_P40_SERVICE": name, "VERL_P40_LOGS": str(tmp_path / "logs")}


def test_a_failed_doctor_is_recorded_with_its_line_and_status_names_it(tmp_path):
    """`docker compose up -d` prints only 'service "doctor" didn't complete successfully: exit 2': the doctor's line
    is in the logs volume's status file, and `verl-p40 status` (docker compose run --rm status) says it first."""
    status.write_run(tmp_path / "logs", state="ended", started=status.now(), exit_code=0, progress="step 2 of 2")
    empty = tmp_path / "empty-data"
    empty.mkdir()
    doctor = cli("doctor", "--only", "data", "--data", str(empty), env=service_env(tmp_path, "doctor"))
    assert doctor.returncode == 2 and "FAIL  data" in doctor.stdout
    record = status.read(tmp_path / "logs")["services"]["doctor"]
    assert record["state"] == "failed" and record["exit_code"] == 2
    assert record["line"].startswith("data: ") and "fix: " in record["line"]
    said = cli("status", "--logs", str(tmp_path / "logs"))
    assert said.returncode == 1 and "Traceback" not in said.stderr
    # only this attempt's story: the run that ended before the doctor failed is the previous one, not said
    assert one_line(said).startswith("doctor failed at ") and one_line(said).endswith(f"(exit 2): {record['line']}")
    assert "training ended" not in said.stdout
    # fixed and run again: the failure is gone
    (empty / "x").write_text("")
    passed = cli("doctor", "--only", "writable", env=service_env(tmp_path, "doctor"), cwd=tmp_path)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert status.read(tmp_path / "logs")["services"]["doctor"]["state"] == "ok"
    assert one_line(cli("status", "--logs", str(tmp_path / "logs"))).startswith("training ended at ")


def test_data_prep_and_model_fetch_failures_and_a_bad_setting_are_recorded(tmp_path):
    prep = cli(
        "prep",
        "--source",
        str(tmp_path / "no-such-folder"),
        "--out",
        str(tmp_path / "data"),
        env=service_env(tmp_path, "data-prep"),
    )
    assert prep.returncode == 2
    fetch = cli(
        "fetch-model",
        "--from",
        str(tmp_path),
        "--out",
        str(tmp_path / "model"),
        env=service_env(tmp_path, "model-fetch"),
    )
    assert fetch.returncode != 0
    usage = cli("doctor", "--no-such-flag", env=service_env(tmp_path, "doctor"))
    assert usage.returncode == 2
    services = status.read(tmp_path / "logs")["services"]
    assert services["data-prep"]["line"] == prep.stderr.strip().splitlines()[-1]
    assert services["model-fetch"]["line"] == fetch.stderr.strip().splitlines()[-1]
    assert services["doctor"]["line"] == usage.stderr.strip() and services["doctor"]["exit_code"] == 2
    said = cli("status", "--logs", str(tmp_path / "logs"))
    assert said.returncode == 1
    assert [line.split(" failed at ")[0] for line in said.stdout.splitlines()] == ["data-prep", "model-fetch", "doctor"]


def test_outside_the_stack_nothing_is_recorded(tmp_path):
    result = cli(
        "prep",
        "--source",
        str(tmp_path / "none"),
        "--out",
        str(tmp_path / "data"),
        env={"VERL_P40_LOGS": str(tmp_path / "logs"), "VERL_P40_SERVICE": ""},
    )
    assert result.returncode == 2 and not (tmp_path / "logs").exists()


# a stand-in for verl's trainer: verl's own lines, a worker's model config dump, three steps, validations at 2 and 3
STAND_IN = r"""
import sys
p = "\x1b[36m(TaskRunner pid=7)\x1b[0m "
w = "\x1b[36m(WorkerDict pid=8)\x1b[0m "
print(p + "Total training steps: 3")
print(w + "Model config after override: Qwen2Config {")
print(w + '  "vocab_size": 151936')
print(w + "}")
print(p + "verl-p40: validation accuracy 25.0% at step 0; no validated step is saved yet")
print(p + "step:0 - val-core/openai/gsm8k/acc/mean@1:np.float64(0.25)")
print(p + "step:1 - critic/score/mean:0.1 - timing_s/step:3.0")
print(p + "verl-p40: validation accuracy 50.0% at step 2; best step 2 (50.0%, +25.0 points over step 0)")
print(p + "step:2 - critic/score/mean:0.2 - timing_s/testing:1.0 - timing_s/save_checkpoint:0.5 - timing_s/step:3.5")
if FAIL:
    print(w + "RuntimeError: the stand-in fails here", flush=True)
    sys.exit(1)
print(p + "step:3 - critic/score/mean:0.3 - timing_s/step:2.5")
"""


# the plan's schedule: validate and save every 2nd step and at the last (3)
SCHEDULE = (
    "    def config(self):\n"
    "        from omegaconf import OmegaConf\n"
    "        return OmegaConf.create({'trainer': {'total_training_steps': 3, 'test_freq': 2, 'save_freq': 2}})\n"
)


def _run_stand_in(tmp_path, fail: bool):
    from test_train import _stand_in_runner

    runner = _stand_in_runner(tmp_path, STAND_IN.replace("FAIL", str(fail)), SCHEDULE)
    return subprocess.run([sys.executable, "-c", runner], capture_output=True, text=True, timeout=60, cwd=REPO)


def test_the_trainer_says_a_line_a_step_writes_the_status_file_and_keeps_dumps_in_the_log_only(tmp_path):
    result = _run_stand_in(tmp_path, fail=False)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("[verl-p40] step ")]
    # step 2: 2 s (3.5 less the validation and the save) + one validation (1 s) and one save (0.5 s) at step 3;
    # step 3: the median of 2.0 and 2.5
    assert lines == [
        "[verl-p40] step 1 of 3, 3.0 s a step, reward 0.100, validation 25.0% at step 0, ~6 s left "
        "(+ validations and saves not yet timed)",
        "[verl-p40] step 2 of 3, 2.0 s a step, reward 0.200, validation 50.0% at step 2 (best: step 2), ~4 s left",
        "[verl-p40] step 3 of 3, 2.2 s a step, reward 0.300, validation 50.0% at step 2 (best: step 2), last step",
    ]
    assert "Qwen2Config" not in result.stdout and "vocab_size" not in result.stdout
    log = next((tmp_path / "logs").glob("train-*.log")).read_text()
    assert "Qwen2Config {" in log and '"vocab_size": 151936' in log and lines[-1] in log
    run = status.read(tmp_path / "logs")["run"]
    assert run["state"] == "ended" and run["exit_code"] == 0 and run["step"] == 3 and run["total_steps"] == 3
    assert run["best_step"] == 2 and run["validation"] == {"step": 2, "accuracy": 0.5}
    # the run is over: its last line without a time left
    assert run["progress"] == "step 3 of 3, 2.2 s a step, reward 0.300, validation 50.0% at step 2 (best: step 2)"
    said = cli("status", "--logs", str(tmp_path / "logs"))
    assert said.returncode == 0 and one_line(said).startswith("training ended at ")


def test_a_failed_run_says_failed_with_its_exit_code_and_line_in_the_status_file(tmp_path):
    result = _run_stand_in(tmp_path, fail=True)
    assert result.returncode == 1
    run = status.read(tmp_path / "logs")["run"]
    assert run["state"] == "failed" and run["exit_code"] == 1 and run["step"] == 2
    assert run["line"] == "RuntimeError: the stand-in fails here"
    said = cli("status", "--logs", str(tmp_path / "logs"))
    assert said.returncode == 1
    assert "(exit 1) after step 2 of 3" in one_line(said) and "RuntimeError: the stand-in fails here" in one_line(said)


def test_a_service_failure_before_the_runs_start_is_history_and_the_runs_own_record_is_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("VERL_P40_LOGS", str(tmp_path))
    monkeypatch.setattr(status, "SESSION", "the doctor's container")
    status.record_service("doctor", "failed", 2, "data: /data: train.parquet: missing; fix: run prep")
    monkeypatch.setattr(status, "SESSION", "the trainer's container")
    status.write_run(tmp_path, state="running", started=status.now(), step=1, progress="step 1 of 2")
    status.record_service("trainer", "failed", 2, "the same failure as the run's")  # this process: the run itself
    said, code = status.lines(status.read(tmp_path))
    assert code == 0 and len(said) == 1 and said[0].startswith("training: step 1 of 2 (updated ")


def _aged(logs: Path, seconds: float) -> None:
    """The run's record as a trainer that stopped writing `seconds` ago left it."""

    def change(data: dict) -> None:
        then = datetime.fromisoformat(data["run"]["updated"]) - timedelta(seconds=seconds)
        data["run"]["updated"] = then.isoformat()

    status.update(logs, change)


@pytest.mark.parametrize("started_by", [None, "trainer"])
def test_a_dead_trainer_is_not_said_to_be_running(tmp_path, monkeypatch, started_by):
    """A trainer killed without a word (OOM killer, `docker kill`, a reboot) leaves its record at `running`: once it
    is older than a few step times and the heartbeat, status says the trainer is likely dead, with the fix for the
    way the run was started, and exits 1."""
    monkeypatch.setenv("VERL_P40_SERVICE", started_by or "")
    status.write_run(tmp_path, state="starting", started=status.now(), log="logs/train-1.log")
    status.write_run(tmp_path, state="running", step=12, step_s=118.0, progress="step 12 of 60, 118.0 s a step")
    _aged(tmp_path, 2 * 118)  # two step times and no heartbeat missed for long: still running
    alive = cli("status", "--logs", str(tmp_path), env={"VERL_P40_SERVICE": ""})
    assert alive.returncode == 0 and one_line(alive).startswith("training: step 12 of 60")
    _aged(tmp_path, 25 * 60)
    dead = cli("status", "--logs", str(tmp_path), env={"VERL_P40_SERVICE": ""})
    assert dead.returncode == 1 and "Traceback" not in dead.stderr
    line = one_line(dead)
    assert line.startswith("training: the trainer stopped writing 29 min ago (step 12 of 60, 118.0 s a step)")
    assert "it is likely dead" in line and "left" not in line
    if started_by:
        assert "`docker compose up -d trainer` resumes from the newest checkpoint" in line
    else:
        assert "the same verl-p40 train command resumes" in line and "docker" not in line


def test_a_trainer_that_dies_while_starting_is_said_dead_too(tmp_path):
    status.write_run(tmp_path, state="starting", started=status.now())
    said, code = status.lines(status.read(tmp_path), at=datetime.now().timestamp() + 3600)
    assert code == 1 and said[0].startswith("training: the trainer stopped writing 60 min ago (while starting")


def test_the_heartbeat_keeps_a_slow_step_from_looking_dead(tmp_path):
    """Between steps (a validation, a save) `verl-p40 train` still rewrites the run's record."""
    import time

    status.write_run(tmp_path, state="running", started=status.now(), step=1)
    before = status.read(tmp_path)["run"]["updated"]
    with status.heartbeat(tmp_path, every=0.05):
        time.sleep(0.3)
    run = status.read(tmp_path)["run"]
    assert run["updated"] > before and run["heartbeat"] and run["state"] == "running" and run["step"] == 1


def test_a_running_download_is_shown_and_the_previous_run_is_not(tmp_path, monkeypatch):
    """`docker compose up -d trainer` after an earlier run: model-fetch downloads (~1 GB); status says so and how to
    watch it, not the earlier run's end."""
    logs = tmp_path / "logs"
    an_hour_ago = (datetime.now(timezone.utc) - timedelta(hours=1)).isoformat(timespec="milliseconds")
    status.write_run(logs, state="ended", started=an_hour_ago, exit_code=0, progress="step 60 of 60")
    _aged(logs, 50 * 60)  # it ended 50 minutes ago: records written in the same millisecond would tie
    monkeypatch.setenv("VERL_P40_LOGS", str(logs))
    monkeypatch.setattr(status, "SESSION", "the model-fetch container")
    status.record_service("model-fetch", "running")
    said = cli("status", "--logs", str(logs))
    assert said.returncode == 0 and "Traceback" not in said.stderr
    line = one_line(said)
    assert line.startswith("model-fetch running since ") and "downloading the model" in line
    assert "`docker compose logs -f model-fetch`" in line and "training ended" not in line


def test_the_doctors_fix_is_phrased_for_compose_or_the_cli(tmp_path):
    empty = tmp_path / "empty-data"
    empty.mkdir()
    by_cli = cli("doctor", "--only", "data", "--data", str(empty), env={"VERL_P40_SERVICE": ""})
    assert by_cli.returncode == 2 and f"verl-p40 prep --out {empty}" in by_cli.stdout
    in_stack = cli("doctor", "--only", "data", "--data", str(empty), env=service_env(tmp_path, "doctor"))
    assert in_stack.returncode == 2 and "docker compose run --rm data-prep" in in_stack.stdout
    assert "verl-p40 prep" not in in_stack.stdout


def test_a_run_stopped_under_compose_says_the_compose_command_that_resumes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("VERL_P40_SERVICE", "trainer")
    status.write_run(tmp_path, state="starting", started=status.now())
    status.write_run(tmp_path, state="stopped", ended=status.now(), exit_code=0, progress="step 7 of 60")
    monkeypatch.setenv("VERL_P40_SERVICE", "")  # the status service reads it
    said, code = status.lines(status.read(tmp_path))
    assert code == 0 and said[0].endswith("step 7 of 60; `docker compose up -d trainer` resumes")
    monkeypatch.setattr(status, "SESSION", "a CLI run")
    status.write_run(tmp_path, state="starting", started=status.now())
    status.write_run(tmp_path, state="stopped", ended=status.now(), exit_code=0, progress="step 7 of 60")
    assert status.lines(status.read(tmp_path))[0][0].endswith("step 7 of 60; the same command resumes")
