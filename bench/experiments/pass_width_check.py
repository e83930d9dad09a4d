"""Does a pass's time follow the tokens it runs on once the GPU is bound by arithmetic? (issue 41)

The P40 projection (app/verl_p40/perf/projection.py) can price the actor's and reference's passes two ways: at the
rows x columns each micro-batch ran on (the patch set logs them; 85.7 s a P40 step on 12-03) or with every pass at the
step's longest prompt + answer (117.2 s). The first assumes that a narrower micro-batch costs proportionally less time,
which holds where the card is bound by arithmetic, not by kernel launches. A P40 (9.8 fp32 TFLOPS reached) is bound by
arithmetic at its micro-batches (2 sequences an update, 8 a log-prob pass, ~300-664 columns); the H200 is not at the
same sizes (it finishes each kernel ~5x sooner). This script times Qwen2.5-0.5B's passes as verl runs them (logits,
log-softmax, the answer tokens' log-probs; the update also backward, without gradient checkpointing as the P40 plan
runs it) for several rows and widths, with a P40's kernels (fp32, TF32 off, SDPA's memory-efficient kernel with a
padding mask), and reports for each row count the time at each width against the time at the widest beside the ratio
of their FLOPs by the projection's own count, and the TFLOPS reached.

    python3 bench/experiments/pass_width_check.py --config tests/fixtures/qwen2.5-0.5b-instruct --out $OUT/width
    python3 bench/experiments/pass_width_check.py --cpu --out /tmp/width   # the script itself, tiny and on a CPU
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "app"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for lib/


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="tests/fixtures/qwen2.5-0.5b-instruct", help="a folder with config.json")
    parser.add_argument("--rows", default="2,4,8,16,32")
    parser.add_argument("--widths", default="256,384,512,664")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--cpu", action="store_true", help="a 2-layer model of a small vocabulary on the CPU")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from transformers import AutoConfig, AutoModelForCausalLM

    from lib.timing import timed
    from verl_p40.perf.projection import _forward_flops
    from verl_p40.plan.memory import Shape

    device = "cpu" if args.cpu else "cuda"
    config = AutoConfig.from_pretrained(args.config)
    if args.cpu:
        config.num_hidden_layers, config.vocab_size = 2, 1024
    torch.backends.cuda.matmul.allow_tf32 = False  # a P40 has no TF32: fp32 GEMMs as it runs them
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32, attn_implementation="sdpa").to(device)
    shape = Shape.from_config(config.to_dict())
    rows_list = [int(r) for r in args.rows.split(",")]
    widths = [int(w) for w in args.widths.split(",")]
    if args.cpu:
        rows_list, widths = rows_list[:2], [w // 8 for w in widths]
    backends = [SDPBackend.EFFICIENT_ATTENTION] if device == "cuda" else [SDPBackend.MATH]

    def batch(rows: int, width: int):
        ids = torch.randint(0, config.vocab_size, (rows, width), device=device)
        mask = torch.ones_like(ids)
        mask[:, : width // 10] = 0  # left padding, as verl's prompts have: the masked attention kernel runs
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        return ids, mask, positions

    def log_probs(ids, mask, positions):  # verl's pass: logits, log-softmax, each token's log-prob
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False).logits
        return torch.log_softmax(logits[:, :-1].float(), dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)

    results = []
    with sdpa_kernel(backends):
        for rows in rows_list:
            for width in widths:
                tensors = batch(rows, width)

                def forward(tensors=tensors):
                    with torch.no_grad():
                        log_probs(*tensors)

                def update(tensors=tensors):
                    mask = tensors[1]
                    loss = -(log_probs(*tensors) * mask[:, 1:]).sum() / mask.sum()
                    loss.backward()
                    model.zero_grad(set_to_none=True)

                flops = _forward_flops(shape, rows * width, width, lm_head=True)
                row = {"rows": rows, "width": width, "tokens": rows * width, "forward_gflop": round(flops / 1e9, 1)}
                for name, fn, scale in (("forward", forward, 1), ("update", update, 3)):
                    ms = 1000 * timed(fn, device, args.reps)
                    row[f"{name}_ms"] = round(ms, 2)
                    row[f"{name}_tflops"] = round(scale * flops / (ms / 1000) / 1e12, 2)
                results.append(row)
                print(json.dumps(row), flush=True)
                if device == "cuda":
                    torch.cuda.empty_cache()

    by_rows = {}
    for rows in rows_list:
        group = [r for r in results if r["rows"] == rows]
        widest = max(group, key=lambda r: r["width"])
        by_rows[rows] = [
            {
                "width": r["width"],
                "flops_ratio": round(r["forward_gflop"] / widest["forward_gflop"], 3),
                "forward_time_ratio": round(r["forward_ms"] / widest["forward_ms"], 3),
                "update_time_ratio": round(r["update_ms"] / widest["update_ms"], 3),
            }
            for r in group
        ]
    summary = {
        "question": __doc__.split("\n\n")[0],
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "kernels": "fp32, TF32 off, SDPA memory-efficient kernel with a left-padding mask (a P40's)"
        if device == "cuda"
        else "cpu (the script's own check)",
        "model": args.config + (" (2 layers, vocabulary 1,024: --cpu)" if args.cpu else ", random weights"),
        "command": " ".join(sys.argv),
        "results": results,
        "time_against_widest": by_rows,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pass-width.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {out / 'pass-width.json'}")


if __name__ == "__main__":
    main()
