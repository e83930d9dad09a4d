"""The plan reads the disk and the environment once, at the door, into `Inputs` (plan/inputs.py), beside `Facts`: the
model's config.json, the data folder (its validation slice, the parquet files' rows, prep's manifest, the prompts'
lengths by the model's tokenizer) and the allocator's variable. While planning with a ready Inputs, no file the run
names is opened, no parquet read and no variable of the run's read; no module of plan/ but inputs.py calls a reader
of the run's folders or the environment (what the others read is listed in `LIBRARY`, with its reason). A plan for
a card you do not have takes `Inputs.absent()`: nothing of the folders of the machine printing it.
"""

from __future__ import annotations

import ast
import builtins
import io
import json
import os
from pathlib import Path

import pytest

from verl_p40.plan.facts import Facts
from verl_p40.plan.inputs import ALLOCATOR_ENV, Inputs, Prompts
from verl_p40.plan.planner import plan
from verl_p40.plan.run_options import RunOptions

PLAN = Path(__file__).resolve().parents[2] / "app" / "verl_p40" / "plan"
HOME = "inputs.py"
# plan/ modules that read files, and why that is no read of the run's folders or of this machine
LIBRARY = {
    "facts.py": "the machine's GPUs and packages: Facts, the sibling of Inputs",
    "profiles.py": "the profiles shipped with the package (or $VERL_P40_PROFILES_DIR's): the plan's library",
    "algorithms.py": "the recipes beside the profiles (profiles.config_dir)",
    "run_options.py": "the shipped recipes' and profiles' names, for --help",
    "memory.py": "Shape.of_folder: bench's and the tests' reader of a model folder; no plan step calls it",
}
READERS = {
    "open", "read_text", "read_bytes", "is_file", "is_dir", "exists", "glob", "iterdir", "stat", "environ", "getenv",
    "ParquetFile", "read_table", "read_json", "read_manifest", "load_tokenizer", "from_pretrained", "json",
    "of_folder", "parquet_rows", "model_parameters",
}  # fmt: skip


