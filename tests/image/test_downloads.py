"""Every download of the image build can be pointed at a mirror and gives up instead of hanging (issue 68: a host in
mainland China, where Docker Hub, GitHub and PyPI may be slow or blocked). Read from the Dockerfile as text: no Docker
engine needed."""

import re

from conftest import REPO

DOCKERFILE = (REPO / "Dockerfile").read_text()
ENV_EXAMPLE = (REPO / ".env.example").read_text()
URL = re.compile(r"https?://")
# the build arguments through which the build fetches anything: the base image's registry, Debian, PyPI, torch, Apex
FETCHED_THROUGH = ("BASE_IMAGE", "APT_MIRROR", "PIP_INDEX_URL", "TORCH_INDEX_URL", "APEX_URL")


def _instructions() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    lines = [line for line in DOCKERFILE.splitlines() if not line.lstrip().startswith("#")]
    return [i.strip() for i in re.sub(r"\\\n", " ", "\n".join(lines)).splitlines() if i.strip()]


def test_every_url_the_dockerfile_fetches_is_a_build_argument():
    for instruction in _instructions():
        if instruction.startswith(("ARG ", "LABEL ")):  # an argument's default; the image's source label is text
            continue
        assert not URL.search(instruction), f"a URL outside a build argument: {instruction[:200]}"
        assert not re.search(r"\b(wget|git clone)\b|^ADD\s+https?:", instruction), instruction[:200]
    for name in FETCHED_THROUGH:
        assert re.search(rf"^ARG {name}=", DOCKERFILE, re.M), f"the Dockerfile has no build argument {name}"
    assert "FROM ${BASE_IMAGE}" in DOCKERFILE


def test_env_example_gives_a_mirror_line_for_each_of_them():
    """Each argument is a setting of .env.example, with a commented mirror that differs from the default."""
    for name in FETCHED_THROUGH:
        (default,) = re.findall(rf"^{name}=(.*)$", ENV_EXAMPLE, re.M)
        mirrors = [m for m in re.findall(rf"^#.*\b{name}=(\S+)", ENV_EXAMPLE, re.M) if m != default]
        assert mirrors, f".env.example has no mirror line for {name} (a commented {name}=... other than {default})"


def test_every_curl_has_timeouts_and_retries():
    """A blocked host fails the build in minutes with curl's error, not after hours of silence."""
    commands = [c for i in _instructions() for c in re.findall(r"\bcurl\s+-[^&;|]*", i)]  # a call, not the package
    assert commands, "the Dockerfile fetched Apex's source with curl; the test no longer finds that call"
    for command in commands:
        for flag in ("--connect-timeout", "--max-time", "--retry"):
            assert flag in command, f"curl without {flag}: {command.strip()[:200]}"
