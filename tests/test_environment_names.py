"""Every `VERL_P40_*` environment variable the project names is one that app/verl_p40/defaults.py declares, and the
workers' variables (`VERL_P40_WORKER_*`, `defaults.is_worker_setting`) are set by the plan only.

Where: app/ (every module), entrypoints/ (the compose services' scripts) and bench/ (.py and .sh; bench/results/ left
out: the commands as they ran, with the names of their day). A name counts wherever it is written: code, comments,
docstrings and usage text alike, so a renamed variable left in a script's usage line fails here as one in code does
(a script that sets a name nothing reads measures something else than it says: issue 70).

Declared: a string constant of defaults.py that is a whole name (`Default("VERL_P40_DATA", ...)`, `TF32_ENV = ...`,
the names of `ENVIRONMENT`), or the workers' prefix `VERL_P40_WORKER_` itself.

Set, for a worker's variable: `NAME=` in text (a shell assignment, an `export`, a usage line), and in Python an
assignment to a subscript keyed by it, a dict literal keyed by it, or `setenv`/`putenv`/`setdefault` with it, where
"it" is the name as a string or a constant defaults.py binds to it (under any name it is imported as). The plan's
steps (app/verl_p40/plan/) set them; `WORKER_SETTERS` lists the others allowed, with the reason.

Read, for a name a bench command sets for a bench script it runs (`NAME=value ... python3 bench/X.py`, in a script or
a usage line): an environment lookup of it (`environ.get`, `os.getenv`, `environ[...]`, by the name or a defaults.py
constant) in X or in a bench/lib or verl_p40 module X imports, at any depth.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULTS = REPO / "app" / "verl_p40" / "defaults.py"
PLAN = REPO / "app" / "verl_p40" / "plan"
NAME = re.compile(r"\bVERL_P40_[A-Z0-9_]+")
WORKER_PREFIX = "VERL_P40_WORKER_"
WORKER_SET_IN_TEXT = re.compile(
    r"(?:^|\s)(VERL_P40_WORKER_[A-Z0-9_]+)="
)  # a shell assignment, as a line or usage has it
WORKER_SETTERS = {  # file (from the repository root) -> why it may set a worker's variable
    "bench/lib/rollout_actor.py": "stands in for a trainer worker in its own process: hands the cap the check asks "
    "for (the user's variable) to memcap.apply(), which reads the workers' variable, as worker_hooks does",
}


def declared(path: Path = DEFAULTS) -> set[str]:
    """The VERL_P40_ names `path` declares: its string constants that are a whole name."""
    return {
        node.value
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAME.fullmatch(node.value)
    }


def project_files(root: Path = REPO) -> list[Path]:
    files = [*(root / "app").rglob("*.py"), *(root / "entrypoints").glob("*")]
    files += [p for p in (root / "bench").rglob("*") if p.suffix in (".py", ".sh")]
    return sorted(p for p in files if p.is_file() and "results" not in p.relative_to(root).parts)


def undeclared(path: Path, names: set[str], root: Path = REPO) -> list[str]:
    """`file:line: NAME` for each name in `path` that `names` does not hold."""
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        found += [f"{path.relative_to(root)}:{number}: {n}" for n in NAME.findall(line) if n not in names]
    return found


def _aliases(tree: ast.AST, constants: set[str]) -> set[str]:
    return {
        alias.asname
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.name in constants and alias.asname
    }


@functools.cache
def _package_worker_constants(worker_names: frozenset[str]) -> frozenset[str]:
    """The names under which the package holds a constant of defaults.py bound to a worker's variable: defaults.py's
    own, and any name a module imports it as (memcap's `ENV`, read as `memcap.ENV` elsewhere)."""
    constants = {
        target.id
        for node in ast.walk(ast.parse(DEFAULTS.read_text(encoding="utf-8")))
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value in worker_names
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    for path in (REPO / "app").rglob("*.py"):
        constants |= _aliases(ast.parse(path.read_text(encoding="utf-8")), constants)
    return frozenset(constants)


def _is_worker_key(node: ast.AST | None, constants: set[str]) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.startswith(WORKER_PREFIX)
    if isinstance(node, ast.Attribute):
        return node.attr in constants
    return isinstance(node, ast.Name) and node.id in constants


def worker_sets(path: Path, worker_names: set[str]) -> list[int]:
    """The lines of `path` that set a worker's variable, as the module docstring says."""
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = [n for n, line in enumerate(text.splitlines(), 1) if WORKER_SET_IN_TEXT.search(line)]
    if path.suffix != ".py":
        return lines
    tree = ast.parse(text)
    constants = set(_package_worker_constants(frozenset(worker_names)))
    constants |= _aliases(tree, constants)
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Subscript) and _is_worker_key(t.slice, constants) for t in targets):
            lines.append(node.lineno)
        elif isinstance(node, ast.Dict) and any(_is_worker_key(k, constants) for k in node.keys):
            lines.append(node.lineno)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("setenv", "putenv", "setdefault")
            and node.args
            and _is_worker_key(node.args[0], constants)
        ):
            lines.append(node.lineno)
    return sorted(set(lines))