def _readers(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        if name in READERS:
            found.append((node.lineno, name))
    return found


def test_no_module_of_the_plan_but_inputs_reads_the_disk_or_the_environment():
    found = {
        f"{path.name}:{line}: {name}"
        for path in sorted(PLAN.glob("*.py"))
        if path.name != HOME and path.name not in LIBRARY
        for line, name in _readers(path)
    }
    assert not found, f"read the run's folders or the environment in plan/inputs.py (Inputs), not in: {sorted(found)}"
    assert _readers(PLAN / HOME)  # the check sees the readers where they are


def _data(folder: Path, held_out: bool = True) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir()
    prompt = [{"role": "user", "content": "What is 2 + 3?"}]
    for split, rows in (("train", 300), ("test", 40), *((("val", 30),) if held_out else ())):
        pq.write_table(pa.table({"prompt": [prompt] * rows}), folder / f"{split}.parquet")
    return folder


def test_the_door_reads_the_model_the_data_folder_and_the_allocator_once(tmp_path, tokenizer_dir, monkeypatch):
    monkeypatch.setenv(ALLOCATOR_ENV, "expandable_segments:False")
    data = _data(tmp_path / "data")
    inputs = Inputs.read(RunOptions(model=str(tokenizer_dir), data=str(data)))
    assert inputs.model["hidden_size"] == 896 and inputs.held_out and inputs.allocator == "expandable_segments:False"
    assert inputs.rows == {str(data / "train.parquet"): 300, str(data / "val.parquet"): 30}
    assert inputs.prompts.longest is None and len(inputs.prompts.lengths) == 300  # counted: no manifest says
    assert Inputs.absent() == Inputs(here=False) and Inputs.absent().prompts == Prompts() and Inputs().here
    # the run's own filter off: no prompt is counted (nor the tokenizer loaded), as the schedule counts none then
    unfiltered = RunOptions(model=str(tokenizer_dir), data=str(data), sets=["data.filter_overlong_prompts=false"])
    assert Inputs.read(unfiltered).prompts == Prompts()


def test_the_runs_own_data_files_are_read_as_hydra_reads_them(tmp_path, tokenizer_dir):
    """`--set data.val_files='/a b/val.parquet'`: the rows are those of the file the composed config names (quotes
    off), so the plan counts the validation questions; a raw reading of the text kept the quotes and found none."""
    data = _data(tmp_path / "data")
    moved = tmp_path / "a b"
    moved.mkdir()
    (data / "val.parquet").rename(moved / "val.parquet")
    options = RunOptions(model=str(tokenizer_dir), data=str(data), sets=[f"data.val_files='{moved / 'val.parquet'}'"])
    assert Inputs.read(options).rows.get(str(moved / "val.parquet")) == 30
    run = plan(options, Facts.of_card("p40"))
    assert run.validation_questions == 30


@pytest.fixture
def watch_reads(monkeypatch, tmp_path, tokenizer_dir):
    """Starts watching what is read of the folders under tmp_path and the model's, of parquet files and of the
    environment; returns the list the reads go into."""
    roots, seen = (str(tmp_path), str(tokenizer_dir)), []

    def watch(name, real):
        def watched(*args, **kwargs):
            where = str(args[0]) if args else ""
            if real is None or where.startswith(roots):
                seen.append(f"{name}({where})")
            return real(*args, **kwargs) if real else None

        return watched

    def start() -> list[str]:
        import pyarrow.parquet as pq

        for name in ("is_file", "is_dir", "exists", "read_text", "read_bytes", "open", "stat", "glob"):
            monkeypatch.setattr(Path, name, watch(f"Path.{name}", getattr(Path, name)))
        monkeypatch.setattr(builtins, "open", watch("open", builtins.open))
        monkeypatch.setattr(io, "open", watch("io.open", io.open))
        for name in ("ParquetFile", "read_table"):
            monkeypatch.setattr(pq, name, watch(f"pq.{name}", None))
        monkeypatch.setattr(os, "environ", _Environ(os.environ, seen))
        return seen

    return start


class _Environ(dict):
    def __init__(self, values, seen: list[str]):
        super().__init__(values)
        self.seen = seen

    def __getitem__(self, key):
        self.seen.append(f"${key}")
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.seen.append(f"${key}")
        return super().get(key, default)


def test_planning_with_ready_inputs_reads_no_file_of_the_run_and_no_variable(tmp_path, tokenizer_dir, watch_reads):
    options = RunOptions(profile="p40", model=str(tokenizer_dir), data=str(_data(tmp_path / "data")))
    inputs = Inputs.read(options)  # the door
    reads = watch_reads()
    run = plan(options, Facts.of_card("p40"), inputs)
    assert [r for r in reads if r != "$VERL_P40_PROFILES_DIR"] == []  # the profiles' library: LIBRARY
    assert run.validation_questions == 30 and run.inputs is inputs
    assert any("300 rows" in note for note in run.notes) and any("val.parquet" in note for note in run.notes)


def test_a_plan_for_a_card_you_do_not_have_takes_nothing_of_the_folders_here(tmp_path, tokenizer_dir, capsys):
    from verl_p40 import cli

    data = _data(tmp_path / "data")
    (data / ".verl-p40-data.json").write_text(json.dumps({"outputs": {}}))
    args = ["config", "--card", "p40", "--model", str(tokenizer_dir), "--overrides-only"]
    assert cli.main([*args, "--data", str(data)]) == 0
    here = capsys.readouterr()
    assert cli.main([*args, "--data", str(tmp_path / "no-data")]) == 0
    nowhere = capsys.readouterr()
    assert here.out.replace(str(data), "D") == nowhere.out.replace(str(tmp_path / "no-data"), "D")
    assert "val.parquet" not in here.out and "not readable here" not in here.err  # it is: it was not read
    assert f"{data}/train.parquet is not read: a plan for --card takes no files of this machine" in here.err


def test_the_doctor_plans_with_the_inputs_train_reads_and_reads_them_once(tmp_path, tokenizer_dir, monkeypatch):
    """The doctor runs the plan the trainer will (issue 68): the same Inputs, made the same way, read once."""
    from verl_p40.doctor.context import Context

    options = RunOptions(profile="p40", model=str(tokenizer_dir), data=str(_data(tmp_path / "data")))
    trainers = plan(options, Facts.of_card("p40"))  # as `train` plans: Inputs.read(options) at the door
    reads, read = [], Inputs.read.__func__
    monkeypatch.setattr(Inputs, "read", classmethod(lambda cls, o: reads.append(o) or read(cls, o)))
    ctx = Context(options, facts=Facts.of_card("p40"))
    doctors = ctx.plan()
    assert ctx.inputs() is doctors.inputs and reads == [options]
    assert doctors.inputs == trainers.inputs and doctors.overrides == trainers.overrides
    assert Context(options, run=trainers).inputs() is trainers.inputs and reads == [options]  # handed in: not read
