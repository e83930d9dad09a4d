"""`verl-p40 eval`: what PPO changed. Greedy GSM8K answers of a model (and optionally a second one), scored with
`verl_p40.reward`, written as report.json, answers.jsonl, report.md and curves.png.

A model is a Hugging Face folder, a verl FSDP checkpoint folder (`.../global_step_N/actor`, merged once with verl's
own `verl.model_merger` into `.../actor/merged_hf_fp32`, kept there as a cache), or `latest` (the newest checkpoint
under the checkpoints folder). answers.jsonl is appended per batch, so a rerun continues where one stopped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from verl_p40 import UserError, reward
from verl_p40.atomic import write_text

MERGED = "merged_hf_fp32"


# ------------------------------------------------------------------------------------------------ models


def latest_checkpoint(root: Path) -> Path:
    """The actor folder of the newest `global_step_N` under `root` (any experiment), per verl's tracker file."""
    best: tuple[float, Path] | None = None
    for tracker in Path(root).glob("**/latest_checkpointed_iteration.txt"):
        step = tracker.read_text().strip()
        actor = tracker.parent / f"global_step_{step}" / "actor"
        if actor.is_dir() and (best is None or tracker.stat().st_mtime > best[0]):
            best = (tracker.stat().st_mtime, actor)
    if best is None:
        raise UserError(f"{root}: no verl checkpoint (latest_checkpointed_iteration.txt) found; train first")
    return best[1]


def is_fsdp_checkpoint(path: Path) -> bool:
    return any(path.glob("model_world_size_*_rank_*.pt"))


def merge_command(actor: Path, target: Path) -> list[str]:
    return [sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp",
            "--local_dir", str(actor), "--target_dir", str(target)]