def test_every_name_is_one_defaults_declares():
    names = declared()
    wrong = [line for path in project_files() for line in undeclared(path, names)]
    assert not wrong, "not declared in app/verl_p40/defaults.py (a stale or misspelt name?):\n" + "\n".join(wrong)
    assert len(project_files()) > 100 and {"VERL_P40_DATA", WORKER_PREFIX} <= names  # the check reads the project


def test_every_listed_name_is_used():
    """A name of defaults.ENVIRONMENT that nothing else names (nor the image or compose) is a stale declaration."""
    from verl_p40.defaults import ENVIRONMENT

    text = "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in project_files() if p != DEFAULTS)
    text += "".join((REPO / name).read_text(encoding="utf-8") for name in ("Dockerfile", "docker-compose.yml"))
    unused = sorted(set(ENVIRONMENT) - set(NAME.findall(text)))
    assert not unused, f"declared in defaults.py and named nowhere else: {unused}"


def test_only_the_plan_sets_the_workers_variables():
    worker_names = {n for n in declared() if n.startswith(WORKER_PREFIX)}
    wrong = [
        f"{path.relative_to(REPO)}:{line}"
        for path in project_files()
        if PLAN not in path.parents and str(path.relative_to(REPO)) not in WORKER_SETTERS
        for line in worker_sets(path, worker_names)
    ]
    assert not wrong, "a VERL_P40_WORKER_ variable set outside the plan (set the user's name instead):\n" + "\n".join(
        wrong
    )
    planned = [line for path in sorted(PLAN.rglob("*.py")) for line in worker_sets(path, worker_names)]
    assert planned, "the check no longer sees the plan set the workers' variables"


def test_each_worker_setter_still_sets_one():
    worker_names = {n for n in declared() if n.startswith(WORKER_PREFIX)}
    stale = [name for name in WORKER_SETTERS if not worker_sets(REPO / name, worker_names)]
    assert not stale, f"no longer set a worker's variable (take them out of WORKER_SETTERS): {stale}"


def test_the_checks_see_a_stale_name_and_a_worker_set_in_usage_text(tmp_path):
    """The bench lines of issue 70, as broken copies: a GPU script that sets a name nothing declares (the workers' cap
    under an old name), and a usage line that sets the workers' own variable."""
    (tmp_path / "bench" / "experiments").mkdir(parents=True)
    script = tmp_path / "bench" / "experiments" / "check_gpu.sh"
    script.write_text('VERL_P40_MEMORY_CAP_GB=24 python3 bench/experiments/check.py --config "$CONFIG"\n')
    usage = tmp_path / "bench" / "experiments" / "check.py"
    usage.write_text(
        '"""Run:\n    PASCAL_MASK=1 VERL_P40_WORKER_MEMORY_CAP_GB=24 python3 check.py\n'
        'when `VERL_P40_WORKER_TF32=1`\n"""\n'
    )
    names = declared()
    assert undeclared(script, names, tmp_path) == ["bench/experiments/check_gpu.sh:1: VERL_P40_MEMORY_CAP_GB"]
    workers = {n for n in names if n.startswith(WORKER_PREFIX)}
    assert worker_sets(usage, workers) == [2] and worker_sets(script, workers) == []
    code = tmp_path / "setter.py"
    code.write_text(
        "import os\nfrom verl_p40.defaults import WORKER_MEMORY_CAP_ENV as CAP\nfrom verl_p40 import defaults\n"
        "os.environ[CAP] = '24'\nenv = {defaults.TF32_ENV: '1'}\nos.environ.setdefault('VERL_P40_WORKER_X', '1')\n"
        "os.environ.get(defaults.TF32_ENV)\n"
    )
    assert worker_sets(code, workers) == [4, 5, 6]


