"""Bad files, model folders and output folders across fetch-model, the doctor (through train's preflight), eval,
export, prep, monitor and bench, as test_matrix.py checks its cases: exit code 2, exactly one line naming the file
(and the key, line or value), no traceback, and every file that was there before byte-for-byte as it was.

The `files` fixture adds to the world: small model folders, each broken one way (`model_folders`), output folders
holding a user's file, a link or another run's answers where a command would write, and GSM8K sources with rows no
real file holds."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from bad_inputs.conftest import T, check_case
from model_folders import CONFIG, copy_of, cut_short, small_model, tensors

OFFLINE = {"HF_HUB_OFFLINE": "1"}
M = f"{T}/models"
DOCTOR = ["train", "--profile", "p40", "--dry-run", "--data", f"{T}/prepared"]


def from_(model: str, out: str = f"{T}/m") -> list[str]:
    return ["fetch-model", "--from", f"{M}/{model}", "--out", out]


def eval_(out: str, model: str = "good", *extra: str) -> list[str]:
    return ["eval", "--model", f"{M}/{model}", *extra, "--data", f"{T}/prepared/test.parquet", "--device", "cpu",
            "--out", f"{T}/{out}"]  # fmt: skip


def export(out: str, model: str = "good", *extra: str) -> list[str]:
    return ["export", "--model", f"{M}/{model}", "--out", f"{T}/{out}", *extra]


def prep(source: str, out: str = "p", *extra: str) -> list[str]:
    return ["prep", "--source", f"{T}/{source}", "--out", f"{T}/{out}", *extra]


def monitor(out: str) -> list[str]:
    return ["monitor", "--once", "--out", f"{T}/{out}"]  # the folder is checked before NVML is asked


def bench(out: str) -> list[str]:
    return ["bench", "--profile", "p40", "--model", f"{T}/nomodel", "--out", f"{T}/{out}"]


def _config(folder: Path, **change) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **change}, indent=2))


def _raw_header(folder: Path, header: bytes, data: bytes = b"") -> None:
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + data)


def _models(root: Path) -> None:
    """One small model folder per way a folder goes wrong, beside a good one."""
    good = small_model(root / "good")
    small_model(root / "other")  # another model of the same shape, written at another time
    broken = {name: copy_of(good, root / name) for name in (
        "cut", "badjson", "hidden", "vocab", "layers", "inter", "untied", "textnum", "list", "headerlen",
        "headerjson", "offsets", "trailing", "tokcfg",
    )}  # fmt: skip
    cut_short(broken["cut"])
    (broken["badjson"] / "config.json").write_text('{\n  "model_type": "qwen2",\n  "hidden_size": 8,,\n}\n')
    _config(broken["hidden"], hidden_size=896)
    _config(broken["vocab"], vocab_size=151936)
    _config(broken["layers"], num_hidden_layers=24)
    _config(broken["inter"], intermediate_size=4864)
    _config(broken["untied"], tie_word_embeddings=False)
    _config(broken["textnum"], hidden_size="8")
    (broken["list"] / "config.json").write_text(json.dumps([CONFIG]))
    (broken["headerlen"] / "model.safetensors").write_bytes(struct.pack("<Q", 2**40) + b"{}")
    _raw_header(broken["headerjson"], b'{"model.norm.weight": {"dtype": "F32", "shape": [8], "data_offsets": [0, 3')
    _raw_header(broken["offsets"], json.dumps({"x": {"dtype": "F16", "shape": [8], "data_offsets": [0, 8]}}).encode())
    (broken["trailing"] / "model.safetensors").write_bytes((good / "model.safetensors").read_bytes() + b"\0" * 7)
    (broken["tokcfg"] / "tokenizer_config.json").write_text('{"model_max_length": 32768\n')
    sharded = small_model(root / "shard-missing", shards=2)
    (sharded / "model-00002-of-00002.safetensors").unlink()
    for name, weight_map in (
        ("index-broken", None),
        ("index-elsewhere", {"model.norm.weight": "model-00001-of-00002.safetensors"}),
        ("index-outside", {"model.norm.weight": "../good/model.safetensors"}),
    ):
        folder = small_model(root / name, shards=2)
        index = folder / "model.safetensors.index.json"
        if weight_map is None:
            index.write_text('{"metadata": {},\n "weight_map": {\n')
        else:
            listed = json.loads(index.read_text())["weight_map"]
            index.write_text(json.dumps({"weight_map": {**listed, **weight_map}}))


def _outputs(world: Path) -> None:
    """Output folders holding what a command must not write over."""

    from verl_p40.outputs import OutputFolder

    (world / "outside").mkdir()
    (world / "outside" / "theirs.txt").write_text("not verl-p40's")
    (world / "o-users").mkdir()
    (world / "o-users" / "config.json").write_text('{"model_type": "llama"}')  # another model's, copied by a user
    (world / "o-link").mkdir()
    (world / "o-link" / "config.json").symlink_to(world / "a-file")
    (world / "e-report").mkdir()
    (world / "e-report" / "report.json").write_text('{"my": "own report"}')
    (world / "e-link").mkdir()
    (world / "e-link" / "answers.jsonl").symlink_to(world / "a-file")
    (world / "e-not-answers").mkdir()
    (world / "e-not-answers" / "answers.jsonl").write_text('{"id": 1, "text": "my notes"}\n')
    for name in ("x-users-folder", "x-users-file", "x-link", "x-gguf"):
        (world / name).mkdir()
    (world / "x-users-folder" / "good-hf-fp16").mkdir()
    (world / "x-users-folder" / "good-hf-fp16" / "model.safetensors").write_bytes(b"a user's model")
    (world / "x-users-file" / "good-hf-fp16").write_text("a file where export's folder goes")
    (world / "x-link" / "good-hf-fp16").symlink_to(world / "outside")
    (world / "x-gguf" / "good-f16.gguf").write_bytes(b"GGUF a user's own")
    with OutputFolder(world / "x-own", "--out", "export").write(["good-hf-fp16"], directory=True) as (temp,):
        (temp / "config.json").write_text("{}")  # an earlier export...
    (world / "x-own" / "good-hf-fp16" / "README.md").write_text("my model card")  # ...and a user's file put in it
    (world / "p-users").mkdir()
    shutil.copy(world / "prepared" / "train.parquet", world / "p-users" / "train.parquet")  # not written there by prep
    (world / "p-link").mkdir()
    (world / "p-link" / "test.parquet").symlink_to(world / "a-file")
    shutil.copytree(world / "prepared", world / "p-val")  # prep's own output, moved as a whole...
    shutil.copy(world / "prepared" / "test.parquet", world / "p-val" / "val.parquet")  # ...and a user's val.parquet
    _monitor_and_bench_outputs(world)


def _monitor_and_bench_outputs(world: Path) -> None:
    from verl_p40.gpu import monitor as gpu_monitor
    from verl_p40.gpu.csv_log import CsvLog
    from verl_p40.gpu.sampler import GPU_COLUMNS, GPUSample

    for name in ("m-users", "m-link", "m-rotated", "m-summary", "m-ledger", "b-users", "b-link"):
        (world / name).mkdir()
    (world / "m-users" / "gpu.csv").write_text("time,memory\n1,2\n")  # a user's own log, not under the monitor's header
    (world / "m-link" / "gpu.csv").symlink_to(world / "a-file")
    (world / "m-rotated" / "gpu.csv.2").write_text("my notes\n")  # where a rotation would move an older part
    (world / "m-summary" / "gpu-summary.json").write_text('{"my": "summary"}')
    (world / "m-ledger" / ".verl-p40-outputs.json").symlink_to(world / "a-file")
    sample = GPUSample(1.0, 0, "Tesla P40", *[None] * (len(GPU_COLUMNS) - 3))
    CsvLog(gpu_monitor.output_folder(world / "m-plot"), "gpu.csv", GPU_COLUMNS).write([sample])  # the monitor's CSV...
    (world / "m-plot" / "gpu.png").write_bytes(b"a user's picture")  # ...beside a picture it did not draw
    (world / "m-plot" / "link.png").symlink_to(world / "a-file")
    (world / "b-users" / "bench.json").write_text('{"my": "numbers"}')
    (world / "b-link" / "bench.json").symlink_to(world / "a-file")
    (world / "b-logs" / "bench-logs" / "gpu").mkdir(parents=True)
    (world / "b-logs" / "bench-logs" / "gpu" / "gpu-processes.csv").write_text("pid\n1\n")  # where its samples go


def _sources(world: Path) -> None:
    """GSM8K sources whose train.jsonl holds, at line 2, a row no real file holds."""
    good = json.dumps({"question": "What is 1?", "answer": "#### 1"})
    rows = {
        "s-deep": "[" * 100_000 + "]" * 100_000,
        "s-surrogate": '{"question": "caf\\ud800?", "answer": "#### 1"}',
        "s-duplicate": '{"question": "a?", "answer": "#### 1", "answer": "#### 2"}',
        "s-huge": json.dumps({"question": "x" * 3 * 2**20, "answer": "#### 1"}),
    }
    for name, row in rows.items():
        (world / name).mkdir()
        (world / name / "train.jsonl").write_text(f"{good}\n{row}\n", encoding="utf-8")
        shutil.copy(world / "src" / "test.jsonl", world / name / "test.jsonl")
    (world / "s-utf16").mkdir()
    (world / "s-utf16" / "train.jsonl").write_bytes((good + "\n").encode("utf-16"))
    shutil.copy(world / "src" / "test.jsonl", world / "s-utf16" / "test.jsonl")


def _eval_data(world: Path) -> None:
    """test.parquet files eval cannot score: empty, of another table, rows verl's trainer could not use either."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(world / "prepared" / "test.parquet")
    (world / "d").mkdir()
    pq.write_table(table.slice(0, 0), world / "d" / "empty.parquet")
    pq.write_table(pa.table({"prompt": ["q?"], "response": ["a"], "reward": [1.0]}), world / "d" / "seed.parquet")
    edits = {
        "no-truth": lambda row: row["reward_model"].update(ground_truth=None),
        "no-messages": lambda row: row.update(prompt=[]),
        "no-content": lambda row: row.update(prompt=[{"role": "user", "content": None}]),
    }
    for name, edit in edits.items():
        rows = table.to_pylist()
        edit(rows[1])
        pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), world / "d" / f"{name}.parquet")


