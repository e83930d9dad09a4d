"""How long a PPO/GRPO step takes on another GPU: each phase's FLOPs and bytes from the run's own token counts, over a
card's constants.

Model (per phase, fp32, no padding removal, so every sequence runs at the full prompt+response width, or with
trim_padding (patches/p40_trim.py) at the step's longest prompt + longest response, a bound for every micro-batch;
where the run logged the rows x columns its passes ran on (perf/p40_tokens/*, the patch set's count), those tokens):
- forward passes (old log-probs, reference, values): 2 x matmul parameters x padded tokens, plus attention
  (4 x width^2 x hidden per layer and sequence) and the logits' memory traffic (vocab x tokens x 4 bytes, 3 passes);
- updates: forward + backward (2 forwards' FLOPs) + the recomputation of gradient checkpointing where it is on = 4
  forwards' FLOPs (3 without it), plus the Adam step's memory traffic (16 bytes read + 12 written per parameter);
- host transfers of offloaded state over PCIe (optimizer states, critic and reference weights);
- on several GPUs each does its share of the sequences, and FSDP (full sharding) moves the weights between them: an
  all-gather per forward micro-batch, and an all-gather for the forward, another for the backward and a
  reduce-scatter of the gradients per update micro-batch, (N-1)/N of the fp32 weights each, over the card's link;
- generation (HF rollout): a prefill, then one decoding step per generated token whose GPU time is the larger of its
  FLOPs and its memory traffic (the weights once, the KV cache), and never less than the host's own per-token overhead
  (Python and kernel launches of transformers' generate), which is measured on the machine that ran the steps.
Phase time = FLOPs / GEMM rate + bytes / memory bandwidth + host bytes / PCIe bandwidth. The constants of the card
that ran are measured (calibrate()); a P40's come from the sources cited in P40.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any

from verl_p40.data import gsm8k
from verl_p40.plan import memory, memory_plan
from verl_p40.plan.budget import ADAM_STATES, FP32
from verl_p40.plan.memory import Shape  # the model's dimensions, one home for the plan and the projection
from verl_p40.plan.workload import Workload

# the rollout's log-probs a decoding step (patches/p40_decode.py token_log_probs): logits / T written, logsumexp,
# softmax written, its product with the logits and the sum read: ~6 passes over rows x vocabulary in fp32 (a count
# of the code's passes, not a measurement)
LOG_PROB_PASSES = 6
OLD_LOG_PROB_PASS = "perf/p40_old_log_prob_pass"


@dataclass(frozen=True)
class Card:
    name: str
    gemm_tflops: float  # fp32 GEMM rate at transformer shapes
    memory_gbs: float  # device memory bandwidth
    pcie_gbs: float  # host <-> device copies
    source: str
    link_gbs: float | None = None  # GPU <-> GPU (NCCL); None: as pcie_gbs (cards without NVLink)

    @property
    def link(self) -> float:
        return self.link_gbs or self.pcie_gbs


# Tesla P40: 11.76 TFLOPS fp32 peak (3,840 cores x 2 x 1,531 MHz boost) and 347.1 GB/s GDDR5 (spec sheets, e.g.
# https://pcpartcomparison.com/gpu/tesla-p40); PyTorch fp32 matmul reaches 83 % of peak on the Tesla P4, the same
# Pascal generation (4.55 of 5.5 TFLOPS, https://github.com/zzc0721/torch-performance-test-data/issues/9), so
# 0.83 x 11.76 = 9.8 TFLOPS; PCIe 3.0 x16: 15.75 GB/s theoretical, ~12 GB/s reached by pageable copies. A P40 has
# no NVLink: NCCL between two of them runs over the same PCIe 3.0 x16 links (taken as the same 12 GB/s).
P40 = Card(
    "Tesla P40 (projected)",
    9.8,
    347.1,
    12.0,
    "spec 11.76 TFLOPS x 0.83 (PyTorch fp32 matmul efficiency measured on a Tesla P4), 347.1 GB/s, PCIe 3.0 x16",
)


@dataclass(frozen=True)
class Run:
    """What one step processes, from the verl config and the step's logged lengths."""

    sequences: int  # prompts x rollout n on each GPU (the batch / the GPUs of all hosts)
    prompt_width: int  # data.max_prompt_length (prompts are left-padded to it)
    response_width: int  # data.max_response_length
    generated: float  # decoding steps generate() ran (response_length/max)
    critic: bool
    reference: bool
    lora: bool
    offload: dict[str, bool]  # actor_optimizer, reference_params, critic_params, critic_optimizer
    # columns the actor, reference and critic passes run at with trim_padding: the step's longest prompt + longest
    # response (each micro-batch is at most that wide); None: the full prompt_width + response_width
    pass_width: float | None = None
    gpus: int = 1  # GPUs of all hosts (FSDP's world size)
    # micro-batches each GPU runs per phase in one step (each costs FSDP collectives when gpus > 1)
    micro_batches: dict[str, int] | None = None
    recompute: bool = True  # gradient checkpointing: the backward runs the forward again (an update = 4 forwards)
    # tokens (rows x columns) each phase's passes ran on in one step, as logged (measured_tokens); None: the bound
    tokens: dict[str, float] | None = None
    epochs: int = 1  # ppo_epochs: an update's logged tokens are this many passes over its sequences
    # the old log-probs from the rollout (rollout.p40_log_probs=rollout, plan/log_probs.py): no old_log_prob pass,
    # and each decoding step also reads the logits for the sampled tokens' log-probs and entropies
    log_probs_in_rollout: bool = False
    # the prompt columns generation's prompt pass and cache run on: the step's longest prompt where the decoder cuts
    # the padding no row attends to (rollout.p40_decode_compact); None: the whole prompt_width
    prompt_columns: float | None = None

    @property
    def width(self) -> float:
        return self.pass_width or self.prompt_width + self.response_width


