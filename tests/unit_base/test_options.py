"""options.py: a dataclass field is the one source of its flag, default, environment variable, checks and help; flags
are checked while parsing, environment values only after it (by `resolve`), and every number is finite."""

import argparse
from dataclasses import dataclass

import pytest

from verl_p40 import UserError
from verl_p40.options import FILE, FOLDER, add_arguments, number, number_problem, option, path_problem, resolve

called = []


def _modes():
    called.append("modes")
    return ["a", "b"]


def _even(value, origin):
    if value % 2:
        raise UserError(f"{origin} {value}: not even")


@dataclass
class Demo:
    name: str = option("auto", "a name", env="DEMO_NAME")
    count: int = option(2, "how many", env="DEMO_COUNT", kind=int, low=1, check=_even)
    ratio: float | None = option(None, "a ratio", env="DEMO_RATIO", kind=float, low=0, high=1, shown="none")
    mode: str = option("a", "a mode", env="DEMO_MODE", choices=_modes)
    out: str = option("out", "a folder", env="DEMO_ROOT", below="out", path=FOLDER)
    report: str | None = option(None, "a file", path=FILE, unless=("latest", "hf:"))
    source: str | None = option(None, "a folder that must be there", flag="--from", path=FOLDER, exists=True)
    loud: bool = option(False, "a switch", switch=True)
    tags: list[str] = option([], "repeatable", many=True, metavar="TAG")
    rest: list[str] = option([], "the rest", flag="", many=True, metavar="KEY=VALUE")
    internal: list | None = None  # no option(): not a flag


class Raising(argparse.ArgumentParser):
    def error(self, message):
        raise ValueError(message)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for name in ("DEMO_NAME", "DEMO_COUNT", "DEMO_RATIO", "DEMO_MODE", "DEMO_ROOT"):
        monkeypatch.delenv(name, raising=False)
    called.clear()


def _parser(**kw):
    parser = Raising(prog="demo")
    add_arguments(parser, Demo, **kw)
    return parser


def _resolve(argv, **values):
    return resolve(Demo, _parser().parse_args(argv), **values)


def test_flags_defaults_and_help_come_from_the_fields():
    assert _resolve([], internal=[1]) == Demo(internal=[1])
    got = _resolve(["--count", "4", "--mode", "b", "--loud", "--tags", "x", "--tags", "y", "k=1", "j=2"])
    assert got == Demo(count=4, mode="b", loud=True, tags=["x", "y"], rest=["k=1", "j=2"])
    text = _parser().format_help()
    assert "a name [auto] ($DEMO_NAME)" in text and "a ratio [none]" in text and "--internal" not in text
    assert "--from SOURCE" in text and "KEY=VALUE" in text


def test_the_parser_reads_no_environment_and_calls_no_choices(monkeypatch):
    """A bad value in .env must not break --help or parsing: it is read only by resolve, for this command."""
    monkeypatch.setenv("DEMO_COUNT", "soon")
    monkeypatch.setenv("DEMO_NAME", "from-env")
    parser = _parser()
    assert "[auto]" in parser.format_help() and "from-env" not in parser.format_help()
    parser.parse_args([])
    assert called == []  # a callable's choices (a folder listing) are looked at when checking, not when building
    with pytest.raises(UserError, match=r"^\$DEMO_COUNT: 'soon' is not an integer from 1 \(the environment's value "):
        resolve(Demo, parser.parse_args([]))


def test_a_flag_wins_over_the_environment_which_wins_over_the_default(monkeypatch):
    monkeypatch.setenv("DEMO_NAME", "p40")
    monkeypatch.setenv("DEMO_COUNT", "8")
    monkeypatch.setenv("DEMO_ROOT", "/srv/logs")
    assert _resolve([]) == Demo(name="p40", count=8, out="/srv/logs/out")
    assert _resolve(["--name", "x"]).name == "x"
    monkeypatch.setenv("DEMO_COUNT", "nan")  # a bad variable the flag replaces is never read
    assert _resolve(["--count", "6"]).count == 6
    monkeypatch.setenv("DEMO_COUNT", "")  # compose's ${X:-}: unset
    assert _resolve([]).count == 2


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e999", "NaN"])
def test_numbers_are_finite_from_a_flag_and_from_the_environment(monkeypatch, text):
    with pytest.raises(ValueError, match=rf"argument --ratio: '{text}' is not a finite number from 0 to 1"):
        _parser().parse_args([f"--ratio={text}"])
    monkeypatch.setenv("DEMO_RATIO", text)
    with pytest.raises(UserError, match=rf"^\$DEMO_RATIO: '{text}' is not a finite number from 0 to 1 .*--ratio"):
        _resolve([])


