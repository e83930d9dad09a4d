"""Where the actor's update goes, and what the regrouped update changes (issue 60; `bench` ran on 2026-12-05:
results/speedups-2026-12-05).

Two parts, each for a device call on the lent H200 under the Pascal mask (fp32, TF32 off, SDPA's memory-efficient
kernel, a 24 GB cap):

`bench`: the masked P40-path `verl-p40 bench --steps 3` before and after, back to back on the same machine: before
with verl's update micro-batches (`p40_update_tokens=0` for actor and critic) and old_log_prob pass, after with the
length-grouped ones the memory plan sizes (patches/p40_update.py; set on a P40 since issue 67's validation), with the
rollout's log-probs (`p40_log_probs=auto`), with both, both with the decoder's compaction (`compact`; every other
variant turns it off), and both under the op audit without and with the compaction (`audited`, `compact-audited`),
and the compaction with the prompt passes by length (`grouped`, the p40 plan's path since 2026-12-07, and
`grouped-audited`; every other variant runs one prompt pass) (`--variants`). Random weights answer to the 512-token
limit, so only the prompts' lengths differ: the gain there is a lower bound of the real-weights one.

`phases`: Qwen2.5-0.5B's actor update as the P40 plan runs it, timed by phase at the plan's micro-batch (rows x
columns): forward with gradients, backward, gradient-checkpoint recomputation (the backward with checkpointing less
without), the optimizer step (torch's AdamW as verl 0.5.0 builds it (foreach), and the fused fp32 AdamW), and the
host transfers of an offloaded Adam state (8 bytes a parameter each way). Each time is beside what
verl_p40.perf.projection prices for it on the GPU that ran (calibrate()).

Exact commands, one device call each (`run`, carrying .gpu-shared for the Pascal mask, the bundle staged in
/tmp/bundle as bench/README.md says); `bench` takes ~7 minutes (two masked bench runs of ~200 s, as on 2026-12-04):

    bash /tmp/bundle/install.sh && source bench/device/gpu_setup.sh && \
        python3 bench/experiments/update_phases.py bench --out $OUT/update-bench
    bash /tmp/bundle/install.sh && source bench/device/gpu_setup.sh && PYTHONPATH=$PASCAL_MASK_DIR:$PYTHONPATH \
        PASCAL_MASK=1 python3 bench/experiments/update_phases.py phases --config $GPU_DATA/qwen2.5-0.5b-instruct \
        --out $OUT/update-phases
    # here, the script itself on a CPU (two layers, a small vocabulary):
    python3 bench/experiments/update_phases.py phases --cpu --config tests/fixtures/qwen2.5-0.5b-instruct --out /tmp/u

Then, here: `python3 bench/projection_band.py` with before.json and after.json added to the calibrations.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "app"))

# verl's update micro-batches, for the critic too (grpo-gsm8k has none; the key is harmless there)
VERLS = ["--set", "actor_rollout_ref.actor.p40_update_tokens=0", "--set", "critic.p40_update_tokens=0"]
P40_PATH = ["--profile", "p40", "--gpu-memory-cap-gb", "24", "--skip-check", "kernels", "--steps", "3"]


# the variants `bench` runs, each against the default (verl's old_log_prob pass and micro-batches): the rollout's
# log-probs, the length-grouped update, both, both with the decoder's compaction, and both under the op audit without
# and with the compaction (half-precision ops must be 0)
LOG_PROBS = ["--set", "actor_rollout_ref.rollout.p40_log_probs=auto"]
COMPACT = ["--set", "actor_rollout_ref.rollout.p40_decode_compact=true"]  # the decoder's compaction (2026-12-06)
# the p40 profile sets the compaction since issue 67's validation: the variants without it say so
NO_COMPACT = ["--set", "actor_rollout_ref.rollout.p40_decode_compact=false"]
VARIANTS = (
    "before",
    "log-probs",
    "update",
    "both",
    "compact",
    "audited",
    "compact-audited",
    "grouped",
    "grouped-audited",
)
# the prompt passes by length (patches/p40_decode.py, p40_prefill_groups): 8 groups of the 256 rows, 4 prompts' 8
# answers each; the p40 profile sets it since grouped67-2026-12-07, so every variant measured before says one pass
GROUPED = ["--set", "actor_rollout_ref.rollout.p40_prefill_groups=8"]
ONE_PASS = ["--set", "actor_rollout_ref.rollout.p40_prefill_groups=1"]


def variant_sets(name: str, offer: list[str]) -> list[str]:
    """The `--set`s of a variant; `offer`: those of the update the plan sizes (offered())."""
    pass_ = ["--set", "actor_rollout_ref.rollout.p40_log_probs=pass"]
    return {
        "before": [*VERLS, *pass_, *NO_COMPACT, *ONE_PASS],
        "log-probs": [*VERLS, *LOG_PROBS, *NO_COMPACT, *ONE_PASS],
        "update": [*offer, *pass_, *NO_COMPACT, *ONE_PASS],
        "both": [*offer, *LOG_PROBS, *NO_COMPACT, *ONE_PASS],
        "compact": [*offer, *LOG_PROBS, *COMPACT, *ONE_PASS],
        "audited": [*offer, *LOG_PROBS, *NO_COMPACT, *ONE_PASS],  # both, as audited on 2026-12-06
        "compact-audited": [*offer, *LOG_PROBS, *COMPACT, *ONE_PASS],  # the p40 plan's path of 2026-12-06/07
        "grouped": [*offer, *LOG_PROBS, *COMPACT, *GROUPED],  # the path the p40 plan sets since 2026-12-07
        "grouped-audited": [*offer, *LOG_PROBS, *COMPACT, *GROUPED],
    }[name]


def bench(out: Path, variants: list[str]) -> None:
    """`variants` back to back under the mask, each a 3-step masked bench; summary.json gains a row per variant (one
    device call may run some, the next the rest)."""
    from lib.device_runs import COMMON, audit_summary, mask_env, verl_p40

    out.mkdir(parents=True, exist_ok=True)
    log, summary_path = out / "bench.log", out / "summary.json"
    offer = offered(_p40_notes(mask_env("6.1")))
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    for name in variants:
        audit = out / f"{name}.jsonl" if name.endswith("audited") else None
        work = ["--checkpoints", f"/tmp/update-{name}/ck", "--logs", f"/tmp/update-{name}/logs"]
        sets = variant_sets(name, offer)
        args = ["bench", *COMMON, *work, *P40_PATH, *sets, "--out", str(out / f"{name}.json")]
        code = verl_p40(*args, env=mask_env("6.1", audit), log=log, timeout=360 if audit else 280)
        summary[name] = {**_bench_row(out / f"{name}.json", code), "sets": sets}
        if audit:
            summary[name]["audit"] = audit_summary(audit)
        summary_path.write_text(json.dumps(summary, indent=2) + "\n")
        print(json.dumps({name: summary[name]}, indent=2), flush=True)


def offered(notes: str) -> list[str]:
    """The `--set`s of the length-grouped update the plan finds room for in its `notes`: its line `update: ...` names
    the token budget, set on a Pascal GPU ("length-grouped micro-batches of N tokens") or offered on a newer one
    ("length-grouped ones of N tokens fit"), and the keys (the actor's, and the critic's where there is one)."""
    line = next(n for n in notes.splitlines() if "update: " in n and "length-grouped" in n)
    tokens = re.search(r"length-grouped (?:micro-batches|ones) of (\d+) tokens", line)[1]
    keys = re.findall(r"\b((?:actor_rollout_ref\.actor|critic)\.p40_update_tokens)=", line)
    return [part for key in keys for part in ("--set", f"{key}={tokens}")]


def _p40_notes(env: dict) -> str:
    """What `verl-p40 config` says of the P40 path bench runs (the same model, data, profile and cap)."""
    import subprocess

    from lib.device_runs import COMMON

    config = [a for a in COMMON if a not in ("--keep-model", "/tmp/qwen-random")]
    args = [sys.executable, "-m", "verl_p40.cli", "config", *config, "--profile", "p40", "--gpu-memory-cap-gb", "24"]
    return subprocess.run(args, env=env, capture_output=True, text=True).stderr


def _bench_row(path: Path, code: int) -> dict:
    if not path.exists():
        return {"exit": code}
    r = json.loads(path.read_text())
    p40 = r["projection"]["p40"]
    return {
        "exit": code,
        "seconds_per_step": r["seconds_per_step"],
        "update_actor_s": r["phases_s"].get("update_actor"),
        "torch_phase_peaks_gb": r["torch_phase_peaks_gb"],
        "projection_error_pct": r["projection"]["this_gpu"]["error_pct_vs_measured"],
        "p40_step_s": p40["step"],
        "p40_update_actor_s": p40["update_actor"],
        "p40_error_band": p40.get("error_band"),
        "update_tokens": (r.get("predicted") or {}).get("sizes", {}).get("update_tokens"),
    }


def model_and_batch(args, checkpointing: bool):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(args.config)
    if args.cpu:
        config.num_hidden_layers, config.vocab_size = 2, 1024
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32, attn_implementation="sdpa")
    model = model.to(args.device)
    if checkpointing:
        model.gradient_checkpointing_enable()
    model.train()
    ids = torch.randint(0, config.vocab_size, (args.rows, args.width), device=args.device)
    mask = torch.ones_like(ids)
    mask[:, : args.width // 5] = 0  # left padding, as verl's prompts have: the masked attention kernel runs
    return model, config, (ids, mask, (mask.cumsum(-1) - 1).clamp(min=0))


def loss_of(model, batch):
    import torch

    ids, mask, positions = batch
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False).logits
    log_probs = torch.log_softmax(logits[:, :-1].float(), dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return -(log_probs * mask[:, 1:]).sum() / mask.sum()


def pass_times(args, checkpointing: bool) -> dict:
    """Forward (with gradients) and backward seconds of one micro-batch."""
    from lib.timing import timed

    model, config, batch = model_and_batch(args, checkpointing)
    holder = {}

    def forward():
        holder["loss"] = loss_of(model, batch)

    def both():
        forward()
        holder["loss"].backward()
        model.zero_grad(set_to_none=True)

    forward_s = timed(forward, args.device, args.reps)
    holder.clear()
    both_s = timed(both, args.device, args.reps)
    return {"forward_s": forward_s, "backward_s": both_s - forward_s, "config": config, "model": model}


def optimizer_times(args, model) -> dict:
    """AdamW steps as verl builds it (torch's default: foreach on CUDA) and fused; offloaded states' round trip."""
    import torch

    from lib.timing import timed

    for p in model.parameters():
        p.grad = torch.randn_like(p)
    out = {}
    kinds = {"adamw_foreach_s": {"foreach": True}, "adamw_fused_s": {"fused": True}}
    if args.device == "cpu":
        kinds = {"adamw_foreach_s": {"foreach": True}}  # fused AdamW is a CUDA kernel
    for name, kind in kinds.items():
        optim = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.01, **kind)
        out[name] = timed(optim.step, args.device, args.reps)
    states = [s for st in optim.state.values() for s in st.values() if torch.is_tensor(s) and s.numel() > 1]
    host = [torch.empty(s.shape, dtype=s.dtype, pin_memory=False) for s in states]

    def round_trip():
        for s, h in zip(states, host):
            h.copy_(s)
            s.copy_(h)

    out["offload_round_trip_s"] = timed(round_trip, args.device, max(1, args.reps // 2))
    out["state_bytes"] = sum(s.numel() * s.element_size() for s in states)
    return out


def phases(args) -> None:
    import torch

    from verl_p40.perf import projection
    from verl_p40.plan.memory import Shape

    torch.backends.cuda.matmul.allow_tf32 = False  # a P40 has no TF32
    without, with_ = pass_times(args, False), pass_times(args, True)
    shape = Shape.from_config(without["config"].to_dict())
    measured = {
        "forward_s": without["forward_s"],
        "backward_s": without["backward_s"],
        "recomputation_s": with_["backward_s"] - without["backward_s"],
        **optimizer_times(args, without["model"]),
    }
    tokens = args.rows * args.width
    card = projection.calibrate(shape, tokens) if args.device == "cuda" else None
    flops = projection._forward_flops(shape, tokens, args.width, lm_head=True)
    priced = {}
    if card:  # the projection's own terms: a forward's FLOPs, the backward's two, Adam's 28 bytes, PCIe each way
        rate = card.gemm_tflops * 1e12
        priced = {"forward_s": flops / rate, "backward_s": 2 * flops / rate}
        priced["adamw_s"] = 28 * shape.parameters / (card.memory_gbs * 1e9)
        priced["offload_round_trip_s"] = measured["state_bytes"] * 2 / (card.pcie_gbs * 1e9)
    report = {
        "question": __doc__.split("\n\n")[0],
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu (the script's own check)",
        "torch": torch.__version__,
        "micro_batch": {"rows": args.rows, "width": args.width, "tokens": tokens},
        "measured": {k: round(v, 5) if isinstance(v, float) else v for k, v in measured.items()},
        "projection_prices": {k: round(v, 5) for k, v in priced.items()} if card else None,
        "card": projection.card_dict(card) if card else None,
        "command": " ".join(sys.argv),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "update-phases.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="part", required=True)
    b = sub.add_parser("bench", help="the masked P40-path bench, before and after")
    b.add_argument("--out", type=Path, required=True)
    b.add_argument("--variants", default="before,update", help=f"comma-separated, of {', '.join(VARIANTS)}")
    p = sub.add_parser("phases", help="the update's phases, timed")
    p.add_argument("--config", default=".gpu-shared/qwen2.5-0.5b-instruct", help="a folder with config.json")
    # the P40 grpo-gsm8k plan at 24 GB: 2 full-width rows (320 + 512) or their 2,048-token budget's worth
    p.add_argument("--rows", type=int, default=3)
    p.add_argument("--width", type=int, default=664)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--cpu", action="store_true", help="a 2-layer model of a small vocabulary on the CPU")
    p.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.part == "bench":
        variants = args.variants.split(",")
        if unknown := sorted(set(variants) - set(VARIANTS)):
            parser.error(f"--variants: {', '.join(unknown)} is none of {', '.join(VARIANTS)}")
        bench(args.out, variants)
        return
    args.device = "cpu" if args.cpu else "cuda"
    if args.cpu:
        args.width = min(args.width, 64)
    phases(args)


if __name__ == "__main__":
    main()