def _forward_flops(shape: Shape, tokens: float, width: int, lm_head: bool) -> float:
    matmul = shape.block_parameters + (shape.vocab * shape.hidden if lm_head else shape.hidden)
    attention = shape.layers * 4 * width * shape.hidden * tokens  # QK^T and AV, causal half kept for simplicity
    return 2 * matmul * tokens + attention


def phases(shape: Shape, run: Run) -> dict[str, dict[str, float]]:
    """{phase: {"flops", "bytes", "host_bytes"}} of one step (generation is separate: see generation())."""

    def tokens(phase: str) -> float:  # what the phase's passes ran on: as logged, else every sequence at the bound
        return (run.tokens or {}).get(phase) or run.sequences * run.width

    def forward(phase: str, lm_head: bool) -> float:  # attention at the phase's mean width a sequence
        passes_over = run.epochs if phase in ("update_actor", "update_critic") else 1
        return _forward_flops(shape, tokens(phase), tokens(phase) / (run.sequences * passes_over), lm_head=lm_head)

    logits_bytes = lambda phase: 3 * shape.vocab * tokens(phase) * FP32  # noqa: E731
    weights = shape.parameters * FP32
    optim = shape.parameters * FP32 * ADAM_STATES
    adam_bytes = 28 * shape.parameters
    passes = 4 if run.recompute else 3  # forward, backward (2 forwards' FLOPs), and the recomputed forward
    out: dict[str, dict[str, float]] = {}
    if not run.log_probs_in_rollout:
        out["old_log_prob"] = {
            "flops": forward("old_log_prob", True),
            "bytes": logits_bytes("old_log_prob"),
            "host_bytes": 0.0,
        }
    out |= {
        "update_actor": {
            "flops": passes * forward("update_actor", True),
            "bytes": 3 * logits_bytes("update_actor") + (0 if run.lora else adam_bytes),
            "host_bytes": 2 * optim if run.offload.get("actor_optimizer") and not run.lora else 0.0,
        },
    }
    if run.reference:
        out["ref"] = {
            "flops": forward("ref", True),
            "bytes": logits_bytes("ref"),
            "host_bytes": 2 * weights if run.offload.get("reference_params") and not run.lora else 0.0,
        }
    if run.critic:
        params_moves = 2 * weights if run.offload.get("critic_params") else 0.0
        out["values"] = {"flops": forward("values", False), "bytes": 0.0, "host_bytes": params_moves}
        out["update_critic"] = {
            "flops": passes * forward("update_critic", False),
            "bytes": adam_bytes,
            "host_bytes": params_moves + (2 * optim if run.offload.get("critic_optimizer") else 0.0),
        }
    if run.gpus > 1:
        shard_moves = weights * (run.gpus - 1) / run.gpus
        per_micro = {
            "old_log_prob": 1,
            "ref": 1,
            "values": 1,
            "update_critic": 3,
            "update_actor": 2 if run.lora else 3,
        }  # LoRA: the adapters' gradients are tiny
        for name, cost in out.items():
            cost["link_bytes"] = per_micro[name] * (run.micro_batches or {}).get(name, 1) * shard_moves
    return out