def test_number_problem_says_what_is_wanted():
    assert number_problem(" 3 ", int, 1) == (3, "")
    assert number_problem("0.5", float, 0, 1) == (0.5, "")
    assert number_problem("2", float, 0, 1)[1] == "'2' is not a number from 0 to 1"
    assert number_problem("1.5", int, 1)[1] == "'1.5' is not an integer from 1"
    assert number_problem("abc", float)[1] == "'abc' is not a number"
    assert number_problem("inf", float)[1] == "'inf' is not a finite number"
    with pytest.raises(argparse.ArgumentTypeError, match="'nan' is not a finite number from 0.05"):
        number(float, 0.05)("nan")


def test_choices_and_checks_are_the_same_for_a_flag_and_a_variable(monkeypatch):
    with pytest.raises(UserError, match=r"^--mode: invalid choice: 'c' \(choose from a, b\)$"):
        _resolve(["--mode", "c"])
    monkeypatch.setenv("DEMO_MODE", "c")
    with pytest.raises(UserError, match=r"^\$DEMO_MODE: invalid choice: 'c' .*for --mode: fix it or unset it\)$"):
        _resolve([])
    with pytest.raises(UserError, match=r"^--count 3: not even$"):
        _resolve(["--count", "3"])
    monkeypatch.setenv("DEMO_COUNT", "5")
    with pytest.raises(UserError, match=r"^\$DEMO_COUNT 5: not even \(the environment's value for --count"):
        _resolve(["--mode", "a"])


def test_paths_name_the_flag_or_the_variable(tmp_path, monkeypatch):
    a_file, folder = tmp_path / "f", tmp_path / "d"
    a_file.write_text("x")
    folder.mkdir()
    with pytest.raises(UserError, match=rf"^--out {a_file}: is a file, not a folder$"):
        _resolve(["--out", str(a_file)])
    with pytest.raises(UserError, match=rf"^--report {folder}: is a folder, not a file$"):
        _resolve(["--report", str(folder)])
    with pytest.raises(UserError, match=rf"^--from {tmp_path / 'nope'}: not a folder: it does not exist$"):
        _resolve(["--from", str(tmp_path / "nope")])
    monkeypatch.setenv("DEMO_ROOT", str(a_file))  # the variable names a folder the option's value is inside
    with pytest.raises(UserError, match=rf"^\$DEMO_ROOT {a_file / 'out'}: {a_file} is a file, so nothing can be"):
        _resolve([])
    assert _resolve(["--out", str(folder), "--report", "latest"]).report == "latest"  # not a path
    assert _resolve(["--out", str(folder), "--report", "hf:x/y", "--from", str(folder)]).source == str(folder)


def test_path_problem():
    assert path_problem("/", FOLDER) == "" and path_problem("/", FILE) == "is a folder, not a file"
    assert path_problem("/no/such/place", FILE) == ""
    assert path_problem("/no/such", FILE, exists=True) == "not a file: it does not exist"


def test_only_and_skip_pick_fields():
    assert [a.dest for a in _parser(only=["count"])._actions if a.dest != "help"] == ["count"]
    assert "ratio" not in [a.dest for a in _parser(skip=["ratio"])._actions]
    assert resolve(Demo, _parser(skip=["count"]).parse_args([])).count == 2  # not a flag here: the default


def test_a_field_given_by_the_caller_is_not_read(monkeypatch):
    monkeypatch.setenv("DEMO_COUNT", "soon")
    assert _resolve([], count=10).count == 10


def test_the_model_folder_follows_the_repository(tmp_path):
    """MODEL_REPO=Qwen/Qwen2.5-1.5B-Instruct is fetched to, trained from and evaluated against
    <VERL_P40_MODELS>/Qwen2.5-1.5B-Instruct (it was stored as .../Qwen2.5-0.5B-Instruct whatever the repository);
    VERL_P40_MODEL still names any folder. Fresh interpreters: the defaults are read when the CLI starts."""
    import os
    import subprocess
    import sys

    def folder(**env: str) -> str:
        code = "from verl_p40 import defaults; print(defaults.MODEL.get())"
        clean = {k: v for k, v in os.environ.items() if not k.startswith("VERL_P40_MODEL")}
        run = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        return run.stdout.strip()

    assert folder() == os.path.join("models", "Qwen2.5-0.5B-Instruct")
    assert folder(VERL_P40_MODELS="/models", VERL_P40_MODEL_REPO="Qwen/Qwen2.5-1.5B-Instruct") == (
        "/models/Qwen2.5-1.5B-Instruct"
    )
    assert folder(VERL_P40_MODELS="/models", VERL_P40_MODEL=str(tmp_path)) == str(tmp_path)
