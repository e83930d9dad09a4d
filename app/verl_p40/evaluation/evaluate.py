"""`verl-p40 eval`: what training changed. Greedy GSM8K answers of a model (and optionally a second one), scored
with `verl_p40.reward`, written as report.json, answers.jsonl, report.md and curves.png. Two models are compared
question by question, each difference with its paired sign test (`verl_p40.evaluation.stats`); the report names the
dtype the answers were generated in (fp32 unless --dtype says otherwise).

A model is a Hugging Face folder, a verl FSDP checkpoint folder (`.../global_step_N/actor`) or `latest`
(`verl_p40.models.checkpoints` merges those); answers come from `verl_p40.evaluation.generation`. answers.jsonl is
appended per batch, so a rerun continues where one stopped (`verl_p40.evaluation.answers`: only with the same
questions, models and settings). The reports are written together, replacing eval's own earlier ones and nothing else
(`verl_p40.outputs`).
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from verl_p40 import reward
from verl_p40.evaluation import answers, stats
from verl_p40.evaluation.curves import figure
from verl_p40.evaluation.generation import (
    HfGenerator,
    Question,
    VllmGenerator,
    check_device,
    heldout_file,
    load_questions,
    pick_engine,
    torch_dtype,
)
from verl_p40.evaluation.options import EvalOptions
from verl_p40.gpu.plots import save
from verl_p40.models.checkpoints import resolve_model
from verl_p40.outputs import OutputFolder, made

REPORTS = ("report.json", "report.md", "curves.png")

# ------------------------------------------------------------------------------------------------ answers


def score(answer: str, ground_truth: str) -> dict:
    return reward.score_parts(answer, ground_truth)  # what the trainer's reward logs as its parts


def _batches(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def generate_answers(
    models: dict[str, Path],
    questions: list[Question],
    folder: OutputFolder,
    done: dict[int, dict],
    batch_size: int,
    device: str,
    max_new_tokens: int,
    engine: type,
    settings: dict,
) -> dict[int, dict]:
    """Append one line per question (every model's answer and scores) to answers.jsonl, skipping done questions."""
    from tqdm import tqdm

    pending = [q for q in questions if q.index not in done]
    if not pending:
        return done
    dtype = settings["dtype"]
    generators = {label: engine(path_, device, max_new_tokens, dtype) for label, path_ in models.items()}
    with folder.reasons(f"write {answers.ANSWERS}"), made(folder.folder):  # a first batch that fails leaves no folder
        with (
            answers.Appender(folder.folder / answers.ANSWERS) as add,
            tqdm(total=len(pending), desc="eval", unit="q") as bar,
        ):
            for batch in _batches(pending, batch_size):
                per_model = {}
                for label, generate in generators.items():
                    started = time.perf_counter()
                    answered = generate([q.prompt for q in batch])
                    seconds = (time.perf_counter() - started) / len(batch)
                    per_model[label] = (answered, seconds)
                records = [_record(q, i, per_model, settings) for i, q in enumerate(batch)]
                add([json.dumps(record, ensure_ascii=False) + "\n" for record in records])
                done.update((record["index"], record) for record in records)
                bar.update(len(batch))
    return done


def _record(q: Question, i: int, per_model: dict, settings: dict) -> dict:
    record = {
        "index": q.index,
        "question": q.question,
        "prompt": q.prompt[-1]["content"],
        "ground_truth": q.ground_truth,
        "dtype": settings["dtype"],
        "settings": settings,
        "models": {},
    }
    for label, (answered, seconds) in per_model.items():
        text, tokens = answered[i]
        record["models"][label] = {
            "answer": text,
            "response_tokens": tokens,
            "seconds": round(seconds, 4),
            **score(text, q.ground_truth),
        }
    return record


# ------------------------------------------------------------------------------------------------ report


def summarise(records: list[dict], labels: list[str]) -> dict:
    out = {}
    for label in labels:
        rows = [r["models"][label] for r in records]
        n = len(rows)
        seconds = sum(r["seconds"] for r in rows)
        out[label] = {
            "questions": n,
            "accuracy_strict": round(sum(r["strict"] for r in rows) / n, 4),
            "accuracy_flexible": round(sum(r["flexible"] for r in rows) / n, 4),
            "format_rate": round(sum(r["format"] for r in rows) / n, 4),
            "mean_response_tokens": round(sum(r["response_tokens"] for r in rows) / n, 1),
            "samples_per_s": round(n / seconds, 3) if seconds else None,
        }
    return out


KINDS = {"strict": "strict accuracy", "flexible": "flexible accuracy", "format": "format rate"}


def paired_differences(records: list[dict], first: str, second: str) -> dict:
    """Every score kind of `second` against `first` on the same questions: the difference, the questions only one of
    them scores on, and the sign test's p-value."""
    out = {}
    for kind in KINDS:
        pairs = [(r["models"][first], r["models"][second]) for r in records]
        test = stats.paired(pairs, kind)
        n = len(pairs)
        out[kind] = {
            "difference": round(sum(b[kind] - a[kind] for a, b in pairs) / n, 4) if n else 0.0,
            f"{second}_only": test["second_higher"],
            f"{first}_only": test["first_higher"],
            "p_value": test["p_value"],
        }
    return out


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>")


def _comparison_lines(records: list[dict], labels: list[str], examples: int, comparison: dict) -> list[str]:
    """report.md's paired table of two models, and the first `examples` questions their scores differ on."""
    a, b = labels
    lines = [
        "",
        "Paired on the same questions (sign test over the questions where only one model scores):",
        "",
        f"| score | difference ({b} - {a}) | only {b} | only {a} | p (two-sided) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for kind, title in KINDS.items():
        c = comparison[kind]
        lines.append(f"| {title} | {c['difference']:+.1%} | {c[f'{b}_only']} | {c[f'{a}_only']} | {c['p_value']:.3g} |")
    diff = [
        r
        for r in records
        if r["models"][a]["flexible"] != r["models"][b]["flexible"]
        or r["models"][a]["strict"] != r["models"][b]["strict"]
    ]
    lines += ["", f"The models' strict or flexible scores differ on {len(diff)} questions.", ""]
    if diff:
        lines += [
            f"## The first {min(examples, len(diff))} of them",
            "",
            f"| # | question | answer | {a} | {b} |",
            "| --- | --- | --- | --- | --- |",
        ]
        for r in diff[:examples]:
            cells = [
                f"{_md_cell(r['models'][x]['answer'])}<br>**strict {r['models'][x]['strict']:g}, flexible "
                f"{r['models'][x]['flexible']:g}**"
                for x in (a, b)
            ]
            lines.append(
                f"| {r['index']} | {_md_cell(r['question'])} | {r['ground_truth']} | {cells[0]} | {cells[1]} |"
            )
    return lines


def markdown(
    summary: dict,
    records: list[dict],
    labels: list[str],
    examples: int,
    models: dict[str, str],
    curves: bool,
    dtype: str = "fp32",
    comparison: dict | None = None,
) -> str:
    lines = ["# GSM8K evaluation", "", f"{len(records)} questions, greedy decoding in {dtype}.", ""]
    lines += [
        "| model | path | strict accuracy | flexible accuracy | format rate | mean response tokens | samples/s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label in labels:
        s = summary[label]
        lines.append(
            f"| {label} | `{models[label]}` | {s['accuracy_strict']:.1%} | {s['accuracy_flexible']:.1%} | "
            f"{s['format_rate']:.1%} | {s['mean_response_tokens']} | {s['samples_per_s']} |"
        )
    if len(labels) == 2 and comparison:
        lines += _comparison_lines(records, labels, examples, comparison)
    if curves:
        lines += ["", "![training curves](curves.png)"]
    return "\n".join(lines) + "\n"


def run(options: EvalOptions) -> dict:
    """`verl-p40 eval` with its options: the answers of `options.model` (and `options.compare`) on the test file,
    scored, compared and written as the reports; the report's dict."""
    import torch

    device = options.device
    device = check_device(device) if device else ("cuda" if torch.cuda.is_available() else "cpu")
    generator = pick_engine(options.engine, device)  # the device, the engine and the dtype: said before any model
    torch_dtype(options.dtype, device)
    data = heldout_file(Path(options.data))
    questions = load_questions(data, options.limit)  # before anything is merged or written: a bad file changes nothing
    out, logs = Path(options.out), Path(options.logs) if options.logs else None
    folder = OutputFolder(out, "--out", "eval", adopt=lambda name, _: name == answers.ANSWERS)  # its lines vouch
    folder.check([answers.ANSWERS, *REPORTS[: 3 if logs else 2]])
    with folder.writer():  # one eval per folder: a second is refused, never adds to the first's answers
        found = answers.read(out / answers.ANSWERS)
        specs = (
            {"base": options.model} if options.compare is None else {"base": options.model, "trained": options.compare}
        )
        models = {label: resolve_model(spec, Path(options.checkpoints)) for label, spec in specs.items()}
        engine = "vllm" if generator is VllmGenerator else "hf"
        settings = answers.settings(models, options.dtype, options.max_new_tokens, engine)
        # the decoder's answers are generate()'s: the same engine for the answers' settings
        if generator is HfGenerator:
            generator = functools.partial(HfGenerator, decode=options.decode)
        done = _answered(out, found, questions, settings)
        done = generate_answers(
            models, questions, folder, done, options.batch_size, device, options.max_new_tokens, generator, settings
        )
        wanted = {q.index for q in questions}
        records = [done[i] for i in sorted(done) if i in wanted]
        run_facts = {"data": str(data), "device": device, "engine": settings["engine"]}
        return _write_reports(folder, records, models, options, logs, run_facts)


def _answered(out: Path, found: dict, questions: list[Question], settings: dict) -> dict[int, dict]:
    """The answers (`found` in answers.jsonl) an earlier run of the same questions, models and settings left; another
    run's are set aside (kept, never mixed in)."""
    problem = answers.mismatch(out / answers.ANSWERS, found, questions, settings)
    if problem:  # another run's answers (more training since, other --data or settings)
        kept = answers.set_aside(out / answers.ANSWERS)
        print(f"[eval] {problem}: kept as {kept.name}; evaluating from the start", file=sys.stderr, flush=True)
        return {}
    return {index: record for index, (_, record) in found.items()}


def _write_reports(
    folder: OutputFolder,
    records: list[dict],
    models: dict[str, Path],
    options: EvalOptions,
    logs: Path | None,
    run: dict,
) -> dict:
    """report.json, report.md and curves.png (with trainer logs), written together; the report's dict."""
    labels = list(models)
    summary = summarise(records, labels)
    comparison = paired_differences(records, *labels) if len(labels) == 2 else None
    curves = figure(logs) if logs else None
    report = {
        "data": run["data"],
        "questions": len(records),
        "device": run["device"],
        "dtype": options.dtype,
        "max_new_tokens": options.max_new_tokens,
        "engine": run["engine"],
        "models": {label: {"path": str(models[label]), **summary[label]} for label in labels},
        "comparison": comparison,
        "curves": "curves.png" if curves else None,
    }
    paths = {k: str(v) for k, v in models.items()}
    text = markdown(summary, records, labels, options.examples, paths, bool(curves), options.dtype, comparison)
    with folder.write(list(REPORTS[: 3 if curves else 2])) as temps:
        temps[0].write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        temps[1].write_text(text, encoding="utf-8")
        if curves:
            save(curves, temps[2], dpi=100)
    return report
