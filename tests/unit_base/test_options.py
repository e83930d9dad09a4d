"""options.py: a dataclass field is the one source of its flag, default, environment variable and help."""

import argparse
from dataclasses import dataclass

import pytest

from verl_p40.options import add_arguments, from_args, option


@dataclass
class Demo:
    name: str = option("auto", "a name", env="DEMO_NAME")
    count: int = option(2, "how many", env="DEMO_COUNT", kind=int, low=1)
    ratio: float | None = option(None, "a ratio", kind=float, low=0, high=1, shown="none")
    mode: str = option("a", "a mode", choices=lambda: ["a", "b"])
    internal: list | None = None  # no option(): not a flag


class Raising(argparse.ArgumentParser):
    def error(self, message):
        raise ValueError(message)


def _parser(**kw):
    parser = Raising(prog="demo")
    add_arguments(parser, Demo, **kw)
    return parser


def test_flags_defaults_and_help_come_from_the_fields(monkeypatch):
    monkeypatch.delenv("DEMO_NAME", raising=False)
    monkeypatch.delenv("DEMO_COUNT", raising=False)
    parser = _parser()
    assert from_args(Demo, parser.parse_args([]), internal=[1]) == Demo(internal=[1])
    assert from_args(Demo, parser.parse_args(["--count", "5", "--mode", "b"])) == Demo(count=5, mode="b")
    text = parser.format_help()
    assert "a name [auto] ($DEMO_NAME)" in text and "a ratio [none]" in text and "--internal" not in text


def test_the_environment_gives_the_default_and_is_checked_like_a_flag(monkeypatch):
    monkeypatch.setenv("DEMO_NAME", "p40")
    monkeypatch.setenv("DEMO_COUNT", "7")
    assert from_args(Demo, _parser().parse_args([])) == Demo(name="p40", count=7)
    monkeypatch.setenv("DEMO_COUNT", "0")
    with pytest.raises(ValueError, match=r"'0' is not an integer from 1 \(also read from \$DEMO_COUNT\)"):
        _parser().parse_args([])
    with pytest.raises(ValueError, match="'2' is not a number from 0 to 1"):
        _parser().parse_args(["--ratio", "2"])


def test_only_and_skip_pick_fields():
    assert [a.dest for a in _parser(only=["count"])._actions if a.dest != "help"] == ["count"]
    assert "ratio" not in [a.dest for a in _parser(skip=["ratio"])._actions]
