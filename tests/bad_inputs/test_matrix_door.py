"""The door, as test_matrix.py checks its cases: a device this machine does not have is said before any model is read,
and a command that is refused (or fails) where it would make a new folder leaves none: not its output folder, not the
folders above it, not the random-weight model bench would keep, not the folders the preflight tries, not a library's
cache in the temporary directory (check_case compares files and folders, $TMPDIR and $HF_HOME included).

CUDA_VISIBLE_DEVICES is empty in the device cases: torch sees no GPU on any machine, so `cuda` is not one of its
devices here."""

from __future__ import annotations

import json
import shutil

import pytest

from bad_inputs.conftest import T, check_case, without_a_driver_where_asked
from model_folders import small_model

NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}
DATA = f"{T}/prepared/test.parquet"
NEW = f"{T}/new/deeper"  # two folders that are not there: neither may be left behind


def eval_(*extra: str, model: str = f"{T}/nomodel") -> list[str]:
    return ["eval", "--model", model, "--data", DATA, "--out", f"{NEW}/e", *extra]


def export(model: str, *extra: str) -> list[str]:
    return ["export", "--model", f"{T}/door/{model}", "--out", f"{NEW}/x", *extra]


def bench(*extra: str) -> list[str]:
    return ["bench", "--profile", "p40", "--model", f"{T}/door/shape", "--out", f"{NEW}/bench.json", "--logs",
            f"{T}/new-logs", "--data", f"{T}/nope", "--skip-check", "gpu,kernels,compute,verl", *extra]  # fmt: skip


CASES = [
    # eval --device: one of this machine's, said before the model (a missing one here) is looked at
    ("door-eval-device-absent", eval_("--device", "cuda", model=f"{T}/nope"), NO_GPU,
     "--device cuda: not a device of this machine; this machine has cpu: use one of them, or leave --device out"),
    ("door-eval-device-index", eval_("--device", "cuda:3"), NO_GPU, "--device cuda:3: not a device of this machine"),
    ("door-eval-device-misspelt", eval_("--device", "cdua"), NO_GPU,
     "--device cdua: not a device name; this machine has cpu"),
    ("door-eval-device-upper", eval_("--device", "CPU"), NO_GPU, "--device CPU: not a device name"),
    ("door-eval-device-empty", eval_("--device", ""), NO_GPU, "--device : not a device name"),
    ("door-eval-device-cpu-index", eval_("--device", "cpu:1"), NO_GPU, "--device cpu:1: not a device of this machine"),
    ("door-eval-device-other-kind", eval_("--device", "mps"), NO_GPU, "--device mps: not a device of this machine"),
    ("door-eval-device-latest", [*eval_("--device", "cuda:0"), "--model", "latest", "--checkpoints", f"{T}/nope"],
     NO_GPU, "--device cuda:0: not a device of this machine"),  # before a checkpoint would be looked for (or merged)
    # the engine on that device: said before the model without weights is
    ("door-eval-engine-vllm-on-cpu", eval_("--device", "cpu", "--engine", "vllm"), NO_GPU,
     "--engine vllm needs the vllm package and a GPU of compute capability 7.0 or newer"),
    # eval that fails after its checks (a model without weights) makes no --out folder
    ("door-eval-no-weights-new-out", eval_("--device", "cpu"), {}, "no weights (*.safetensors)"),
    # export: a model GGUF cannot hold is said before the Hugging Face folder is written, and no --out folder stays
    ("door-export-gguf-not-qwen2", export("llama", "--gguf", "f16"), {},
     "door/llama: GGUF export knows Qwen2 models, this is 'llama'; export without --gguf"),
    ("door-export-gguf-config-key", export("no-eps", "--gguf", "q8_0"), {},
     "no-eps/config.json: no rms_norm_eps, which a GGUF file records; export without --gguf"),
    ("door-export-no-adapter", export("qwen2", "--lora", "adapter"), {}, "no LoRA adapter here"),
    ("door-export-latest-none", ["export", "--model", "latest", "--checkpoints", f"{T}/nope", "--out", f"{NEW}/x"], {},
     "no verl checkpoint"),
    # bench refused by its preflight (no data): no result folder, no logs folder, no kept model, no compiler cache
    ("door-bench-preflight", bench(), {}, "preflight: data: "),
    ("door-bench-preflight-keep", bench("--keep-model", f"{T}/kept/model"), {}, "preflight: data: "),
    ("door-bench-keep-not-a-model", bench("--keep-model", f"{T}/src"), {},
     "/src: holds files but no model (no config.json); choose a new or empty folder"),
    # train refused by its preflight: the checkpoints and logs folders it tried are not left made
    ("door-train-preflight", ["train", "--profile", "p40", "--model", f"{T}/nomodel", "--data", f"{T}/prepared",
                              "--checkpoints", f"{NEW}/ck", "--logs", f"{T}/new-logs", "--skip-check",
                              "gpu,kernels,compute,verl"], {}, "preflight: model: "),
    # prep, fetch-model, monitor into folders that are not there
    ("door-prep-bad-rows", ["prep", "--source", f"{T}/badutf8", "--out", f"{NEW}/d"], {}, "train.jsonl:1: not UTF-8"),
    ("door-prep-summary-new-folder", ["prep", "--source", f"{T}/badutf8", "--out", f"{NEW}/d", "--summary-json",
                                      f"{T}/new2/s.json"], {}, "train.jsonl:1: not UTF-8"),
    ("door-fetch-unreachable", ["fetch-model", "--out", f"{NEW}/m"], {"HF_ENDPOINT": "http://127.0.0.1:9"},
     "cannot get the file list"),
    ("door-fetch-from-broken", ["fetch-model", "--from", f"{T}/nomodel", "--out", f"{NEW}/m"], {},
     "not a complete model folder"),
    ("door-monitor-once", ["monitor", "--once", "--out", f"{NEW}/g"], {}, "no NVIDIA GPU visible through NVML"),
    ("door-monitor-plot-bad-csv", ["monitor", "--plot", f"{T}/bad.csv", "--plot-out", f"{NEW}/gpu.png"], {},
     "bad.csv: not a gpu.csv"),
    ("door-doctor-check-name", ["doctor", "--profile", "p40", "--only", "gpus", "--logs", f"{NEW}/l"], {},
     "unknown check 'gpus'"),
]  # fmt: skip


@pytest.fixture()
def door(world):
    """The world, with small model folders (complete as `verify` judges them; not loadable): a Qwen2 one, a Llama one
    and a Qwen2 one whose config.json lacks a key a GGUF file records; and for bench, a tiny shape with the real
    tokenizer and no weights."""
    small_model(world / "door" / "qwen2")
    small_model(world / "door" / "llama", model_type="llama", architectures=["LlamaForCausalLM"])
    shutil.copytree(world / "door" / "qwen2", world / "door" / "no-eps")
    config = json.loads((world / "door" / "no-eps" / "config.json").read_text())
    del config["rms_norm_eps"]
    (world / "door" / "no-eps" / "config.json").write_text(json.dumps(config))
    shutil.copytree(world / "nomodel", world / "door" / "shape")
    shape = json.loads((world / "nomodel" / "config.json").read_text())
    shape.update(hidden_size=8, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1)
    (world / "door" / "shape" / "config.json").write_text(json.dumps(shape))
    return world


@pytest.mark.parametrize("name,args,env,expected", CASES, ids=[c[0] for c in CASES])
def test_refused_at_the_door_leaves_no_file_nor_folder(request, door, name, args, env, expected):
    without_a_driver_where_asked(request, expected)
    check_case(door, args, env, expected)
