"""`verl-p40 bench`: a few training steps on random weights of the configured model's shape, on this GPU, with the
product's own settings, written as one shareable JSON: the GPU, driver, torch, profile, seconds per step and per phase,
peak memory (NVML, per process, through the monitor), this GPU's measured constants, and the projection's error
against the measurement, beside the projection for a Tesla P40. P40 owners who run it confirm or correct the projection.

The JSON is written through its folder's ledger (`verl_p40.outputs`): a file of its name that bench did not write, or a
link, is refused before any work, as is one in the monitor's folder beside it (`NAME-logs/gpu`); its own earlier result
is replaced whole. The random-weight model is built in a temporary work folder, removed whatever happens; with
`--keep-model DIR` it is moved into DIR, whole, only by a bench that measured (a refused one leaves no folder).
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from verl_p40 import UserError, __version__
from verl_p40.atomic import staged
from verl_p40.child import last_error_line, run_python
from verl_p40.outputs import OutputFolder
from verl_p40.perf import projection
from verl_p40.perf.options import BenchOptions
from verl_p40.plan.facts import Facts
from verl_p40.plan.workload import Workload

_EARLIER = b'{\n  "verl_p40_bench": '  # how every result bench wrote begins


def output_folder(out: Path) -> OutputFolder:
    """The folder of `--out FILE`; a result an earlier version wrote there (no ledger yet) is bench's own."""

    def earlier(name: str, path: Path) -> bool:
        if name != out.name or not path.is_file() or path.is_symlink():
            return False
        with open(path, "rb") as handle:
            return handle.read(len(_EARLIER)) == _EARLIER

    return OutputFolder(out.parent, "--out", "bench", adopt=earlier)


def logs_folder(out: Path) -> Path:
    """Where the run's trainer log and GPU samples go, beside the result."""
    return out.parent / f"{out.stem}-logs"


def check_outputs(out: Path) -> OutputFolder:
    """Before any work: `out` free or bench's own, and the monitor's files beside it too."""
    from verl_p40.gpu import monitor

    folder = output_folder(out)
    folder.check([out.name])
    monitor.output_folder(logs_folder(out) / "gpu", "bench").check(monitor.NAMES)
    return folder


def save(folder: OutputFolder, out: Path, result: dict) -> None:
    """The result as `out`, whole or not at all, over bench's own earlier one."""
    with folder.write([out.name]) as (temp,):
        temp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


def make_random_model(source: Path, target: Path) -> Path:
    """A model of `source`'s exact shape with random weights (fp32), with `source`'s tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if not (source / "config.json").is_file():
        raise UserError(f"{source}: no config.json (bench needs the model's config and tokenizer, not its weights)")
    config = AutoConfig.from_pretrained(str(source))
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32).save_pretrained(str(target))
    AutoTokenizer.from_pretrained(str(source)).save_pretrained(str(target))
    return target


def kept_model(keep: Path) -> bool:
    """Whether `--keep-model DIR` holds the random-weight model an earlier bench put there (it appears whole or not at
    all); False where there is nothing yet. A folder holding anything else is refused, never written into."""
    if (keep / "config.json").is_file():
        return True
    if keep.is_dir() and any(keep.iterdir()):
        raise UserError(f"--keep-model {keep}: holds files but no model (no config.json); choose a new or empty folder")
    return False


def keep_model(model: Path, keep: Path) -> None:
    """The random-weight model built in bench's work folder (the run is over), moved into `keep` whole, for the next
    bench."""
    print(f"[bench] keeping the random-weight model in {keep}", flush=True)
    with staged([keep], directory=True) as (temp,):
        for path in model.iterdir():
            shutil.move(path, temp / path.name)


def _calibration(model: Path) -> dict:
    """This GPU's constants, measured in a child process (the bench process holds no CUDA context while training)."""
    code = (
        "import json, sys; from verl_p40.perf import projection; "
        f"shape = projection.Shape.from_config(json.load(open({str(model / 'config.json')!r}))); "
        "print(json.dumps(projection.card_dict(projection.calibrate(shape))))"
    )
    card, probe = run_python(code, timeout=600)
    if probe.returncode != 0 or card is None:
        raise UserError(f"GPU calibration failed: {last_error_line(probe)}")
    return card