def resolve_model(spec: str, checkpoints: Path) -> Path:
    """A Hugging Face model folder for `spec`, merging a verl FSDP checkpoint first when needed."""
    path = latest_checkpoint(checkpoints) if spec == "latest" else Path(spec)
    if (path / "config.json").is_file() and not is_fsdp_checkpoint(path):
        from verl_p40.fetch import local_problems

        problems = local_problems(path)
        if problems:
            raise UserError(f"{path}: not a complete model folder: {'; '.join(problems[:3])}")
        return path
    if not is_fsdp_checkpoint(path):
        raise UserError(f"{path}: neither a Hugging Face model folder (config.json) nor a verl FSDP checkpoint")
    target = path / MERGED
    if (target / "config.json").is_file() and any(target.glob("*.safetensors")):
        return target
    print(f"[eval] merging {path} with verl's model merger into {target} (fp32)", flush=True)
    staging = path / f".{MERGED}.partial"
    env = {**os.environ, "VERL_MERGE_DTYPE": "fp32"}
    result = subprocess.run(merge_command(path, staging), env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise UserError(f"{path}: verl's model merger failed:\n{result.stderr[-3000:]}")
    from verl_p40 import adapters

    if (staging / adapters.ADAPTER).is_dir():
        import shutil

        folded = path / f".{MERGED}.lora.partial"
        shutil.rmtree(folded, ignore_errors=True)
        print(f"[eval] {adapters.fold(staging, path, folded)}", flush=True)
        shutil.rmtree(staging)
        staging = folded
    os.replace(staging, target)
    return target


# ------------------------------------------------------------------------------------------------ generation


@dataclass
class Question:
    index: int
    prompt: list[dict]
    ground_truth: str
    question: str


def load_questions(path: Path, limit: int | None) -> list[Question]:
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as exc:
        raise UserError(f"{path}: cannot read parquet ({exc})") from None
    out = []
    for i, row in enumerate(rows[: limit or None]):
        try:
            extra = row.get("extra_info") or {}  # verl's schema allows a null extra_info
            out.append(Question(index=int(extra.get("index", i)), prompt=list(row["prompt"]),
                                ground_truth=str(row["reward_model"]["ground_truth"]),
                                question=str(extra.get("question") or row["prompt"][-1]["content"])))
        except (KeyError, TypeError, IndexError, ValueError) as exc:
            raise UserError(f"{path}: row {i + 1}: not in verl's RL schema ({exc}); make it with verl-p40 prep") from None
    return out


def pick_dtype(device: str):
    """fp32 below sm_80 (Pascal/Volta/Turing have no bf16) and on the CPU; bf16 on Ampere and newer."""
    import torch

    if device.startswith("cuda") and torch.cuda.get_device_capability(device) >= (8, 0):
        return torch.bfloat16
    return torch.float32


class Generator:
    """Greedy batched generation with Hugging Face transformers (left padding, the model's chat template).

    Plain greedy decoding of the policy the trainer optimises: no repetition penalty, whatever the checkpoint's
    generation_config.json suggests (Qwen2.5's says 1.05), as the vLLM engine and verl's validation decode."""

    def __init__(self, model_dir: Path, device: str, max_new_tokens: int):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir), padding_side="left")
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.dtype = pick_dtype(device)
        attn = "sdpa"
        self.model = AutoModelForCausalLM.from_pretrained(str(model_dir), torch_dtype=self.dtype,
                                                          attn_implementation=attn).to(device).eval()
        eos = {self.tokenizer.eos_token_id}
        try:
            generation = GenerationConfig.from_pretrained(str(model_dir))
            ids = generation.eos_token_id
            eos |= set(ids if isinstance(ids, list) else [ids]) - {None}
        except OSError:
            pass
        self.eos = sorted(eos)
        self.device, self.max_new_tokens = device, max_new_tokens

    def __call__(self, prompts: list[list[dict]]) -> list[tuple[str, int]]:
        texts = [self.tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts]
        batch = self.tokenizer(texts, return_tensors="pt", padding=True).to(self.device)
        with self.torch.no_grad():
            out = self.model.generate(**batch, max_new_tokens=self.max_new_tokens, do_sample=False,
                                      repetition_penalty=1.0, eos_token_id=self.eos,
                                      pad_token_id=self.tokenizer.pad_token_id)
        results = []
        for row in out[:, batch["input_ids"].shape[1]:]:
            ids = row.tolist()
            length = next((i + 1 for i, t in enumerate(ids) if t in self.eos), len(ids))
            results.append((self.tokenizer.decode(ids[:length], skip_special_tokens=True), length))
        return results


class VllmGenerator:
    """Greedy generation with vLLM (sm_70+, where the image was built with INSTALL_VLLM=1)."""

    def __init__(self, model_dir: Path, device: str, max_new_tokens: int):
        import torch
        from transformers import AutoTokenizer
        from vllm import LLM, SamplingParams

        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        dtype = "float32" if pick_dtype(device) == torch.float32 else "bfloat16"
        self.llm = LLM(model=str(model_dir), dtype=dtype, gpu_memory_utilization=0.5, enforce_eager=True)
        self.params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens)

    def __call__(self, prompts: list[list[dict]]) -> list[tuple[str, int]]:
        texts = [self.tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts]
        outputs = self.llm.generate(texts, self.params, use_tqdm=False)
        return [(o.outputs[0].text, len(o.outputs[0].token_ids)) for o in outputs]


def pick_engine(engine: str, device: str) -> type:
    """hf everywhere; vllm when asked for, or with auto where vLLM is installed and the GPU is sm_70 or newer."""
    import importlib.util

    import torch

    has_vllm = importlib.util.find_spec("vllm") is not None
    capable = device.startswith("cuda") and torch.cuda.is_available() and torch.cuda.get_device_capability(device) >= (7, 0)
    if engine == "vllm":
        if not (has_vllm and capable):
            raise UserError("--engine vllm needs the vllm package and a GPU of compute capability 7.0 or newer")
        return VllmGenerator
    if engine == "auto" and has_vllm and capable:
        return VllmGenerator
    return Generator


def score(answer: str, ground_truth: str) -> dict:
    return {
        "strict": reward.compute_score("openai/gsm8k", answer, ground_truth),
        "flexible": reward.compute_score("openai/gsm8k", answer, ground_truth, method="flexible"),
        "format": 1.0 if reward.has_format(answer) else 0.0,
    }


