"""Greedy GSM8K answers for `verl-p40 eval`: the questions from verl's parquet, and two engines (Hugging Face
`generate()` everywhere, vLLM where installed on sm_70+)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from verl_p40 import UserError
from verl_p40.plan import capabilities


@dataclass
class Question:
    index: int
    prompt: list[dict]
    ground_truth: str
    question: str


def heldout_file(path: Path) -> Path:
    """The parquet file `eval --data` names: a file as it is, or the test split of a folder `verl-p40 prep` wrote (a
    folder holds train, test and val: reading all of them would evaluate training questions)."""
    if not path.is_dir():
        return path
    test = path / "test.parquet"
    if not test.is_file():
        raise UserError(
            f"{path}: a folder without test.parquet; pass the folder `verl-p40 prep` wrote, or a parquet file of "
            "verl's RL schema"
        )
    return test


def load_questions(path: Path, limit: int | None) -> list[Question]:
    import pyarrow.parquet as pq

    fix = "make it with verl-p40 prep"
    try:
        table = pq.read_table(path)
    except Exception as exc:
        raise UserError(f"{path}: cannot read parquet ({exc})") from None
    missing = [c for c in ("prompt", "reward_model") if c not in table.column_names]
    if missing:  # a table of another kind (the seed tutorial's prompt/response/reward, GSM8K's question/answer)
        raise UserError(f"{path}: not in verl's RL schema (no column {', '.join(missing)}); {fix}")
    if table.num_rows == 0:  # no question: no accuracy to report
        raise UserError(f"{path}: no rows; {fix}")
    rows = table.to_pylist()
    out: list[Question] = []
    seen: dict[int, int] = {}
    for i, row in enumerate(rows[: limit or None]):
        try:
            question = _question(row, i)
        except (KeyError, TypeError, IndexError, ValueError) as exc:
            reason = f"no {exc.args[0]!r}" if isinstance(exc, KeyError) else str(exc)
            raise UserError(f"{path}: row {i + 1}: not in verl's RL schema ({reason}); {fix}") from None
        out.append(question)
        index = out[-1].index
        if index in seen:  # answers are kept by index: a second row of it would overwrite the first's
            raise UserError(
                f"{path}: row {i + 1}: extra_info.index {index} is also row {seen[index]}'s; pass one split, "
                "as verl-p40 prep wrote it"
            )
        seen[index] = i + 1
    return out


def _question(row: dict, i: int) -> Question:
    """Row `i` as a Question; a ValueError says what verl's trainer (and the score) could not use."""
    extra = row.get("extra_info") or {}  # verl's schema allows a null extra_info
    if not isinstance(extra, dict):
        raise ValueError("extra_info is not a mapping")
    index = extra.get("index", i)
    if isinstance(index, bool) or not isinstance(index, int):
        raise ValueError(f"extra_info.index {index!r} is not a whole number")
    prompt = row["prompt"]
    if not isinstance(prompt, (list, tuple)) or not prompt:
        raise ValueError("its prompt is not a non-empty list of chat messages")
    if not all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in prompt):
        raise ValueError("a prompt message has no text content")
    scored = row["reward_model"]
    truth = scored.get("ground_truth") if isinstance(scored, dict) else None
    if truth is None or not str(truth).strip():  # str(None) would be scored as the answer "None"
        raise ValueError("no reward_model.ground_truth")
    return Question(
        index=index,
        prompt=list(prompt),
        ground_truth=str(truth),
        question=str(extra.get("question") or prompt[-1]["content"]),
    )


def devices() -> list[str]:
    """The devices of this machine eval can generate on: cpu, and cuda:N for each GPU torch sees."""
    import torch

    return ["cpu", *(f"cuda:{i}" for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0))]