def decoded_rows(run: Run) -> float:
    """The rows an average decoding step ran on: as the run logged them (perf/p40_tokens/rollout_decode, rows x
    decoding steps: fewer than every sequence where ended rows left the batch, p40_decode_compact), else every
    sequence."""
    logged = (run.tokens or {}).get("gen")
    return min(float(run.sequences), logged / max(run.generated, 1.0)) if logged else float(run.sequences)


def generation_gpu_seconds(shape: Shape, run: Run, card: Card) -> tuple[float, float]:
    """(prefill seconds, GPU seconds of one average decoding step) on `card`."""
    columns = run.prompt_columns or run.prompt_width
    # the prompt passes' rows x columns as the decoder logged them (fewer by length groups, p40_prefill_groups), else
    # every sequence at the step's longest prompt (or the padded width)
    tokens = (run.tokens or {}).get("prefill") or run.sequences * columns
    prefill = _forward_flops(shape, tokens, tokens / run.sequences, lm_head=True) / (card.gemm_tflops * 1e12)
    rows = decoded_rows(run)
    context = columns + run.generated / 2
    kv_bytes = rows * context * shape.layers * 2 * shape.kv_dim * FP32
    flops = 2 * (shape.block_parameters + shape.vocab * shape.hidden) * rows
    per_token = max(flops / (card.gemm_tflops * 1e12), (shape.parameters * FP32 + kv_bytes) / (card.memory_gbs * 1e9))
    if run.log_probs_in_rollout:  # scale, log-softmax, gather, entropy: ~6 passes over the logits, after the step
        per_token += LOG_PROB_PASSES * rows * shape.vocab * FP32 / (card.memory_gbs * 1e9)
    return prefill, per_token


def phase_seconds(cost: dict[str, float], card: Card) -> float:
    return (
        cost["flops"] / (card.gemm_tflops * 1e12)
        + cost["bytes"] / (card.memory_gbs * 1e9)
        + cost["host_bytes"] / (card.pcie_gbs * 1e9)
        + cost.get("link_bytes", 0.0) / (card.link * 1e9)
    )


def project(shape: Shape, run: Run, card: Card, host_seconds_per_token: float) -> dict[str, float]:
    """Seconds of each phase and of the step on `card`."""
    out = {name: phase_seconds(cost, card) for name, cost in phases(shape, run).items()}
    prefill, per_token = generation_gpu_seconds(shape, run, card)
    out["gen"] = prefill + run.generated * max(per_token, host_seconds_per_token)
    out["step"] = sum(out.values())
    return {k: round(v, 3) for k, v in out.items()}


def host_overhead_per_token(measured_gen_s: float, shape: Shape, run: Run, measured_card: Card) -> float:
    """The per-token time generate() spends beyond the GPU's work, from a measured generation phase."""
    prefill, per_token = generation_gpu_seconds(shape, run, measured_card)
    return max(per_token, (measured_gen_s - prefill) / max(run.generated, 1.0))


def decoder_compacts(cfg: Any) -> bool:
    """Whether the HF rollout's decoder computes only what is used (patches/p40_decode.py: rollout.p40_decode on and
    p40_decode_compact): the prompt's columns some row attends to, the rows still going."""
    from omegaconf import OmegaConf

    decoder = str(OmegaConf.select(cfg, "actor_rollout_ref.rollout.p40_decode", default="off") or "off") != "off"
    hf = OmegaConf.select(cfg, "actor_rollout_ref.rollout.name", default="hf") == "hf"
    compact = OmegaConf.select(cfg, "actor_rollout_ref.rollout.p40_decode_compact", default=False)
    return decoder and hf and compact is True  # a bool: the plan's rules take no other