def _batches(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def read_answers(path: Path) -> dict[int, dict]:
    done: dict[int, dict] = {}
    if path.exists():
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                raise UserError(f"{path}:{lineno}: not valid JSON; remove the line or the file to start over") from None
            done[int(record["index"])] = record
    return done


def generate_answers(models: dict[str, Path], questions: list[Question], out: Path, batch_size: int,
                     device: str, max_new_tokens: int, engine: type = Generator) -> dict[int, dict]:
    """Append one line per question (every model's answer and scores) to answers.jsonl, skipping done questions."""
    from tqdm import tqdm

    path = out / "answers.jsonl"
    done = read_answers(path)
    if done and any(set(r["models"]) != set(models) for r in done.values()):
        raise UserError(f"{path}: written for other models ({sorted(next(iter(done.values()))['models'])}); "
                        "use another --out or remove it")
    pending = [q for q in questions if q.index not in done]
    if not pending:
        return done
    generators = {label: engine(path_, device, max_new_tokens) for label, path_ in models.items()}
    with open(path, "a", encoding="utf-8") as handle, tqdm(total=len(pending), desc="eval", unit="q") as bar:
        for batch in _batches(pending, batch_size):
            per_model = {}
            for label, generate in generators.items():
                started = time.perf_counter()
                answers = generate([q.prompt for q in batch])
                seconds = (time.perf_counter() - started) / len(batch)
                per_model[label] = (answers, seconds)
            for i, q in enumerate(batch):
                record = {"index": q.index, "question": q.question, "prompt": q.prompt[-1]["content"],
                          "ground_truth": q.ground_truth, "models": {}}
                for label, (answers, seconds) in per_model.items():
                    text, tokens = answers[i]
                    record["models"][label] = {"answer": text, "response_tokens": tokens,
                                               "seconds": round(seconds, 4), **score(text, q.ground_truth)}
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
                done[q.index] = record
            handle.flush()
            bar.update(len(batch))
    return done


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


def discordant(pairs: Iterable[tuple[dict, dict]], kind: str) -> tuple[int, int]:
    """Over (first, second) scores of the same questions: how often only the second is right, and only the first."""
    better = worse = 0
    for first, second in pairs:
        better += second[kind] > first[kind]
        worse += second[kind] < first[kind]
    return better, worse


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>")


def markdown(summary: dict, records: list[dict], labels: list[str], examples: int, models: dict[str, str],
             curves: bool) -> str:
    lines = ["# GSM8K evaluation", "", f"{len(records)} questions, greedy decoding.", ""]
    lines += ["| model | path | strict accuracy | flexible accuracy | format rate | mean response tokens | samples/s |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for label in labels:
        s = summary[label]
        lines.append(f"| {label} | `{models[label]}` | {s['accuracy_strict']:.1%} | {s['accuracy_flexible']:.1%} | "
                     f"{s['format_rate']:.1%} | {s['mean_response_tokens']} | {s['samples_per_s']} |")
    if len(labels) == 2:
        a, b = labels
        diff = [r for r in records if r["models"][a]["flexible"] != r["models"][b]["flexible"]
                or r["models"][a]["strict"] != r["models"][b]["strict"]]
        better, worse = discordant(((r["models"][a], r["models"][b]) for r in diff), "flexible")
        lines += ["", f"The models' scores differ on {len(diff)} questions: {b} is right where {a} is wrong on "
                  f"{better}, wrong where {a} is right on {worse} (flexible scoring).", ""]
        if diff:
            lines += [f"## The first {min(examples, len(diff))} of them", "",
                      f"| # | question | answer | {a} | {b} |", "| --- | --- | --- | --- | --- |"]
            for r in diff[:examples]:
                cells = [f"{_md_cell(r['models'][x]['answer'])}<br>**strict {r['models'][x]['strict']:g}, flexible "
                         f"{r['models'][x]['flexible']:g}**" for x in (a, b)]
                lines.append(f"| {r['index']} | {_md_cell(r['question'])} | {r['ground_truth']} | {cells[0]} | {cells[1]} |")
    if curves:
        lines += ["", "![training curves](curves.png)"]
    return "\n".join(lines) + "\n"


CURVES = [
    ("critic/score/mean", "reward (score) mean"),
    ("actor/reward_kl_penalty", "KL to reference (in reward)"),
    ("actor/pg_loss", "actor (policy) loss"),
    ("critic/vf_loss", "critic (value) loss"),
    ("response_length/mean", "response length (tokens)"),
]


def plot_curves(logs: Path, out: Path) -> bool:
    """Training curves from the trainer's console logs (logs/train-*.log) and the monitor's gpu.csv."""
    from verl_p40.metrics import read_steps

    steps: dict[int, dict] = {}
    for log in sorted(Path(logs).glob("train-*.log")):
        for record in read_steps(log):
            steps[int(record["step"])] = record
    gpu_csv = Path(logs) / "gpu" / "gpu.csv"
    if not steps and not gpu_csv.exists():
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(key, title) for key, title in CURVES if any(key in s for s in steps.values())]
    count = len(panels) + (1 if gpu_csv.exists() else 0)
    fig, axes = plt.subplots(count, 1, figsize=(9, 2.2 * count), squeeze=False)
    ordered = [steps[k] for k in sorted(steps)]
    for ax, (key, title) in zip(axes[:, 0], panels):
        points = [(s["step"], s[key]) for s in ordered if key in s]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker=".", linewidth=1)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("PPO step", fontsize=8)
    if gpu_csv.exists():
        from verl_p40.monitor import read_gpu_csv

        samples = read_gpu_csv(gpu_csv)
        ax = axes[-1, 0]
        start = min((s.ts for s in samples), default=0.0)
        for gpu in sorted({s.gpu for s in samples}):
            rows = [s for s in samples if s.gpu == gpu]
            ax.plot([(s.ts - start) / 60 for s in rows],
                    [(s.memory_used_bytes or 0) / 1e9 for s in rows], label=f"GPU {gpu}")
        peak = max(((s.memory_used_bytes or 0) for s in samples), default=0) / 1e9
        ax.set_title(f"GPU memory used (gpu-monitor), peak {peak:.2f} GB", fontsize=9)
        ax.set_xlabel("minutes", fontsize=8)
    fig.tight_layout()
    from verl_p40.atomic import staged

    with staged([out]) as (temp,):
        fig.savefig(temp, format="png", dpi=100)
    plt.close(fig)
    return True


