"""The READMEs' numbers held to the committed results they name: each figure below is read from a result file's JSON
(or a committed log, or the recipe's config) and formatted as the README gives it; a README row that drifts from its
source, or a source that is re-run with other numbers, fails here. One README row per check, in both READMEs (the zh
one's row found by its own label)."""

from __future__ import annotations

import json
import math
import re

import pytest
import yaml

from conftest import REPO
from verl_p40.data import gsm8k
from verl_p40.perf import projection

RESULTS = REPO / "bench" / "results"
# (README.md's row label, README.zh-CN.md's)
ROWS = {
    "host": ("host memory", "内存"),
    "time": ("time on a P40", "P40 上的时间"),
    "changed": ("what it changed", "训练改变了什么"),
    "ppo": ("the seed tutorial's PPO", "种子教程的 PPO"),
    "build": ("first build", "第一次构建"),
}
READMES = ("README.md", "README.zh-CN.md")


def _json(path: str) -> dict:
    return json.loads((RESULTS / path).read_text(encoding="utf-8"))


def row(readme: str, key: str) -> str:
    """The table row of `readme` whose first cell is the row's label."""
    label = ROWS[key][READMES.index(readme)]
    text = (REPO / readme).read_text(encoding="utf-8")
    (found,) = [ln for ln in text.splitlines() if ln.startswith(f"| {label} |")]
    return found


def pct(fraction: float) -> str:
    return f"{100 * fraction:.1f}"


def p_value(p: float) -> str:
    return f"{p:.1e}".replace("e-0", "e-")  # 2.755e-11 -> 2.8e-11, 1.546e-06 -> 1.5e-6


def _default_steps() -> int:
    recipe = yaml.safe_load((REPO / "config" / "algorithms" / "grpo-gsm8k.yaml").read_text(encoding="utf-8"))
    return int(recipe["verl"]["trainer"]["total_training_steps"])


def has(text: str, *figures: str) -> list[str]:
    """The figures `text` lacks, each matched as a whole number (88.1 is not in 188.1 nor in 88.15)."""
    return [f for f in figures if not re.search(rf"(?<![\d.]){re.escape(f)}(?![\d])", text)]


P40_TIME = "p40-time-adopted-2026-12-06"  # the one source of the default run's P40 time (bench/p40_time.py)
# Every other place that states the default run's P40 time, and what of the figure it states
TIME_PLACES = {
    "docs/configuration.md": ("hours", "step", "limit"),
    "docs/results.md": ("hours", "step", "by_step"),
    "docs/multi-gpu.md": ("hours",),
    "docs/p40.md": ("step",),
    "docker-compose.yml": ("step", "limit", "worst"),
    "config/algorithms/grpo-gsm8k.yaml": ("hours",),
}


def p40_time() -> dict:
    return _json(f"{P40_TIME}/p40-time.json")


def _hours(span: dict) -> str:
    return f"{span['low']:.1f}-{span['high']:.1f}"  # 1.71-1.90 -> 1.7-1.9


def time_figures(figure: dict, parts: tuple[str, ...]) -> list[str]:
    """The figures a place states for `parts` of the one P40 time."""
    step, limit = figure["step_s"], figure["step_at_answer_limit_s"]
    wanted = {
        "hours": [_hours(figure["run_hours"])],
        "step": [f"{step['low']:.1f}-{step['high']:.1f}"],
        "limit": [f"{limit['high']:.1f}"],
        "worst": [f"{figure['worst_step_and_save_s']:.1f}", f"{figure['save_s']:.1f}"],
        "by_step": [f"{h['low']:.2f}-{h['high']:.2f}" for n, h in figure["hours_at_step"].items() if int(n) % 20 == 0],
    }
    return [f for part in parts for f in wanted[part]]


