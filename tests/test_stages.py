"""The package's stage order (docs/architecture.md), read from the code's own imports: every import runs down the
stages or stays inside one stage, and no two modules import each other in a circle (lazy imports inside functions
count too). An arrow back up, or one between two stages of the same level, fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "app" / "verl_p40"

# Top first. A stage may import the stages of the levels below its own; never one above it, nor a stage beside it.
# "base" is what every stage may use, and what verl loads by name or by path (reward.py, worker_hooks.py, patches/).
# Inside base the same rule holds between the levels of BASE_LEVELS: a base module imports only lower ones.
BASE_LEVELS = {
    "__init__": 0,  # UserError, the pinned verl version
    "defaults": 0,
    "atomic": 0,
    "child": 0,
    "reward": 0,  # loaded by verl by file path: it stands alone
    "options": 1,  # option declarations (UserError)
    "state_files": 2,  # the files verl-p40 reads back, checked as read (UserError; the run folder's reader of patches)
    "outputs": 3,  # output folders (atomic writes, their ledgers read as state files)
    "patches": 1,  # the verl 0.5.0 patch set (atomic writes, the worker settings of defaults)
    "memcap": 2,  # the memory cap's rule and its application (defaults, options)
    "worker_hooks": 3,  # what verl's workers import: the memory cap, TF32, cuDNN attention
}
STAGES = {
    "cli": (6, ["cli", "cli_options"]),
    "perf": (5, ["perf"]),
    "doctor": (4, ["doctor"]),
    "evaluation": (4, ["evaluation"]),
    "run": (3, ["run"]),
    "plan": (2, ["plan"]),
    "data": (1, ["data"]),
    "models": (1, ["models"]),
    "gpu": (1, ["gpu"]),
    "base": (0, list(BASE_LEVELS)),
}
STAGE_OF = {part: stage for stage, (_, parts) in STAGES.items() for part in parts}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _stage(module: str) -> str:
    parts = module.split(".")
    return STAGE_OF[parts[1] if len(parts) > 1 else "__init__"]


def _names_a_module(node: ast.AST) -> bool:
    """`importlib.import_module("verl_p40.x")` or `__import__("verl_p40.x")`: an import all the same."""
    if not isinstance(node, ast.Call) or not node.args:
        return False
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    first = node.args[0]
    return (
        called in ("import_module", "__import__") and isinstance(first, ast.Constant) and isinstance(first.value, str)
    )


def _base_part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(module: str, path: Path) -> set[str]:
    """The package's modules that `module` imports, at the top or inside a function."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            # `from PKG import NAME`: the submodule NAME where there is one, else PKG itself
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        elif _names_a_module(node):
            names = [node.args[0].value]
        else:
            continue
        for name in names:
            while name and name not in MODULES:  # `import a.b.c` also imports a.b and a: the deepest is enough
                name = name.rpartition(".")[0]
            if name.startswith("verl_p40") and name != module:
                found.add(name)
    return found


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}


def test_every_module_has_a_stage():
    assert {_stage(m) for m in MODULES} <= set(STAGES)


def test_imports_run_down_the_stages():
    wrong = []
    for module, targets in GRAPH.items():
        stage = _stage(module)
        for target in sorted(targets):
            other = _stage(target)
            if other != stage and STAGES[other][0] >= STAGES[stage][0]:
                wrong.append(f"{module} ({stage}) -> {target} ({other})")
    assert not wrong, "imports up or across the stages:\n" + "\n".join(wrong)


def test_no_import_circles():
    circles, state = [], {}  # state: 1 on the current path, 2 done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(GRAPH[module]):
            if state.get(target) == 1:
                circles.append(" -> ".join(path[path.index(target) :] + [target]))
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module, [module])
    assert not circles, "import circles:\n" + "\n".join(circles)


def test_the_graph_is_the_package_s_real_one():
    """The checks above pass on an empty graph: the graph must hold the package's arrows, among them ones known to be
    there (the CLI plans runs; the planner reads profiles; the trainer process reads the trainer log)."""
    assert len(MODULES) > 40 and sum(len(targets) for targets in GRAPH.values()) > 80
    assert "verl_p40.plan.planner" in GRAPH["verl_p40.cli"]
    assert "verl_p40.plan.profiles" in GRAPH["verl_p40.plan.planner"]
    assert "verl_p40.run.trainer_log" in GRAPH["verl_p40.run.trainer"]