def run(model: str, compare: str | None, data: Path, out: Path, limit: int | None, batch_size: int,
        max_new_tokens: int, checkpoints: Path, logs: Path | None, device: str | None, examples: int,
        engine: str = "auto") -> dict:
    import torch

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    out.mkdir(parents=True, exist_ok=True)
    specs = {"base": model} if compare is None else {"base": model, "trained": compare}
    models = {label: resolve_model(spec, checkpoints) for label, spec in specs.items()}
    questions = load_questions(data, limit)
    generator = pick_engine(engine, device)
    done = generate_answers(models, questions, out, batch_size, device, max_new_tokens, generator)
    wanted = {q.index for q in questions}
    records = [done[i] for i in sorted(done) if i in wanted]
    labels = list(models)
    summary = summarise(records, labels)
    curves = plot_curves(logs, out / "curves.png") if logs else False
    report = {"data": str(data), "questions": len(records), "device": device, "max_new_tokens": max_new_tokens,
              "engine": "vllm" if generator is VllmGenerator else "hf",
              "models": {label: {"path": str(models[label]), **summary[label]} for label in labels},
              "curves": "curves.png" if curves else None}
    write_text(out / "report.json", json.dumps(report, indent=2) + "\n")
    write_text(out / "report.md", markdown(summary, records, labels, examples, {k: str(v) for k, v in models.items()},
                                           curves))
    return report