def _answers(world: Path) -> None:
    """An eval --out whose answers.jsonl has a line with a model's scores edited away."""
    (world / "e-no-score").mkdir()
    line = {"index": 0, "question": "q", "models": {"base": {"answer": "#### 1", "strict": 1.0}}}
    (world / "e-no-score" / "answers.jsonl").write_text(json.dumps(line) + "\n")


def _checkpoints(world: Path) -> None:
    """Checkpoint folders whose tracker file says something verl did not write, or names a step that is gone."""
    for name, text in (("ck-gone", b"50\n"), ("ck-binary", b"\xff\xfe5\x00"), ("ck-empty", b"")):
        actor = world / name / "exp" / "global_step_25" / "actor"
        actor.mkdir(parents=True)
        (actor / "model_world_size_1_rank_0.pt").write_bytes(b"")
        (world / name / "exp" / "latest_checkpointed_iteration.txt").write_bytes(text)


@pytest.fixture()
def files(world):
    _models(world / "models")
    _outputs(world)
    _sources(world)
    _eval_data(world)
    _answers(world)
    _checkpoints(world)
    return world


def group(prefix: str, argv, env: dict, rows: list[tuple[str, str, str]]) -> list[tuple]:
    """Cases of one kind: each row (name, what varies, expected words), `argv(what varies)` its command line."""
    return [(f"file-{prefix}-{name}", argv(arg), env, expected) for name, arg, expected in rows]


