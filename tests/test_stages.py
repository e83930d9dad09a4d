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
# "base" is what every stage may use, and what verl loads by name or by path (reward.py, memcap.py, patches/).
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
    "base": (0, ["__init__", "defaults", "options", "atomic", "outputs", "child", "reward", "memcap", "patches"]),
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


def test_the_reward_stands_alone():
    """verl loads reward.py by file path as a stand-alone module: it imports nothing of the package."""
    assert GRAPH["verl_p40.reward"] == set()


def test_the_checker_sees_an_arrow_back_up(tmp_path):
    """The checker itself: a lazy import from a lower stage to a higher one is found."""
    module, path = "verl_p40.gpu.nvml", tmp_path / "nvml.py"
    path.write_text("def f():\n    from verl_p40.plan import planner\n")
    assert _imports(module, path) == {"verl_p40.plan.planner"}
    assert STAGES[_stage("verl_p40.plan.planner")][0] > STAGES[_stage(module)][0]


def test_pyproject_ships_every_subpackage():
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    listed = set(re.findall(r'"(verl_p40(?:\.\w+)*)"', text.split("packages = [", 1)[1].split("]", 1)[0]))
    folders = {m for m, p in MODULES.items() if p.name == "__init__.py"}
    assert folders <= listed, f"not in pyproject.toml's packages: {sorted(folders - listed)}"