def test_the_base_modules_import_down_their_levels():
    wrong = []
    for module, targets in GRAPH.items():
        if _stage(module) != "base":
            continue
        for target in sorted(targets):
            if _stage(target) == "base" and _base_part(target) != _base_part(module):
                if BASE_LEVELS[_base_part(target)] >= BASE_LEVELS[_base_part(module)]:
                    wrong.append(f"{module} ({BASE_LEVELS[_base_part(module)]}) -> {target}")
    assert not wrong, "imports up or across the base levels:\n" + "\n".join(wrong)
    assert "verl_p40.memcap" in GRAPH["verl_p40.worker_hooks"] and "verl_p40.atomic" in GRAPH["verl_p40.outputs"]


def test_the_reward_stands_alone():
    """verl loads reward.py by file path as a stand-alone module: it imports nothing of the package."""
    assert GRAPH["verl_p40.reward"] == set()


def test_the_checker_sees_an_arrow_back_up(tmp_path):
    """The checker itself: a lazy import from a lower stage to a higher one is found."""
    module, path = "verl_p40.gpu.nvml", tmp_path / "nvml.py"
    path.write_text("def f():\n    from verl_p40.plan import planner\n")
    assert _imports(module, path) == {"verl_p40.plan.planner"}
    assert STAGES[_stage("verl_p40.plan.planner")][0] > STAGES[_stage(module)][0]
    path.write_text('import importlib\n\ndef f():\n    return importlib.import_module("verl_p40.cli")\n')
    assert _imports(module, path) == {"verl_p40.cli"}  # an import by name counts as one


def test_pyproject_ships_every_subpackage():
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    listed = set(re.findall(r'"(verl_p40(?:\.\w+)*)"', text.split("packages = [", 1)[1].split("]", 1)[0]))
    folders = {m for m, p in MODULES.items() if p.name == "__init__.py"}
    assert folders <= listed, f"not in pyproject.toml's packages: {sorted(folders - listed)}"


# ------------------------------------------------------------------------------------------------ function length

LONGEST = 60  # lines a function or method of app/ may have: end_lineno - lineno + 1, its def line, docstring and
# body included (decorators not counted); a nested function counts inside its outer one and on its own


def long_functions(source: str, name: str) -> list[str]:
    """`name:line function (N lines)` for each function or method in `source` longer than LONGEST."""
    return [
        f"{name}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > LONGEST
    ]


def test_no_function_in_app_is_over_60_lines():
    """Every offender is listed, so a merge that shortens one can be read off the failure."""
    over = [
        line
        for path in MODULES.values()
        for line in long_functions(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))
    ]
    assert not over, f"functions over {LONGEST} lines (split them):\n" + "\n".join(over)
    assert len(MODULES) > 40  # the check reads the package


def test_the_length_checker_counts_docstring_and_nested_functions():
    body = "    x = 1\n" * (LONGEST - 2)
    assert long_functions(f'def f():\n    """doc"""\n{body}', "m.py") == []  # LONGEST lines, docstring included
    nested = 'class C:\n    def g(self):\n        """doc"""\n        def h():\n            pass\n'
    assert long_functions(nested + body.replace("    x", "        x"), "m.py") == ["m.py:2 g (62 lines)"]


def _architecture_rows() -> dict[str, set[str]]:
    """docs/architecture.md's stage table: {stage: the files and folders its folder column names}."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].isdigit():
            rows[cells[1]] = set(re.findall(r"`([^`]+)`", cells[2]))
    return rows


def test_the_architecture_page_names_every_folder_and_module():
    """The page's folder table is the package as it stands: a folder or module missing from it (or named in another
    folder's row), or one it names that is gone, fails here."""
    rows = list(_architecture_rows().values())
    missing, wanted = [], set()
    for path in MODULES.values():
        parts = path.relative_to(PACKAGE).parts
        if len(parts) == 1:  # a top-level module: cli.py, memcap.py, ...
            names, row = {parts[0]}, next((r for r in rows if parts[0] in r), set())
        else:  # a folder's module is named in the row that names its folder (patches/ as one folder)
            folder = f"{parts[0]}/"
            names = {folder} | ({parts[-1]} if parts[-1] != "__init__.py" and parts[0] != "patches" else set())
            row = next((r for r in rows if folder in r), set())
        wanted |= names
        missing += [f"{'/'.join(parts[:-1] + (name,)) if name != parts[0] + '/' else name}" for name in names - row]
    named = set().union(*rows)
    assert not missing, f"docs/architecture.md's folder table misses: {sorted(set(missing))}"
    assert not named - wanted, f"docs/architecture.md's folder table names what is not there: {sorted(named - wanted)}"