def log_probs_in_rollout(cfg: Any) -> bool:
    """Whether the composed config takes the old log-probs from the rollout (plan/log_probs.py): no pass for them."""
    from omegaconf import OmegaConf

    return str(OmegaConf.select(cfg, "actor_rollout_ref.rollout.p40_log_probs", default="pass")) == "rollout"


def old_log_prob_pass(steps: list[dict[str, float]]) -> bool | None:
    """Whether verl's old_log_prob pass ran in the logged steps (perf/p40_old_log_prob_pass, logged by the patch set
    every step: 0 where the rollout's log-probs stood in), None where the log has no such metric (an older verl-p40,
    whose steps all ran it)."""
    seen = [s[OLD_LOG_PROB_PASS] for s in steps if OLD_LOG_PROB_PASS in s]
    return bool(statistics.median(seen)) if seen else None


def run_from_config(
    cfg: Any, generated: float, longest: tuple[float, float] | None = None, tokens: dict[str, float] | None = None
) -> Run:
    """The Run of a composed verl config; `longest` (the step's longest prompt and response, from its log) sets the
    passes' width where trim_padding is on; `tokens` (measured_tokens) what each phase's passes ran on."""
    from omegaconf import OmegaConf

    get = lambda key, default=None: OmegaConf.select(cfg, key, default=default)  # noqa: E731
    workload = Workload.of(cfg)
    full = int(get("data.max_prompt_length")) + int(get("data.max_response_length"))
    gpus = workload.gpus
    sequences = int(get("data.train_batch_size")) * workload.samples // gpus

    def micro(size: Any, epochs_key: str | None = None) -> int:  # micro-batches per step on each GPU
        passes = int(get(epochs_key, 1)) if epochs_key else 1
        return passes * math.ceil(sequences / int(size or sequences))

    size = lambda name, role=0: memory_plan.setting(cfg, name, role)  # noqa: E731  (the memory plan's keys)

    return Run(
        sequences=sequences,
        prompt_width=int(get("data.max_prompt_length")),
        response_width=int(get("data.max_response_length")),
        generated=float(generated),
        critic=workload.critic,
        reference=workload.reference,
        lora=workload.lora,
        offload={state: workload.on_host(state) for state in memory.STATES},
        pass_width=min(float(sum(longest)), full) if workload.trims and longest else None,
        recompute=bool(size("checkpointing") or False),
        tokens=tokens,
        epochs=int(get("actor_rollout_ref.actor.ppo_epochs", 1) or 1),
        log_probs_in_rollout=log_probs_in_rollout(cfg),
        prompt_columns=longest[0] if longest and decoder_compacts(cfg) else None,
        gpus=gpus,
        micro_batches={
            "old_log_prob": micro(size("logprob_micro")),
            "ref": micro(size("logprob_micro", 1)),
            "values": micro(get("critic.forward_micro_batch_size_per_gpu")),
            "update_actor": micro(size("update_micro"), "actor_rollout_ref.actor.ppo_epochs"),
            "update_critic": micro(size("update_micro", 1), "critic.ppo_epochs"),
        },
    )


def longest_lengths(steps: list[dict[str, float]]) -> tuple[float, float] | None:
    """Median over the steps of each step's longest prompt and longest response (verl's */max metrics)."""
    prompts = [s["prompt_length/max"] for s in steps if "prompt_length/max" in s]
    responses = [s["response_length/max"] for s in steps if "response_length/max" in s]
    return (statistics.median(prompts), statistics.median(responses)) if prompts and responses else None