@pytest.mark.parametrize("readme", READMES)
def test_the_p40_time_is_the_one_figure(readme):
    """The row gives p40-time's hours, its steps at the corrected band (and the model's own figure), its validations
    and saves with their costs; the H200's minutes of the 60-step run."""
    figure = p40_time()
    steps = _default_steps()
    assert figure["steps"] == steps
    h200 = _json("horizon-2026-12-03/learning-2026-12-03.json")["training"]
    assert h200["steps"] == steps
    step = figure["step_s"]
    text = row(readme, "time")
    wanted = [_hours(figure["run_hours"]), str(steps), f"{step['low']:.1f}-{step['high']:.1f}"]
    wanted += [f"{step['projected']:.1f}", str(figure["validations"]), f"{figure['validation_s']:.1f}"]
    wanted += [str(figure["saves"]), f"{figure['save_s']:.1f}"]
    wanted += [str(round(h200["wall_s"] / 60))]
    assert not has(text, *wanted), (wanted, text)
    low, high = (round(-max(step["errors_pct"])), round(-min(step["errors_pct"])))
    assert not has(text, f"{low}-{high}"), text  # "11-20 % short"
    calibrations = step["source"].split("band: ", 1)[1].split("/", 1)[0]  # the band file's result folder
    assert P40_TIME in text and f"bench/results/{calibrations}/" in text, (calibrations, text)


@pytest.mark.parametrize("place", sorted(TIME_PLACES))
def test_every_other_place_quotes_the_one_p40_time(place):
    text = (REPO / place).read_text(encoding="utf-8")
    wanted = time_figures(p40_time(), TIME_PLACES[place])
    assert P40_TIME in text, place
    assert not has(text, *wanted), (place, wanted)


@pytest.mark.parametrize("place", [*READMES, *TIME_PLACES, ".env.example"])
def test_no_place_gives_another_hours_figure_for_the_default_run(place):
    """A "~X-Y h" (or P40 hours, 小时) span is the one figure, or one of the others p40-time gives, or not the
    default run's (an epoch, a lower bound of an older path: named in ELSEWHERE)."""
    figure = p40_time()
    limit = figure["run_hours_at_answer_limit"]
    ours = {_hours(figure["run_hours"]), f"{limit['low']:.2f}-{limit['high']:.2f}"}
    ours |= {f"{h['low']:.2f}-{h['high']:.2f}" for h in figure["hours_at_step"].values()}
    # results.md's record of 12-01's P40 path before the decoder (20 steps, an epoch, from the fast runs' steps), and
    # the default's 225-step epoch
    elsewhere = {"0.85-1.05", "9.9-12.3", "9.5-9.6", "4.2-4.6"}
    text = (REPO / place).read_text(encoding="utf-8")
    spans = re.findall(r"(\d+(?:\.\d+)?-\d+(?:\.\d+)?)\** ?(?:h\b|P40[ -]hours|小时)", text)
    assert not [s for s in spans if s not in ours | elsewhere], (place, spans)


@pytest.mark.parametrize("readme", READMES)
def test_what_it_changed_is_the_60_step_runs_scores_and_the_picture_is_that_run(readme):
    scored = _json("horizon-2026-12-03/horizon-2026-12-03.json")
    text = row(readme, "changed")
    assert "horizon-2026-12-03" in text
    by_step = {s["step"]: s for s in scored["steps"]}
    figures = [pct(scored["base"]["accuracy_flexible"])]
    figures += [pct(by_step[n]["accuracy"]["accuracy_flexible"]) for n in sorted(by_step)]
    figures += [str(n) for n in sorted(by_step)]
    last = by_step[max(by_step)]
    assert max(by_step) == _default_steps()
    figures.append(p_value(last["against_base"]["flexible"]["p_value"]))
    assert not has(text, *figures), (figures, text)
    page = (REPO / readme).read_text(encoding="utf-8")
    (picture,) = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page)
    assert picture.startswith("bench/results/horizon-2026-12-03/") and (REPO / picture).is_file()
    record = _json("horizon-2026-12-03/" + picture.rsplit("/", 1)[1].replace(".png", ".json"))
    assert record["training"]["steps"] == max(by_step)  # the picture's run is the table's


