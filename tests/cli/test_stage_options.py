"""Every stage's options are declared in the stage and taken whole (as trl's commands take their dataclass): the
command line is the one place that sees argparse's namespace; it builds the stage's frozen dataclass once, and the
stage's entry takes that object, typed, and never changes it."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import typing
from pathlib import Path

import pytest

import verl_p40
from verl_p40 import cli
from verl_p40.data import prep
from verl_p40.evaluation import evaluate
from verl_p40.gpu import monitor
from verl_p40.models import export

APP = Path(verl_p40.__file__).parent
DOOR = ("cli.py", "options.py")  # the parser, and `resolve`, which turns its namespace into a command's options


def _stage_modules() -> list[tuple[str, Path]]:
    paths = (p for p in sorted(APP.rglob("*.py")) if "configs" not in p.relative_to(APP).parts)
    return [(str(p.relative_to(APP)), p) for p in paths if str(p.relative_to(APP)) not in DOOR]


def _namespace_uses(name: str, path: Path) -> list[str]:
    """`argparse` imported, or a parameter annotated as a namespace or named `args` (how a namespace goes by)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import) and any(a.name == "argparse" for a in node.names):
            found.append(f"{name}:{node.lineno}: imports argparse")
        if isinstance(node, ast.ImportFrom) and node.module == "argparse":
            found.append(f"{name}:{node.lineno}: imports from argparse")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
                typed = arg.annotation is not None and "Namespace" in ast.unparse(arg.annotation)
                if typed or arg.arg == "args":
                    found.append(f"{name}:{node.lineno}: {node.name}({arg.arg})")
    return found


def test_no_stage_function_takes_a_namespace():
    found = [line for name, path in _stage_modules() for line in _namespace_uses(name, path)]
    assert found == []


# command -> the stage function cli.py hands its options to, and the package that declares them
STAGES = {
    "prep": (prep.main, "verl_p40.data"),
    "monitor": (monitor.main, "verl_p40.gpu"),
    "eval": (evaluate.run, "verl_p40.evaluation"),
    "export": (export.run, "verl_p40.models"),
}


@pytest.mark.parametrize("name", sorted(STAGES))
def test_a_stage_declares_the_options_it_takes_whole(name):
    function, package = STAGES[name]
    options = next(c.options for c in cli.COMMANDS if c.name == name)
    assert options.__module__.startswith(package + "."), f"{name}'s options live in {options.__module__}"
    assert dataclasses.is_dataclass(options) and options.__dataclass_params__.frozen, f"{name}'s options can change"
    first = next(iter(inspect.signature(function).parameters))
    assert typing.get_type_hints(function).get(first) is options


def test_prep_gets_its_options_whole_with_the_default_instruction(tmp_path, monkeypatch):
    from verl_p40.data.gsm8k import DEFAULT_INSTRUCTION
    from verl_p40.data.options import PrepOptions

    got = []
    monkeypatch.setattr(prep, "main", lambda *args, **kwargs: got.append((args, kwargs)) or 0)
    assert cli.main(["prep", "--source", str(tmp_path), "--out", str(tmp_path / "data"), "--limit", "5"]) == 0
    ((args, kwargs),) = got
    assert kwargs == {} and len(args) == 1 and isinstance(args[0], PrepOptions)
    assert (args[0].limit, args[0].instruction) == (5, DEFAULT_INSTRUCTION)
    assert cli.main(["prep", "--source", str(tmp_path), "--instruction", ""]) == 0
    assert got[-1][0][0].instruction == ""  # an empty instruction is the user's: nothing appended


def test_monitor_gets_its_options_whole(tmp_path, monkeypatch):
    from verl_p40.gpu.options import MonitorOptions

    got = []
    monkeypatch.setattr(monitor, "main", lambda *args, **kwargs: got.append((args, kwargs)) or 0)
    assert cli.main(["monitor", "--out", str(tmp_path), "--samples", "2", "--gpus", "0"]) == 0
    ((args, kwargs),) = got
    assert kwargs == {} and len(args) == 1 and isinstance(args[0], MonitorOptions)
    assert (args[0].out, args[0].samples, args[0].gpus) == (str(tmp_path), 2, (0,))


def _calls_of(name: str) -> list[str]:
    """The places in app/ that call `name` (a call, not a reference such as an option's `convert=`)."""
    found = []
    for rel, path in _stage_modules() + [(door, APP / door) for door in DOOR]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
                if called == name:
                    found.append(f"{rel}:{node.lineno}")
    return found


def test_gpus_is_parsed_once_by_its_declaration():
    """`--gpus` is turned into GPU indices once, where the options are resolved (its declaration's `convert`): no
    consumer parses the text again."""
    assert _calls_of("parse_gpus") == []


def _resolved(argv: list[str]):
    from verl_p40.options import resolve

    args = cli.build_parser().parse_args(argv)
    return resolve(args.command_spec.options, args)


def test_gpus_is_a_tuple_of_indices_or_none_for_all(monkeypatch):
    from verl_p40.gpu.options import MonitorOptions
    from verl_p40.plan.run_options import RunOptions

    monkeypatch.delenv("VERL_P40_GPUS", raising=False)
    for options in (RunOptions, MonitorOptions):
        assert typing.get_type_hints(options)["gpus"] == tuple[int, ...] | None
        assert options().gpus is None
    assert _resolved(["config", "--gpus", "2,0"]).gpus == (2, 0)
    assert _resolved(["config", "--gpus", "ALL"]).gpus is None
    assert _resolved(["config"]).gpus is None
    assert _resolved(["monitor", "--gpus", "1"]).gpus == (1,)
    monkeypatch.setenv("VERL_P40_GPUS", "0, 1")
    assert _resolved(["train"]).gpus == (0, 1)


