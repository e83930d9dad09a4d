"""README.md and README.zh-CN.md name only commands and flags the CLI has (a renamed or removed flag fails here, not
for a user), and both name every command."""

import re

import pytest

from conftest import REPO
from verl_p40.cli import build_parser


def _commands() -> dict[str, set[str]]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return {name: {opt for action in p._actions for opt in action.option_strings} for name, p in sub.choices.items()}


def mentions(text: str) -> list[tuple[str, str, list[str]]]:
    """(command, code span, flags) for every `verl-p40 COMMAND ...` code span."""
    out = []
    for span in re.findall(r"`(verl-p40 [^`]+)`", text):
        words = span.split()
        command = words[1]
        if command.endswith(":"):  # a quoted error line (`verl-p40 train: error: ...`), not a command
            continue
        flags = [w.split("=")[0].strip("[]().,|") for w in words[2:] if w.lstrip("[(").startswith("--")]
        out.append((command, span, [f for f in flags if f.startswith("--")]))
    return out


READMES = ["README.md", "README.zh-CN.md"]


@pytest.mark.parametrize("readme", READMES)
def test_every_command_and_flag_the_readme_names_exists(readme):
    commands = _commands()
    found = mentions((REPO / readme).read_text(encoding="utf-8"))
    assert len(found) >= 12, "the README's CLI table went missing"
    top = {opt for action in build_parser()._actions for opt in action.option_strings}
    problems = []
    for command, span, flags in found:
        if command.startswith("-"):  # `verl-p40 --help`, `verl-p40 --version`
            problems += [] if command in top else [f"{readme}: `{span}`: verl-p40 has no {command}"]
            continue
        if command not in commands:
            problems.append(f"{readme}: `{span}`: no command {command!r}")
            continue
        problems += [f"{readme}: `{span}`: {command} has no {flag}" for flag in flags if flag not in commands[command]]
    assert not problems, "\n".join(problems)


def test_the_check_catches_a_flag_the_cli_does_not_have():
    commands = _commands()
    ((command, _, flags),) = mentions("run `verl-p40 train --no-such-flag N` first")
    assert command == "train" and flags == ["--no-such-flag"] and "--no-such-flag" not in commands["train"]


@pytest.mark.parametrize("readme", READMES)
def test_both_readmes_name_every_command(readme):
    named = {command for command, _, _ in mentions((REPO / readme).read_text(encoding="utf-8"))}
    assert set(_commands()) <= named, f"{readme} does not mention: {sorted(set(_commands()) - named)}"