def measured_tokens(steps: list[dict[str, float]], reference: bool, skip_first: bool = True) -> dict[str, float] | None:
    """Median over the steps (the first, warm-up, left out where there are others, as median_phases does) of the rows
    x columns each phase's passes ran on (perf/p40_tokens/*, logged by the patch set with the actor's update); old
    log-probs and the reference are the same passes over the same rows, logged together (the first none where the
    rollout gave them: old_log_prob_pass). None where the run logged
    none (an older verl-p40)."""
    steps = steps[1:] if skip_first and len(steps) > 1 else steps

    def median(kind: str) -> float | None:
        values = [s[f"perf/p40_tokens/{kind}"] for s in steps if f"perf/p40_tokens/{kind}" in s]
        return statistics.median(values) if values else None

    actor_forward = median("actor_forward")
    if actor_forward is None:
        return None
    old_pass = old_log_prob_pass(steps) is not False
    per_pass = actor_forward / max(int(reference) + int(old_pass), 1)  # the forward passes that ran
    out = {"old_log_prob": per_pass if old_pass else None, "ref": per_pass if reference else None}
    out["update_actor"] = median("actor_update")
    out |= {"values": median("critic_forward"), "update_critic": median("critic_update")}
    out["gen"] = median("rollout_decode")  # rows x decoding steps (generation_gpu_seconds)
    out["prefill"] = median("rollout_prefill")  # the prompt passes' rows x columns (generation_gpu_seconds)
    return {phase: value for phase, value in out.items() if value}


def epoch_hours(seconds_per_step: float, prompts_per_step: int, prompts_per_epoch: int = gsm8k.EPOCH_ROWS) -> float:
    """Hours for one pass over a default run's train.parquet (GSM8K's train split less prep's validation slice:
    7,217 prompts, `data.gsm8k.EPOCH_ROWS`)."""
    return round(seconds_per_step * -(-prompts_per_epoch // prompts_per_step) / 3600, 2)


def median_phases(steps: list[dict[str, float]], skip_first: bool = True) -> dict[str, float]:
    """Median seconds of each logged phase (timing_s/*) over the steps, the first (warm-up) left out when possible."""
    timed = steps[1:] if skip_first and len(steps) > 1 else steps
    keys = sorted({k for s in timed for k in s if k.startswith("timing_s/")})
    return {k.split("/", 1)[1]: round(statistics.median(s[k] for s in timed if k in s), 3) for k in keys}


def card_dict(card: Card) -> dict:
    return asdict(card)


def calibrate(shape: Shape, tokens: int = 2304) -> Card:
    """This GPU's constants, measured: fp32 GEMM rate at the model's MLP shape, device copy bandwidth, and pageable
    host-to-device copies. Runs on cuda:0 (call it in a process that may hold a CUDA context)."""
    import time

    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    device = torch.device("cuda", 0)

    def timed(fn, repeat: int) -> float:
        fn()
        torch.cuda.synchronize(device)
        started = time.perf_counter()
        for _ in range(repeat):
            fn()
        torch.cuda.synchronize(device)
        return (time.perf_counter() - started) / repeat

    a = torch.randn(tokens, shape.hidden, device=device)  # one micro-batch through the MLP's up-projection
    b = torch.randn(shape.hidden, shape.intermediate, device=device)
    gemm = 2 * tokens * shape.hidden * b.shape[1] / timed(lambda: a @ b, 20) / 1e12
    big = torch.empty(256 * 2**20, dtype=torch.float32, device=device)
    copy = 2 * big.numel() * 4 / timed(lambda: big.clone(), 10) / 1e9
    host = torch.empty(256 * 2**20, dtype=torch.float32)
    pcie = host.numel() * 4 / timed(lambda: host.to(device), 3) / 1e9
    name = torch.cuda.get_device_name(device)
    return Card(f"{name} (measured)", round(gemm, 2), round(copy, 1), round(pcie, 1), "calibrate() on this GPU")


def phase_errors(measured: dict[str, float], projected: dict[str, float]) -> dict[str, float]:
    """Percent error of the projection against the measured time, for the step and each phase both have (+: the model
    is slower than the GPU was). Generation's host overhead is calibrated on the measured phase, so its error is 0 by
    construction on the machine that ran it."""
    shared = [k for k in projected if k in measured and measured[k]]
    return {k: round(100 * (projected[k] - measured[k]) / measured[k], 1) for k in shared}


def error_band(p40_step: float, errors_pct: list[float]) -> dict[str, float]:
    """The P40 step corrected by each calibration's step error (step / (1 + error)): the lowest and highest of those.
    A model that was e % slow on a calibration GPU is taken as e % slow on the P40 too: the band says how far the
    figure moves if the P40 errs as the calibrations did, not a bound."""
    corrected = [p40_step / (1 + e / 100) for e in errors_pct]
    return {"low_s": round(min(corrected), 1), "high_s": round(max(corrected), 1), "errors_pct": sorted(errors_pct)}