def check_device(name: str, origin: str = "--device") -> str:
    """`name` when it is a device of this machine (cpu, cuda, cuda:N); else the one line naming the devices it has.
    Said before any model is read: torch would otherwise stop with a traceback once the model was loaded."""
    import torch

    here = devices()
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError, TypeError):
        device = None
    if device is not None and device.type == "cpu" and device.index in (None, 0):
        return name
    gpu = device is not None and device.type == "cuda"
    if gpu and (len(here) > 1 if device.index is None else str(device) in here):  # cuda: any GPU; cuda:N: that one
        return name
    what = "not a device name" if device is None else "not a device of this machine"
    raise UserError(
        f"{origin} {name}: {what}; this machine has {', '.join(here)}: use one of them, or leave {origin} out "
        f"({'cuda' if len(here) > 1 else 'cpu'} here)"
    )


def torch_dtype(name: str, device: str):
    """The torch dtype `verl-p40 eval --dtype` names. fp32 is the default because greedy decoding in bf16 does not
    repeat (two evaluations of one model gave different answers to 98 of 256 questions), so two models compared in
    bf16 differ partly by rounding; bf16 needs a GPU of compute capability 8.0 or newer (or the CPU)."""
    import torch

    if name == "bf16" and device.startswith("cuda"):
        sm = capabilities.of(*torch.cuda.get_device_capability(device))
        if not capabilities.has("bf16", sm):
            raise UserError(
                f"--dtype bf16: this GPU is {capabilities.name(sm)} and has no bf16 "
                f"({capabilities.name(capabilities.MIN_SM['bf16'])} and newer); use fp32"
            )
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


class HfGenerator:
    """Greedy batched generation with Hugging Face transformers (left padding, the model's chat template).

    Plain greedy decoding of the policy the trainer optimises: no repetition penalty, whatever the checkpoint's
    generation_config.json suggests (Qwen2.5's says 1.05), as the vLLM engine and verl's validation decode. The
    tokens are generate()'s, decoded by the rollout's decoder (patches/p40_decode.py: a static KV cache, the step of
    one token replayed as a CUDA graph on a GPU)."""

    def __init__(self, model_dir: Path, device: str, max_new_tokens: int, dtype: str = "fp32", decode: str = "auto"):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        self.torch, self.decode = torch, decode  # decode: the decoder's mode (p40_decode), off = generate() itself
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir), padding_side="left")
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.dtype = torch_dtype(dtype, device)
        attn = "sdpa"
        self.model = (
            AutoModelForCausalLM.from_pretrained(str(model_dir), torch_dtype=self.dtype, attn_implementation=attn)
            .to(device)
            .eval()
        )
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
        from verl_p40.patches.p40_decode import generator  # the rollout's decoder: generate()'s answers, faster

        with self.torch.no_grad():
            out = generator(self.model, {"p40_decode": self.decode})(
                **batch,
                max_new_tokens=self.max_new_tokens,
                do_sample=False,
                repetition_penalty=1.0,
                eos_token_id=self.eos,
                pad_token_id=self.tokenizer.pad_token_id,
            )
        out = getattr(out, "sequences", out)  # generate() itself (a model the decoder does not take) gives a tensor
        results = []
        for row in out[:, batch["input_ids"].shape[1] :]:
            ids = row.tolist()
            length = next((i + 1 for i, t in enumerate(ids) if t in self.eos), len(ids))
            results.append((self.tokenizer.decode(ids[:length], skip_special_tokens=True), length))
        return results


class VllmGenerator:
    """Greedy generation with vLLM (sm_70+, in the -vllm image variant: docs/image.md)."""

    def __init__(self, model_dir: Path, device: str, max_new_tokens: int, dtype: str = "fp32"):
        from transformers import AutoTokenizer
        from vllm import LLM, SamplingParams

        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self.llm = LLM(
            model=str(model_dir), dtype=torch_dtype(dtype, device), gpu_memory_utilization=0.5, enforce_eager=True
        )
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
    capable = (
        device.startswith("cuda")
        and torch.cuda.is_available()
        and capabilities.has("vllm", capabilities.of(*torch.cuda.get_device_capability(device)))
    )
    if engine == "vllm":
        if not (has_vllm and capable):
            raise UserError(
                "--engine vllm needs the vllm package and a GPU of compute capability "
                f"{capabilities.MIN_SM['vllm']:.1f} or newer"
            )
        return VllmGenerator
    if engine == "auto" and has_vllm and capable:
        return VllmGenerator
    return HfGenerator
