"""No pandas.read_parquet in the project's code: on a fresh machine (issue 66: pandas 2.2.3, pyarrow 19.0.1, numpy
1.26.4) `python -c "import pandas as pd; pd.read_parquet(F)"` aborted at exit ("terminate called without an active
exception", exit 134) in 7-9 of 30 runs, pyarrow.parquet.read_table(F) in 0 of 30
(bench/results/parquet-reads-2026-12-06). The product, bench and tests read parquet with pyarrow."""

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# in shell scripts (python -c, heredocs): read_parquet as a name; our own helpers (gsm8k._read_parquet) are other names
SHELL_READ = re.compile(r"(?<![\w])read_parquet\b")


def _python_reads(text: str) -> list[int]:
    """Lines of Python code that call, name or import read_parquet (any module's: pd., pandas., dd.): the code, not
    its strings (bench/experiments/parquet_reads.py runs the old read as a string, to measure it)."""
    lines = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Attribute) and node.attr == "read_parquet":
            lines.append(node.lineno)
        elif isinstance(node, ast.Name) and node.id == "read_parquet":
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and any(alias.name == "read_parquet" for alias in node.names):
            lines.append(node.lineno)
    return sorted(set(lines))


def offenders(root: Path = REPO) -> list[str]:
    found = []
    for folder in ("app", "bench", "tests", "docker"):
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in (".py", ".sh") or "results" in path.relative_to(root).parts:
                continue
            text = path.read_text(errors="replace")
            lines = text.splitlines()
            if path.suffix == ".py":
                numbers = _python_reads(text)
            else:
                numbers = [k for k, line in enumerate(lines, 1) if SHELL_READ.search(line)]
            found += [f"{path.relative_to(root)}:{k}: {lines[k - 1].strip()}" for k in numbers]
    return found


def test_no_read_parquet_in_app_bench_tests_or_docker():
    assert offenders() == [], "read with pyarrow.parquet.read_table instead:\n" + "\n".join(offenders())


def test_the_check_finds_a_pandas_read(tmp_path):
    (tmp_path / "bench" / "lib").mkdir(parents=True)
    (tmp_path / "bench" / "lib" / "x.py").write_text("import pandas as pd\nrows = pd.read_parquet(path).head(4)\n")
    (tmp_path / "docker").mkdir()
    (tmp_path / "docker" / "y.sh").write_text('python -c "from pandas import read_parquet"\n')
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "ok.py").write_text("def _read_parquet(paths):\n    return pq.read_table(paths[0])\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_text("from pandas import read_parquet as rp\nBEFORE = 'pd.read_parquet(F)'\n")
    assert offenders(tmp_path) == [
        "bench/lib/x.py:2: rows = pd.read_parquet(path).head(4)",
        "tests/t.py:1: from pandas import read_parquet as rp",
        'docker/y.sh:1: python -c "from pandas import read_parquet"',
    ]