@pytest.mark.parametrize("readme", READMES)
def test_the_p40_path_sentence_quotes_the_20_step_run(readme):
    scored = _json("p40-path-2026-12-04/horizon-2026-12-04.json")
    last = max(scored["steps"], key=lambda s: s["step"])
    flexible = last["against_base"]["flexible"]
    figures = [
        pct(scored["base"]["accuracy_flexible"]),
        pct(last["accuracy"]["accuracy_flexible"]),
        f"+{pct(flexible['difference'])}",
        p_value(flexible["p_value"]),
        str(last["step"]),
    ]
    page = (REPO / readme).read_text(encoding="utf-8")
    (paragraph,) = [p for p in page.split("\n\n") if "p40-path-2026-12-04" in p and not p.startswith("|")]
    assert not has(paragraph, *figures), (figures, paragraph)


@pytest.mark.parametrize("readme", READMES)
def test_the_ppo_epoch_is_its_projected_step_times_a_default_epoch(readme):
    step = _json("speed-2026-12-03/random/ppo-p40.json")["p40_projection"]["step"]
    prompts = yaml.safe_load((REPO / "config" / "profiles" / "p40.yaml").read_text(encoding="utf-8"))["verl"]["data"]
    hours = projection.epoch_hours(step, int(prompts["train_batch_size"]))
    text = row(readme, "ppo")
    assert "speed-2026-12-03" in text
    assert not has(text, f"{gsm8k.EPOCH_ROWS:,}", f"{step:.1f}", f"{hours:.1f}", str(prompts["train_batch_size"])), text


@pytest.mark.parametrize("readme", READMES)
def test_the_first_build_is_the_committed_logs(readme):
    text = row(readme, "build")
    (log,) = re.findall(r"\((docker/e2e/results/first-build-[^)]+\.log)\)", text)
    seconds = int(re.search(r"^build took (\d+) s", (REPO / log).read_text(encoding="utf-8"), re.M).group(1))
    assert not has(text, str(math.ceil(seconds / 60))), (seconds, text)


@pytest.mark.parametrize("readme", READMES)
def test_the_multi_card_paragraph_divides_the_one_figure_by_the_projections_speedups(readme):
    """The "One, two or four cards" paragraph gives no hours of its own (the one-card figure is p40-time's): it divides
    that time by the speed-ups of the projection it names."""
    text = (REPO / readme).read_text(encoding="utf-8")
    heading = "### One, two or four cards" if readme == "README.md" else "### 一张、两张或四张卡"
    paragraph = text[text.index(heading) :].split("\n\n")[0]
    assert "multi-gpu-plan-2026-12-04" in paragraph
    rows = _json("multi-gpu-plan-2026-12-04/projection.json")["rows"]
    speedups = {(r["recipe"], r["p40s"]): f"{r['speedup_vs_one_p40']:.2f}" for r in rows}
    wanted = [speedups[(recipe, n)] for recipe in ("grpo-gsm8k", "ppo-gsm8k") for n in (2, 4)]
    assert not has(paragraph, *wanted), (readme, wanted)
    hours = [f"{r['p40_hours_for_the_run']:.2f}" for r in rows if r["p40s"] == 1]
    assert has(paragraph, *hours) == hours, (readme, hours)  # no uncalibrated one-card hours


@pytest.mark.parametrize("readme", READMES)
def test_the_host_memory_is_the_doctors_for_the_default_run_and_ppo_on_one_p40(readme):
    """The requirements row's figures are plan/budget.py's for the default and the seed's PPO planned on one P40, and
    its per-card worker term (measured: timing-pair-2026-12-06/host-memory.json), called an estimate."""
    from verl_p40.plan import budget
    from verl_p40.plan.inputs import model_config
    from verl_p40.plan.planner import plan
    from verl_p40.plan.run_options import RunOptions

    parameters = budget.parameter_count(model_config(REPO / "tests" / "fixtures" / "qwen2.5-0.5b-instruct"))
    runs = (RunOptions(profile="p40"), RunOptions(profile="p40", algorithm="ppo"))  # the default, the seed's PPO
    needs = [budget.needs(plan(options).config(), parameters) for options in runs]
    assert {n.host_workers for n in needs} == {1}
    figures = [f"{n.host_bytes / 1e9:.1f}" for n in needs] + [f"{budget.HOST_PER_GPU_WORKER_BYTES / 1e9:.1f}"]
    text = row(readme, "host")
    assert not has(text, *figures), (figures, text)
    assert ("estimate" if readme == "README.md" else "估计") in text