# ------------------------------------------------------------------ a name set for a script is one that script reads

SETS = re.compile(r"(?:^|\s)(VERL_P40_[A-Z0-9_]+)=")
RUNS = re.compile(r"\bpython3?\s+(bench/\S+\.py)\b")


def _commands(path: Path) -> list[tuple[int, str]]:
    """(first line, the command) for each command line of `path`, continuation lines (a trailing backslash, doubled
    in a docstring) joined."""
    found, start, parts = [], None, []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        start = start or number
        stripped = line.rstrip()
        parts.append(stripped.rstrip("\\"))
        if not stripped.endswith("\\"):
            found.append((start, " ".join(parts)))
            start, parts = None, []
    return found


def _constants() -> dict[str, str]:
    """defaults.py's constants bound to a VERL_P40_ name: constant -> name."""
    return {
        target.id: node.value.value
        for node in ast.walk(ast.parse(DEFAULTS.read_text(encoding="utf-8")))
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        and NAME.fullmatch(node.value.value)
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def _module_path(module: str, root: Path) -> Path | None:
    parts = module.split(".")
    bases = {"verl_p40": root / "app", "lib": root / "bench"}
    if parts[0] not in bases:
        return None
    stem = bases[parts[0]].joinpath(*parts)
    return next((p for p in (stem.with_suffix(".py"), stem / "__init__.py") if p.is_file()), None)


def _environ_reads(tree: ast.AST, constants: dict[str, str]) -> set[str]:
    """The VERL_P40_ names a module reads from the environment: `environ.get(N)`, `os.getenv(N)`, `environ[N]`, with N
    a string or a constant of defaults.py under the name the module imports it as."""
    bound = dict(constants)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "verl_p40.defaults":
            bound |= {(a.asname or a.name): constants[a.name] for a in node.names if a.name in constants}

    def name_of(node: ast.AST) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        key = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        return bound.get(key)

    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            owner = ast.unparse(node.func.value)
            if (node.func.attr in ("get", "pop") and owner.endswith("environ")) or node.func.attr == "getenv":
                found.add(name_of(node.args[0]))
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("environ"):
            found.add(name_of(node.slice))
    return {n for n in found if n}


def script_reads(script: Path, root: Path = REPO) -> set[str]:
    """The VERL_P40_ names `script` reads from the environment, itself or through the bench/lib and verl_p40 modules
    it imports (at any depth)."""
    constants, seen, todo, names = _constants(), set(), [script], set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names |= _environ_reads(tree, constants)
        for node in ast.walk(tree):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            todo += [p for m in modules if (p := _module_path(m, root))]
    return names


def unread_sets(path: Path, root: Path = REPO) -> list[str]:
    """`file:line: NAME for bench/X.py` for each VERL_P40_ name a command of `path` sets for a bench script it runs
    (`NAME=value ... python3 bench/X.py`) that the script does not read (it would measure without it)."""
    found = []
    for line, command in _commands(path):
        ran = RUNS.search(command)
        if not ran or not (root / ran.group(1)).is_file():
            continue
        reads = script_reads(root / ran.group(1), root)
        found += [
            f"{path.relative_to(root)}:{line}: {n} for {ran.group(1)}" for n in SETS.findall(command) if n not in reads
        ]
    return found


def test_a_name_set_for_a_bench_script_is_one_the_script_reads():
    """Issue 70: rollout_log_probs_gpu.sh and rollout_log_probs.py's usage set the product's cap for a script whose
    actor read only the workers' variable, so the 2026-12-05 agreement ran uncapped while its README said capped."""
    wrong = [line for path in project_files() if "bench" in path.relative_to(REPO).parts for line in unread_sets(path)]
    assert not wrong, "set for a script that never reads it (read it, or set the name it reads):\n" + "\n".join(wrong)
    checked = [c for p in project_files() for _, c in _commands(p) if RUNS.search(c) and SETS.search(c)]
    assert len(checked) >= 3, checked  # the check sees the bench lines that set a name for a script