def test_a_bad_gpus_is_said_in_the_same_line(monkeypatch, capsys):
    monkeypatch.setenv("VERL_P40_GPUS", "first")
    assert cli.main(["config", "--card", "p40"]) == 2
    assert capsys.readouterr().err.strip() == (
        "verl-p40 config: error: $VERL_P40_GPUS 'first': use all, or GPU indices as nvidia-smi numbers them (e.g. "
        "0,1) (the environment's value for --gpus: fix it or unset it)"
    )


def test_gguf_is_a_list_of_kinds_each_once():
    from verl_p40.models.options import ExportOptions

    assert typing.get_type_hints(ExportOptions)["gguf"] == list[str]
    assert ExportOptions().gguf == []
    assert _resolved(["export", "--gguf", "f16, q8_0,f16"]).gguf == ["f16", "q8_0"]
    assert _resolved(["export"]).gguf == []


def _attribute_assignments(path: Path) -> list[str]:
    """`x.attr = ...` (or `+=`), and `setattr(x, ...)`, anywhere in `path`, where x is a parameter of the function it
    stands in (whatever its name: the options a stage is handed, or anything else handed in), `self` left out."""
    found = []
    for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        handed = {a.arg for a in (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs)} - {
            "self"
        }
        for node in ast.walk(function):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AugAssign)
                else []
            )
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
                targets = [ast.Attribute(value=node.args[0], attr="?")] if node.args else []
            for target in targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                    if target.value.id in handed:
                        found.append(f"{path.name}:{node.lineno}: {target.value.id}.{target.attr}")
    return sorted(set(found))


# the assignments to a handed-in object that are not options, with the reason (file: the name assigned to)
HANDED_STATE = {"run/trainer.py": "watcher.failure"}  # the output watcher's own state, kept for the run's report


def test_no_function_of_the_package_changes_what_it_is_handed():
    """Options are never changed after the door (issue 70): no function of app/ (patches/ left out: verl's code)
    assigns an attribute of a parameter, whatever its name, but the state objects HANDED_STATE lists."""
    package = Path(cli.__file__).parent
    found = [
        f"{path.relative_to(package)}:{line}"
        for path in sorted(package.rglob("*.py"))
        if "patches" not in path.relative_to(package).parts
        for line in _attribute_assignments(path)
        if not line.endswith(f": {HANDED_STATE.get(str(path.relative_to(package)), '-')}")
    ]
    assert not found, "assigned to what a function was handed (build a new value, e.g. dataclasses.replace):\n" + (
        "\n".join(found)
    )


def test_the_assignment_check_sees_any_name_handed_in(tmp_path):
    code = tmp_path / "stage.py"
    code.write_text(
        "def run(opts, facts):\n    opts.model = 1\n    setattr(facts, 'gpus', ())\n    local = object()\n"
        "    local.x = 1\n\nclass A:\n    def f(self):\n        self.y = 2\n"
    )
    assert _attribute_assignments(code) == ["stage.py:2: opts.model", "stage.py:3: facts.?"]


def test_bench_declares_its_options_and_never_changes_the_users():
    from verl_p40.perf import bench

    options = next(c.options for c in cli.COMMANDS if c.name == "bench")
    assert options.__module__ == "verl_p40.perf.options"
    assert _attribute_assignments(Path(bench.__file__)) == []


def test_bench_runs_a_variant_of_the_users_options(tmp_path):
    from verl_p40.perf import bench

    user = _resolved(["bench", "--set", "a.b=1", "c.d=2", "--gpus", "0"])
    variant = bench.bench_options(user, tmp_path / "model", tmp_path, 3)
    assert (user.model, user.sets) != (variant.model, variant.sets)  # the user's are as the door built them
    assert user.sets == ["a.b=1", "c.d=2"] and variant.gpus == user.gpus == (0,)
    assert (variant.model, variant.checkpoints) == (str(tmp_path / "model"), str(tmp_path / "checkpoints"))
    assert variant.sets[:3] == ["a.b=1", "c.d=2", "trainer.total_training_steps=3"]  # the bench's come last
    assert variant.sets[-1] == "trainer.experiment_name=bench"


def test_a_plan_for_named_cards_takes_the_gpu_indices_given(monkeypatch, capsys):
    """`config --card NAME --gpus 2,3`: the cards you do not have are numbered as --gpus numbers them, not 0..n-1 (which
    ended in "this host has no GPU 2, 3 (it has 0, 1)")."""
    monkeypatch.delenv("VERL_P40_GPUS", raising=False)
    assert cli.main(["config", "--card", "a100-80gb", "--gpus", "2,3", "--overrides-only"]) == 0, capsys.readouterr()
    assert "trainer.n_gpus_per_node=2" in capsys.readouterr().out


def test_bench_takes_its_options_whole():
    """perf.bench.run(options, facts): the steps, the result's file, the kept model and the checks to skip are read from
    the options inside, not handed beside them (two sources of --steps)."""
    import inspect

    from verl_p40.perf import bench

    assert list(inspect.signature(bench.run).parameters) == ["options", "facts"]
