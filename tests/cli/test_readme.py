"""The READMEs and docs/ name only commands and flags the CLI has (a renamed or removed flag fails here, not for a
user), docs/cli.md names every command, README.md stays short, the two READMEs say the same things (every command and
number of one is in the other), and every relative link points at a file that exists."""

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
DOCS = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))
PAGES = READMES + DOCS


def _text(page: str) -> str:
    return (REPO / page).read_text(encoding="utf-8")


def test_the_docs_pages_are_there():
    assert {
        "docs/README.md",
        "docs/cli.md",
        "docs/configuration.md",
        "docs/verification.md",
        "docs/troubleshooting.md",
    } <= set(DOCS)


@pytest.mark.parametrize("page", PAGES)
def test_every_command_and_flag_a_page_names_exists(page):
    commands = _commands()
    found = mentions(_text(page))
    top = {opt for action in build_parser()._actions for opt in action.option_strings}
    problems = []
    for command, span, flags in found:
        if command.startswith("-"):  # `verl-p40 --help`, `verl-p40 --version`
            problems += [] if command in top else [f"{page}: `{span}`: verl-p40 has no {command}"]
            continue
        if command not in commands:
            problems.append(f"{page}: `{span}`: no command {command!r}")
            continue
        problems += [f"{page}: `{span}`: {command} has no {flag}" for flag in flags if flag not in commands[command]]
    assert not problems, "\n".join(problems)


def test_the_check_catches_a_flag_the_cli_does_not_have():
    commands = _commands()
    ((command, _, flags),) = mentions("run `verl-p40 train --no-such-flag N` first")
    assert command == "train" and flags == ["--no-such-flag"] and "--no-such-flag" not in commands["train"]


def test_the_cli_reference_names_every_command():
    found = mentions(_text("docs/cli.md"))
    assert len(found) >= 12, "docs/cli.md's CLI table went missing"
    named = {command for command, _, _ in found}
    assert set(_commands()) <= named, f"docs/cli.md does not mention: {sorted(set(_commands()) - named)}"


def test_readme_is_short():
    words = len(_text("README.md").split())  # what `wc -w README.md` counts
    assert words < 1600, f"README.md has {words} words; move detail to docs/"


# --- the two READMEs in step ------------------------------------------------------------------------------------

URL = re.compile(r"\]\([^)]*\)|<https?://[^>]*>|https?://[^\s)`>]+")  # link targets and bare URLs
NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")  # 7,473 and 7473 alike; 0,1 is two numbers
CODE = re.compile(r"`((?:verl-p40|docker compose) [^`]+)`")
# Numbers one README may have and the other not. Empty today: the zh README's own mirror URLs (hf-mirror.com,
# mirrors.tuna.tsinghua.edu.cn, pypi.tuna.tsinghua.edu.cn) are URLs, which the check leaves out anyway. Add a
# number here only with a comment saying why it cannot be in both.
ONLY_IN = {"README.md": set(), "README.zh-CN.md": set()}


def numbers(text: str) -> set[str]:
    return {n.replace(",", "") for n in NUMBER.findall(URL.sub(" ", text))}


def commands_in(text: str) -> set[str]:
    return {" ".join(span.split()) for span in CODE.findall(text)}


def test_number_extraction():
    found = numbers("7,473 questions, 1.26 h, `--gpus 0,1`, 2026-12-01")
    assert found == {"7473", "1.26", "0", "1", "2026", "12", "01"}
    assert numbers("[a](docs/results.md#p40-projections) <http://127.0.0.1:6006> 36 GB") == {"36"}


@pytest.mark.parametrize("one, other", [(READMES[0], READMES[1]), (READMES[1], READMES[0])])
def test_the_two_readmes_have_the_same_commands(one, other):
    missing = commands_in(_text(one)) - commands_in(_text(other))
    assert not missing, f"in {one}, not in {other}: " + ", ".join(f"`{c}`" for c in sorted(missing))


@pytest.mark.parametrize("one, other", [(READMES[0], READMES[1]), (READMES[1], READMES[0])])
def test_the_two_readmes_have_the_same_numbers(one, other):
    missing = numbers(_text(one)) - numbers(_text(other)) - ONLY_IN[one]
    assert not missing, f"numbers in {one}, not in {other}: {sorted(missing)}"


def test_the_step_check_catches_a_number_only_one_has():
    assert numbers("1.26 h per epoch") - numbers("1.7 小时") == {"1.26"}


# --- links ------------------------------------------------------------------------------------------------------

LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(page) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings (lower case, punctuation dropped, spaces to hyphens)."""
    out, seen = set(), {}
    for heading in re.findall(r"^#+ (.*)$", page.read_text(encoding="utf-8"), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return out


@pytest.mark.parametrize("page", PAGES)
def test_every_relative_link_resolves(page):
    """Pages moved into docs/ keep their links: every relative target exists, and a #fragment names a heading."""
    base = (REPO / page).parent
    broken = []
    for target in LINK.findall(_text(page)):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, fragment = target.partition("#")
        file = base / path if path else REPO / page
        if not file.exists():
            broken.append(target)
        elif fragment and file.suffix == ".md" and fragment not in _anchors(file):
            broken.append(target)
    assert not broken, f"{page}: links to nothing: {broken}"


def test_the_anchor_check_knows_githubs_slugs(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Graceful stop (`stop-resume-2026-11-30/`)\n## P40 notes\n## P40 notes\n", encoding="utf-8")
    assert _anchors(page) == {"graceful-stop-stop-resume-2026-11-30", "p40-notes", "p40-notes-1"}


def test_the_python_line_is_the_one_the_pins_allow():
    """The pins install on 3.11 and 3.12 only (bench/results/python-versions-2026-12-06: Markdown 3.11.3 needs 3.11,
    numpy 1.26.4 has no 3.13 wheel): pyproject and both READMEs say so, and nothing says >= 3.10."""
    import tomllib

    pyproject = tomllib.loads(_text("pyproject.toml"))
    assert pyproject["project"]["requires-python"] == ">=3.11,<3.13"
    assert "Python 3.11 or 3.12" in _text("README.md") and "Python 3.11 或 3.12" in _text("README.zh-CN.md")
    for name in ("README.md", "README.zh-CN.md", "pyproject.toml"):
        assert ">= 3.10" not in _text(name) and ">=3.10" not in _text(name), f"{name} still names Python 3.10"