class Sampler:
    """The GPU monitor's own NVML sampling (one sampler for every peak the project reports), in a thread."""

    def __init__(self, out: Path, interval: float = 0.5):
        from verl_p40.gpu.monitor import Monitor
        from verl_p40.gpu.sampler import NvmlSource

        self.monitor = Monitor(NvmlSource(log=lambda line: None), out, interval, log=lambda line: None, command="bench")
        self.thread = threading.Thread(target=self.monitor.run, daemon=True)

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.monitor.stop_event.set()
        self.thread.join()

    def peaks(self) -> dict:
        summary = self.monitor.finish()
        procs = summary["processes"]
        return {
            "nvml_peak_process_gb": round(max((p["peak_used_memory_bytes"] for p in procs), default=0) / 1e9, 3),
            "nvml_peak_device_gb": {g: d["peak_memory_used_gb"] for g, d in summary["gpus"].items()},
            "processes": [{**p, "peak_used_memory_gb": round(p["peak_used_memory_bytes"] / 1e9, 3)} for p in procs],
        }


def environment(facts: Facts) -> dict:
    """The machine the result was measured on: the GPUs and driver as the command read them (`Facts`), and the
    versions of what ran."""
    from importlib.metadata import PackageNotFoundError, version

    def ver(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    import torch

    cuda = facts.driver_cuda
    return {
        "gpus": [g.describe() for g in facts.gpus or ()],
        "driver": facts.driver,
        "driver_cuda": f"{cuda[0]}.{cuda[1]}" if cuda else None,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "verl": ver("verl"),
        "transformers": ver("transformers"),
        "verl_p40": __version__,
        "python": sys.version.split()[0],
    }


PHASE_PEAK = "perf/peak_allocated_gb/"  # the phase-peak patch's metrics (GiB, as verl's perf/max_memory_*)


def gib_to_gb(value: float) -> float:
    """verl's memory metrics (`perf/*_gb`) are torch's bytes / 2**30; the memory plan speaks GB of 1e9 bytes."""
    return round(value * 2**30 / 1e9, 2)


def whole_run_peak_gib(steps: list[dict]) -> float | None:
    """verl's perf/max_memory_allocated_gb at its largest over `steps` (GiB); None when no step logged it."""
    values = [s["perf/max_memory_allocated_gb"] for s in steps if "perf/max_memory_allocated_gb" in s]
    return max(values) if values else None


def phase_peaks_gb(steps: list[dict]) -> dict[str, float]:
    """torch's peak of each phase of a step over `steps` (perf/peak_allocated_gb/<phase>), in GB of 1e9 bytes as the
    memory plan predicts them (the run record's predicted_phase_peaks_gb); empty when the log has none."""
    peaks: dict[str, float] = {}
    for step in steps:
        for key, value in step.items():
            if key.startswith(PHASE_PEAK):
                phase = key.removeprefix(PHASE_PEAK)
                peaks[phase] = max(peaks.get(phase, 0.0), value)
    return {phase: gib_to_gb(value) for phase, value in peaks.items()}


def summarise(steps: list[dict], cfg: Any, shape: projection.Shape, measured_card: projection.Card) -> dict:
    """Measured medians (warm-up step left out), and the projection for this GPU (its error) and for a P40."""
    phases = projection.median_phases(steps)
    generated = statistics.median(s.get("response_length/max", 0.0) for s in steps)
    tokens = projection.measured_tokens(steps, Workload.of(cfg).reference)
    run = projection.run_from_config(cfg, generated, projection.longest_lengths(steps), tokens)
    ran = projection.old_log_prob_pass(steps)
    if ran is not None:  # what ran, where the log says (the plan's choice otherwise)
        run = dataclasses.replace(run, log_probs_in_rollout=not ran)
    prompts = int(cfg.data.train_batch_size)
    host = projection.host_overhead_per_token(phases.get("gen", 0.0), shape, run, measured_card)
    here = projection.project(shape, run, measured_card, host)
    p40 = projection.project(shape, run, projection.P40, host)
    full_width = projection.project(
        shape, dataclasses.replace(run, pass_width=None, tokens=None, prompt_columns=None), projection.P40, host
    )
    at_longest = projection.project(shape, dataclasses.replace(run, tokens=None), projection.P40, host)
    measured_step = phases.get("step")
    error = round(100 * (here["step"] - measured_step) / measured_step, 1) if measured_step else None
    return {
        "steps_timed": max(len(steps) - 1, 1),
        "seconds_per_step": measured_step,
        "prompts_per_s": round(prompts / measured_step, 3) if measured_step else None,
        "sequences_per_s": round(run.sequences / measured_step, 3) if measured_step else None,
        "phases_s": phases,
        "torch_max_allocated_gb": gib_to_gb(peak) if (peak := whole_run_peak_gib(steps)) is not None else None,
        "torch_phase_peaks_gb": phase_peaks_gb(steps),
        "generated_tokens_per_step": generated,
        "projection": {
            "this_gpu": {
                **here,
                "error_pct_vs_measured": error,
                "error_pct_by_phase": projection.phase_errors(phases, here),
                "card": projection.card_dict(measured_card),
            },
            "p40": {
                **p40,
                "hours_per_gsm8k_epoch": projection.epoch_hours(p40["step"], prompts),
                # the step corrected by this GPU's error; bench/projection_band.py spreads several calibrations
                "error_band": projection.error_band(p40["step"], [error]) if error is not None else None,
                "card": projection.card_dict(projection.P40),
            },
            "pass_width": run.width,
            "tokens_per_phase": tokens,  # as the run logged them (None: every pass priced at pass_width)
            # every pass at pass_width (the step's longest prompt + answer): the model before the tokens were logged
            "p40_at_longest": {**at_longest, "pass_width": run.width},
            "p40_at_full_width": {
                **full_width,
                "pass_width": run.prompt_width + run.response_width,
                "hours_per_gsm8k_epoch": projection.epoch_hours(full_width["step"], prompts),
            },
            "host_seconds_per_generated_token": round(host, 5),
            "model": projection.__doc__.split("\n\n")[1],
        },
    }


def run(options: BenchOptions, facts: Facts) -> dict:
    """Run `options.steps` training steps with random weights of `options.model`'s shape on the machine `facts`
    describes; write `options.out` and return the JSON."""
    from verl_p40.doctor import runner as doctor

    out, keep = Path(options.out), Path(options.keep_model) if options.keep_model else None
    folder = check_outputs(out)  # a user's file of its name, a link, a read-only folder: said before the model is made
    work = Path(tempfile.mkdtemp(prefix="verl-p40-bench-"))
    try:  # the random-weight model (2 GB for 0.5B) and the run's checkpoints are the bench's own: never left behind
        bench = _Bench(facts, options.steps, out, doctor.skips(options.skip_check), keep, work)
        return _run(options, bench, folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@dataclasses.dataclass(frozen=True)
class _Bench:
    facts: Facts
    steps: int
    out: Path
    skip: dict[str, str]
    keep: Path | None
    work: Path


def _run(options: BenchOptions, bench: _Bench, folder: OutputFolder) -> dict:
    from verl_p40.run import sequence
    from verl_p40.run.trainer_log import read_steps

    reuse = bench.keep is not None and kept_model(bench.keep)
    model = _bench_model(Path(options.model).expanduser(), bench.keep if reuse else bench.work / "model", reuse)
    shape = projection.Shape.from_config(json.loads((model / "config.json").read_text()))
    variant = bench_options(options, model, bench.work, bench.steps)
    ready = sequence.prepare(variant, bench.facts, _launch(variant, bench.skip))
    print("[bench] measuring this GPU's constants", flush=True)
    card = projection.Card(**_calibration(model))
    logs = logs_folder(bench.out)
    started = time.time()
    with Sampler(logs / "gpu") as sampler:
        code = ready.train(str(logs))
    wall = time.time() - started
    log = sorted(logs.glob("train-*.log"))[-1]
    measured = read_steps(log)
    if code != 0 or len(measured) < bench.steps:
        raise UserError(
            f"the trainer stopped after {len(measured)} of {bench.steps} steps (exit code {code}); see {log}"
        )
    result = (
        _result(ready.plan, bench.facts, options, shape)
        | {
            "wall_s": round(wall, 1),
            **summarise(measured, ready.plan.config(), shape, card),
            "memory": sampler.peaks(),
            "predicted": ready.plan.record.get("memory"),  # the memory plan's peaks, whole and by phase
            "steps": measured,
            "command": shlex.join(["verl-p40", *sys.argv[1:]]),
            "trainer_log": str(log),
        }
    )
    if bench.keep is not None and not reuse:  # only from a bench that measured: a refused or failed one leaves none
        keep_model(model, bench.keep)
    save(folder, bench.out, result)
    return result


def _launch(options, skip: dict[str, str]):
    """Bench's way through the run sequence: the preflight without the disk check (it keeps no checkpoint), and no
    run record (no checkpoint to describe, in a work folder removed at the end)."""
    from verl_p40.doctor.runner import preflight
    from verl_p40.run.sequence import Launch

    checks = {"disk": "bench (it keeps no checkpoint)", **skip}
    return Launch(preflight=lambda run, facts: preflight(run, facts, options, checks), record=False)


def _result(run_plan, facts: Facts, options, shape: projection.Shape) -> dict:
    """The result's head: what was measured where, with which plan."""
    return {
        "verl_p40_bench": 1,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "environment": environment(facts),
        "profile": run_plan.profile.name,
        "notes": run_plan.notes,
        "settings": _settings(run_plan.config(), shape, options.gpu_memory_cap_gb),
    }


def _bench_model(source: Path, model: Path, reuse: bool) -> Path:
    """The model the bench trains: a kept one, or random weights of the source's shape written to `model`."""
    if not reuse:
        print(f"[bench] random weights of {source}'s shape -> {model}", flush=True)
        make_random_model(source, model)
    return model


def bench_options(options: BenchOptions, model: Path, work: Path, steps: int) -> BenchOptions:
    """The user's options made a bench, as a new object (the user's stay as the command line built them): its model,
    its own checkpoints folder, `steps` steps, no save, no validation, no resume. Its verl values go after the user's
    (`sets` is made again from `set` and `overrides`), so they win."""
    return dataclasses.replace(
        options,
        model=str(model),
        checkpoints=str(work / "checkpoints"),
        overrides=[
            *options.overrides,
            f"trainer.total_training_steps={steps}",
            "trainer.save_freq=-1",
            "trainer.test_freq=-1",
            "trainer.val_before_train=false",
            "trainer.resume_mode=disable",
            "trainer.experiment_name=bench",
        ],
    )


def _settings(cfg: Any, shape: projection.Shape, cap_gb: float | None) -> dict:
    """What the result's numbers depend on, from the composed config."""
    return {
        "model_parameters": shape.parameters,
        "train_batch_size": int(cfg.data.train_batch_size),
        "rollout_n": int(cfg.actor_rollout_ref.rollout.n),
        "rollout": cfg.actor_rollout_ref.rollout.name,
        "algorithm": Workload.of(cfg).estimator,
        "max_prompt_length": int(cfg.data.max_prompt_length),
        "max_response_length": int(cfg.data.max_response_length),
        "gpu_memory_cap_gb": cap_gb,
    }


def lines(result: dict) -> list[str]:
    p = result["projection"]
    return [
        f"{result['environment']['gpus'][0]}: {result['seconds_per_step']} s/step "
        f"({result['prompts_per_s']} prompts/s), "
        f"worker peak {result['memory']['nvml_peak_process_gb']} GB (NVML), "
        f"torch {result['torch_max_allocated_gb']} GB",
        f"projection for this GPU: {p['this_gpu']['step']} s/step "
        f"({p['this_gpu']['error_pct_vs_measured']:+}% vs measured)",
        f"projection for a Tesla P40: {p['p40']['step']} s/step, {p['p40']['hours_per_gsm8k_epoch']} h per GSM8K epoch"
        + band_words(p["p40"].get("error_band")),
    ] + phase_lines(
        result.get("torch_phase_peaks_gb") or {}, (result.get("predicted") or {}).get("predicted_phase_peaks_gb") or {}
    )


def band_words(band: dict | None) -> str:
    """'; X s corrected by this GPU's calibration error (E%)': the P40 step if it errs as this GPU's projection did
    (nothing without a measured step)."""
    if not band:
        return ""
    return f"; {band['low_s']} s corrected by this GPU's calibration error ({band['errors_pct'][0]:+}%)"


def phase_lines(measured: dict[str, float], predicted: dict[str, float]) -> list[str]:
    """One line: torch's peak of each phase, beside the memory plan's prediction where it made one (GB)."""
    if not measured:
        return []
    shown = [f"{k} {v}" + (f" (plan {predicted[k]})" if k in predicted else "") for k, v in measured.items()]
    return ["torch's peak by phase, GB: " + ", ".join(shown)]