# ------------------------------------------------------------------------------------------------ bench/ beside it

BENCH = REPO / "bench"
BENCH_FILES = sorted(p for p in BENCH.rglob("*.py") if "results" not in p.relative_to(BENCH).parts)
# what a bench file may import of bench/: the helpers of bench/lib/ (bench/ is on every bench script's path)
BENCH_HELPERS = {"lib"} | {f"lib.{p.stem}" for p in (BENCH / "lib").glob("*.py") if p.stem != "__init__"}
BENCH_SCRIPTS = {p.stem for p in BENCH_FILES if p.parent.name != "lib"}  # run, never imported


def _top_imports(path: Path) -> set[str]:
    """Every module name `path` imports (absolute imports, at the top or inside a function; import_module strings)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names if node.module == "lib"}
        elif _names_a_module(node):
            found.add(node.args[0].value)
    return found


def test_bench_imports_the_package_and_the_package_never_bench():
    """bench/ uses the product; the product never uses bench/ (a benchmark may change: what ships may not need it)."""
    bench_names = BENCH_HELPERS | BENCH_SCRIPTS
    wrong = [
        f"{path.relative_to(REPO)} -> {name}"
        for path in MODULES.values()
        for name in _top_imports(path)
        if name.split(".")[0] in bench_names or name.startswith("bench")
    ]
    assert not wrong, "the package imports bench/:\n" + "\n".join(wrong)
    stale = [
        f"{path.relative_to(REPO)} -> {name}"
        for path in BENCH_FILES
        for name in _top_imports(path)
        if name.startswith("verl_p40.") and name not in MODULES and name.rpartition(".")[0] not in MODULES
    ]
    assert not stale, "bench/ imports package modules that are not there:\n" + "\n".join(stale)


def test_bench_scripts_share_helpers_through_bench_lib_only():
    """A helper two scripts need is a module of bench/lib/, never an experiment or benchmark imported as a library."""
    wrong = [
        f"{path.relative_to(REPO)} -> {name}"
        for path in BENCH_FILES
        for name in _top_imports(path)
        if name.split(".")[0] in BENCH_SCRIPTS or (name.split(".")[0] == "lib" and name not in BENCH_HELPERS)
    ]
    assert not wrong, "bench/ imports a script, or a helper that is not in bench/lib/:\n" + "\n".join(wrong)
    assert "lib.device_runs" in _top_imports(BENCH / "scale_run.py")  # the check sees the real imports


# bench/ folders the length rule leaves out, and why
BENCH_LONG_EXEMPT = {
    "experiments": "one-off checks of past work, each kept as it made its committed result so that the result can be "
    "remade; none is run again as a product benchmark, and splitting one would change code no result says it ran",
}


def test_no_function_in_bench_lib_or_the_benchmarks_is_over_60_lines():
    """The product's benchmarks (bench/*.py), the device staging and the helpers of bench/lib/ are held to app/'s
    rule; bench/experiments/ is exempt (BENCH_LONG_EXEMPT says why)."""
    held = [p for p in BENCH_FILES if p.relative_to(BENCH).parts[0] not in BENCH_LONG_EXEMPT]
    over = [
        line for path in held for line in long_functions(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))
    ]
    assert not over, f"functions over {LONGEST} lines (split them):\n" + "\n".join(over)
    assert BENCH / "lib" / "learning_report.py" in held and BENCH / "scale_run.py" in held  # the check reads them


def test_the_bench_checker_sees_a_script_imported_as_a_library(tmp_path):
    path = tmp_path / "new_run.py"
    path.write_text("def f():\n    from generations import mask_env\n")
    assert "generations" in _top_imports(path) and "generations" in BENCH_SCRIPTS
