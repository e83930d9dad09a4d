"""A profile completed against where the trainer runs: which rollout engine and whether torch.compile.

A profile states what it prefers (the volta-turing and ampere profiles prefer verl's vLLM rollout). What runs depends
on what is installed and on the GPU: the vLLM rollout only where vLLM imports and the GPU is sm_70 or newer (vLLM 0.8.5
has no kernels below), verl's HF rollout otherwise, with the profile's rollout dtype; torch.compile only where Triton
imports on an sm_70+ GPU and the profile turned it on after measuring it. Every change comes back as a note saying why.
"""

from __future__ import annotations

import functools
import importlib.util
import subprocess
import sys
from dataclasses import dataclass

from verl_p40.plan.capabilities import MIN_SM, has
from verl_p40.plan.capabilities import name as sm_name


@dataclass(frozen=True)
class Where:
    """What the trainer's machine offers: the GPU's compute capability (None: unknown) and importable packages."""

    sm: float | None
    vllm: bool
    triton: bool


def _imports(module: str) -> bool:
    """Whether `module` imports in a fresh interpreter (not just whether it is on the path: a vLLM built for another
    CUDA is on the path and fails to import)."""
    if importlib.util.find_spec(module) is None:
        return False
    probe = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, timeout=300)
    return probe.returncode == 0


@functools.cache
def installed(module: str) -> bool:
    return _imports(module)


def here(sm: float | None) -> Where:
    return Where(sm=sm, vllm=installed("vllm"), triton=installed("triton"))


def _why_not(package: str, installed: bool, feature: str, sm: float | None, hint: str = "") -> str | None:
    """Why `package` (the capability table's `feature`) cannot be used here, or None when it can."""
    if not installed:
        return f"{package} is not installed{hint}"
    if sm is not None and not has(feature, sm):
        return f"{package} needs {sm_name(MIN_SM[feature])} or newer, this GPU is {sm_name(sm)}"
    return None


COMPACT = "actor_rollout_ref.rollout.p40_decode_compact"  # patches/p40_decode.py; the p40 profile sets it


def _decoding(tree, where: Where, user_sets: dict[str, str] | None) -> str:
    """How the HF rollout decodes (patches/p40_decode.py), as a note: the run's own settings over the profile's."""
    from omegaconf import OmegaConf

    def setting(key: str):
        return (user_sets or {}).get(key, OmegaConf.select(tree, key))

    mode = setting("actor_rollout_ref.rollout.p40_decode") or "off"
    if mode == "off":
        return "rollout decoding: transformers' generate() (p40_decode=off)"
    graph = mode in ("graph", "auto") and where.sm is not None  # a CUDA graph needs a GPU
    how = "a static KV cache and one CUDA graph a token" if graph else "a static KV cache (no GPU: no CUDA graph)"
    if str(setting(COMPACT)).lower() == "true":  # a bool: rules.CHOICES takes no other
        from verl_p40.patches import p40_decode_rules  # the decoder's own interval; no torch

        how += f", the prompts' padding cut and ended rows leaving the batch every {p40_decode_rules.STOP_CHECK} tokens"
    return f"rollout decoding: {how} (p40_decode={mode}; off: transformers' generate())"


def complete(verl: dict, where: Where, user_sets: dict[str, str] | None = None) -> tuple[dict, list[str]]:
    """(the profile's verl settings completed for `where`, notes on every choice made). `user_sets`: the run's own
    `key=value` settings, which win over the profile's, so that a note names the value the run will use."""
    from omegaconf import OmegaConf

    tree = OmegaConf.create(verl)  # a copy: the profile's own settings stay as loaded
    notes = []
    rollout = OmegaConf.select(tree, "actor_rollout_ref.rollout.name") or "vllm"  # verl's own default is vllm
    if rollout == "vllm":
        reason = _why_not(
            "vLLM",
            where.vllm,
            "vllm",
            where.sm,
            " here (the default image has none; the -vllm image variant carries it)",
        )
        if reason:
            OmegaConf.update(tree, "actor_rollout_ref.rollout.name", "hf")
            dtype = (user_sets or {}).get("actor_rollout_ref.rollout.dtype") or (
                OmegaConf.select(tree, "actor_rollout_ref.rollout.dtype") or "bfloat16"
            )
            notes.append(f"rollout: hf ({dtype}) instead of the profile's vllm: {reason}")
        else:
            notes.append(f"rollout: vllm (installed, and the GPU is {sm_name(MIN_SM['vllm'])} or newer)")
    else:
        notes.append(f"rollout: {rollout} (the profile's)")
    if (OmegaConf.select(tree, "actor_rollout_ref.rollout.name") or "vllm") == "hf":
        notes.append(_decoding(tree, where, user_sets))
    compile_reason = _why_not("Triton", where.triton, "triton", where.sm)
    for key in ("actor_rollout_ref.actor.use_torch_compile", "actor_rollout_ref.ref.use_torch_compile"):
        if OmegaConf.select(tree, key) is not False and compile_reason:
            OmegaConf.update(tree, key, False)
            notes.append(f"{key}: false: {compile_reason}")
    return OmegaConf.to_container(tree), notes