CASES = [
    # fetch-model --from: the folder brought on a disk is verified by reading it, nothing is copied when it is broken
    *group("from", from_, OFFLINE, [
        ("cut-short", "cut", "cut short (4332 bytes"),
        (
            "config-broken", "badjson",
            "config.json:3: not valid JSON (Expecting property name enclosed in double quotes, column 20)",
        ),
        ("hidden-size", "hidden", "config.json: hidden_size is 896, the weights' is 8 (model.embed_tokens.weight is"),
        ("header-length", "headerlen", "not a safetensors file or cut short (its header says 1099511627776 bytes"),
        ("header-not-json", "headerjson", "model.safetensors: its safetensors header is not JSON"),
        ("offsets-against-shape", "offsets", "tensor x (F16 [8]) needs 16 bytes, its data offsets give 8"),
        ("trailing-bytes", "trailing", "model.safetensors: 7 bytes more than its header describes"),
        ("shard-missing", "shard-missing", "model-00002-of-00002.safetensors: missing (listed in model.safetensors"),
        ("index-broken", "index-broken", "model.safetensors.index.json:3: not valid JSON"),
        ("index-elsewhere", "index-elsewhere", "model-00001-of-00002.safetensors: has no tensor model.norm.weight"),
        ("index-outside", "index-outside", "shard '../good/model.safetensors' is not a file of this folder"),
    ]),
    # fetch-model's --out: a user's file of a model file's name, a link, a file above the folder
    *group("from-out", lambda out: from_("good", f"{T}/{out}"), OFFLINE, [
        ("users-config", "o-users", "o-users/config.json: already there and not written by verl-p40 fetch-model"),
        ("link", "o-link", "o-link/config.json: a symbolic link; verl-p40 fetch-model writes only inside --out"),
        ("under-a-file", "a-file/m", "a-file is a file"),
    ]),
    ("file-fetch-offline-config-a-list", ["fetch-model", "--out", f"{M}/list"], OFFLINE, "not a JSON object (a list)"),
    # the doctor's model check, as train's preflight runs it
    *group("doctor", lambda model: [*DOCTOR, "--model", f"{M}/{model}"], {}, [
        ("config-broken", "badjson", "/models/badjson: config.json:3: not valid JSON"),
        ("layers", "layers", "config.json: num_hidden_layers is 24, the weights have layers 0 to 1"),
        ("untied-no-head", "untied", "tie_word_embeddings is false, and the weights have no lm_head.weight"),
        ("text-number", "textnum", "config.json: hidden_size is '8', not a whole number"),
        ("tokenizer-config-broken", "tokcfg", "tokenizer_config.json:2: not valid JSON"),
    ]),
    # eval: both models verified before any is loaded
    *group("eval", lambda model: eval_("e", model), {}, [
        ("cut-short", "cut", "cut: not a usable model folder: model.safetensors: cut short"),
        ("vocab", "vocab", "config.json: vocab_size is 151936, the weights' is 64"),
        ("intermediate", "inter", "intermediate_size is 4864, the weights' is 16 (model.layers.0.mlp.gate_proj.weight"),
    ]),
    (
        "file-eval-compare-broken",
        eval_("e", "good", "--compare", f"{M}/headerjson"),
        {},
        "headerjson: not a usable model folder: model.safetensors: its safetensors header is not JSON",
    ),
    # eval's --out: a file in its place, a user's report, a link, a file of another kind under answers.jsonl's name
    # (answers of another run are kept aside, not refused: tests/unit_evaluation)
    *group("eval", eval_, {}, [
        ("out-is-a-file", "a-file", "is a file, not a folder"),
        ("out-under-a-file", "a-file/e", "a-file is a file"),
        ("users-report", "e-report", "e-report/report.json: already there and not written by verl-p40 eval"),
        ("answers-link", "e-link", "e-link/answers.jsonl: a symbolic link; verl-p40 eval writes only inside --out"),
        ("answers-not-eval-s", "e-not-answers", "answers.jsonl:1: not an answer verl-p40 eval writes"),
    ]),
    # eval's --data: a file it cannot score says so before any model is read (an empty one divided by zero; a
    # missing ground truth was scored as the answer 'None')
    *group("eval-data", lambda name: [*eval_("e"), "--data", f"{T}/d/{name}.parquet"], {}, [
        ("empty", "empty", "d/empty.parquet: no rows; make it with verl-p40 prep"),
        ("seed-tutorials", "seed", "seed.parquet: not in verl's RL schema (no column reward_model); make it with"),
        ("no-ground-truth", "no-truth", "no-truth.parquet: row 2: not in verl's RL schema (no reward_model.ground_tr"),
        ("no-messages", "no-messages", "row 2: not in verl's RL schema (its prompt is not a non-empty list of chat"),
        ("no-content", "no-content", "no-content.parquet: row 2: not in verl's RL schema (a prompt message has no"),
    ]),
    ("file-eval-answers-no-score", eval_("e-no-score"), {}, "e-no-score/answers.jsonl:1: not an answer verl-p40 eval"),
    # latest: a tracker file naming no checkpoint that is there is named, not taken for "no checkpoint"
    *group("latest", lambda ck: ["export", "--model", "latest", "--checkpoints", f"{T}/{ck}", "--out", f"{T}/x"], {}, [
        ("step-gone", "ck-gone", "latest_checkpointed_iteration.txt: names step 50, but "),
        ("not-utf8", "ck-binary", "ck-binary/exp/latest_checkpointed_iteration.txt: cannot read it (not UTF-8 text)"),
        ("empty", "ck-empty", "latest_checkpointed_iteration.txt: says '', not a step number; pass the checkpoint's"),
    ]),
    (
        "file-export-step-folder",  # a step folder is taken as its actor folder: the same line as the next case's
        ["export", "--model", f"{T}/ck-gone/exp/global_step_25", "--out", f"{T}/x"],
        {},
        "global_step_25/actor: verl's model merger failed (",
    ),
    (
        "file-export-merger-fails",
        ["export", "--model", f"{T}/ck-gone/exp/global_step_25/actor", "--out", f"{T}/x"],
        {},
        "global_step_25/actor: verl's model merger failed (",  # its reason in the line, not 3000 characters of it
    ),
    # export: the source verified
    *group("export", lambda model: export("x", model), {}, [
        ("cut-short", "cut", "not a usable model folder: model.safetensors: cut short"),
        ("config-broken", "badjson", "badjson: not a usable model folder: config.json:3: not valid JSON"),
        ("untied-no-head", "untied", "tie_word_embeddings is false, and the weights have no lm_head.weight"),
    ]),
    # export's --out: what is not export's own is never replaced
    *group("export", export, {}, [
        ("out-under-a-file", "a-file/x", "a-file is a file"),
        ("users-folder", "x-users-folder", "x-users-folder/good-hf-fp16: already there and not written by verl-p40"),
        ("users-file", "x-users-file", "x-users-file/good-hf-fp16: already there and not written by verl-p40 export"),
        ("link-out", "x-link", "x-link/good-hf-fp16: a symbolic link; verl-p40 export writes only inside --out"),
        ("users-file-in-its-folder", "x-own", "x-own/good-hf-fp16/README.md: not written by verl-p40 export, and"),
    ]),
    (
        "file-export-users-gguf",
        export("x-gguf", "good", "--gguf", "f16"),
        {},
        "x-gguf/good-f16.gguf: already there and not written by verl-p40 export",
    ),
    # prep: rows no GSM8K file holds, named FILE:LINE
    *group("prep", prep, {}, [
        ("deep-nesting", "s-deep", "train.jsonl:2: not valid JSON for a row (nested too deeply)"),
        ("lone-surrogate", "s-surrogate", "train.jsonl:2: field 'question' holds an invalid Unicode escape (a lone"),
        ("duplicate-key", "s-duplicate", "train.jsonl:2: key 'answer' is given twice"),
        ("huge-line", "s-huge", "train.jsonl:2: a line of 3145765 bytes, not a GSM8K row"),
        ("utf16", "s-utf16", "train.jsonl:1: UTF-16 text (it starts with a UTF-16 byte-order mark); save the file as"),
    ]),
    # prep's --out: what is not prep's own is never replaced nor removed
    *group("prep", lambda out: prep("src", out), {}, [
        ("users-train", "p-users", "p-users/train.parquet: already there and not written by verl-p40 prep"),
        ("link", "p-link", "p-link/test.parquet: a symbolic link; verl-p40 prep writes only inside --out"),
        ("users-val", "p-val", "p-val/val.parquet: already there and not written by verl-p40 prep"),
    ]),
    # monitor's --out: a user's file of one of its names (a rotated part too), a link, a link for the ledger
    *group("monitor", monitor, {}, [
        ("users-csv", "m-users", "m-users/gpu.csv: already there and not written by verl-p40 monitor; move it away"),
        ("link", "m-link", "m-link/gpu.csv: a symbolic link; verl-p40 monitor writes only inside --out"),
        ("users-rotated-part", "m-rotated", "m-rotated/gpu.csv.2: already there and not written by verl-p40 monitor"),
        ("users-summary", "m-summary", "m-summary/gpu-summary.json: already there and not written by verl-p40"),
        ("ledger-link", "m-ledger", "m-ledger/.verl-p40-outputs.json: a symbolic link; verl-p40 monitor writes only"),
    ]),
    # monitor --plot: the picture beside the CSV, or --plot-out, never over a user's file nor through a link
    (
        "file-monitor-plot-users-picture",
        ["monitor", "--plot", f"{T}/m-plot/gpu.csv"],
        {},
        "m-plot/gpu.png: already there and not written by verl-p40 monitor; move it away (or remove it), or choose "
        "another --plot-out",
    ),
    (
        "file-monitor-plot-out-link",
        ["monitor", "--plot", f"{T}/m-plot/gpu.csv", "--plot-out", f"{T}/m-plot/link.png"],
        {},
        "m-plot/link.png: a symbolic link; verl-p40 monitor writes only inside --plot-out",
    ),
    # bench's --out: said before the random model is made (minutes of work), the GPU samples' folder beside it too
    *group("bench", bench, {}, [
        ("users-result", "b-users/bench.json", "b-users/bench.json: already there and not written by verl-p40 bench"),
        ("link", "b-link/bench.json", "b-link/bench.json: a symbolic link; verl-p40 bench writes only inside --out"),
        (
            "users-gpu-samples", "b-logs/bench.json",
            "b-logs/bench-logs/gpu/gpu-processes.csv: already there and not written by verl-p40 bench",
        ),
    ]),
    (
        "file-bench-users-result-in-logs",
        ["bench", "--profile", "p40", "--model", f"{T}/nomodel"],
        {"VERL_P40_LOGS": f"{T}/b-users"},
        "b-users/bench.json: already there and not written by verl-p40 bench; move it away (or remove it), or choose "
        "another --out",
    ),
    (
        "file-prep-summary-users-file",
        prep("src", "p", "--summary-json", f"{T}/a-file"),
        {},
        "a-file: already there and not written by verl-p40 prep; move it away (or remove it), or choose another "
        "--summary-json",
    ),
]  # fmt: skip


@pytest.mark.parametrize("name,args,env,expected", CASES, ids=[c[0] for c in CASES])
def test_bad_file_gets_one_line_and_changes_nothing(files, name, args, env, expected):
    check_case(files, args, env, expected)


def test_the_good_model_folder_passes_where_the_broken_ones_fail(files):
    """The cases above fail for the one defect each folder has: the folder they were copied from passes."""
    from verl_p40.models import verify

    assert verify.problems(files / "models" / "good") == [] and verify.problems(files / "models" / "other") == []
    assert verify.parameters(files / "models" / "good") == sum(t.size for t in tensors(CONFIG).values())
