"""LoRA checkpoints: verl's model merger writes the base weights plus a `lora_adapter/` folder whose config says
`lora_alpha: 0` (verl 0.5.0 does not know the run's alpha there). This folds the adapter into the weights with the
alpha the run was trained with (`verl-p40-run.json` beside the checkpoints), so eval and export see the trained
model, and keeps the adapter, with the right alpha, beside it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from verl_p40 import UserError

ADAPTER = "lora_adapter"


def run_record(actor: Path) -> dict:
    """The record `verl-p40 train` wrote for the experiment holding `.../global_step_N/actor`."""
    from verl_p40.train import RUN_RECORD

    path = actor.parent.parent / RUN_RECORD
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: cannot read it ({exc})") from None


def fold(merged: Path, actor: Path, out: Path) -> str:
    """Write `merged`'s base weights plus its adapter, folded in with the run's alpha, to `out`; returns a note."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    lora = run_record(actor).get("lora")
    if not lora:
        raise UserError(f"{actor}: the checkpoint holds a LoRA adapter but {actor.parent.parent}/verl-p40-run.json "
                        "does not give its alpha (was it trained without verl-p40 train?); write "
                        '{"lora": {"rank": R, "alpha": A}} there')
    adapter = merged / ADAPTER
    config = json.loads((adapter / "adapter_config.json").read_text(encoding="utf-8"))
    config["lora_alpha"] = lora["alpha"]
    (adapter / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    base = AutoModelForCausalLM.from_pretrained(merged, torch_dtype=torch.float32)
    model = PeftModel.from_pretrained(base, adapter).merge_and_unload()
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(merged).save_pretrained(out)
    shutil.copytree(adapter, out / ADAPTER)
    return f"LoRA adapter (rank {config['r']}, alpha {lora['alpha']}) merged into the weights; adapter kept in {out / ADAPTER}"
