"""The recipes and profiles that `--help` names come from their folders: a file added to config/algorithms or
config/profiles is in the help without an edit (the hand-written list once missed grpo-gsm8k)."""

from dataclasses import fields
from pathlib import Path

from verl_p40.plan.run_options import RunOptions

CONFIG = Path(__file__).resolve().parents[2] / "config"


def _help(name: str) -> str:
    return next(f.metadata["option"].help for f in fields(RunOptions) if f.name == name)


def test_every_recipe_of_the_folder_is_in_the_algorithm_help():
    names = sorted(p.stem for p in (CONFIG / "algorithms").glob("*.yaml"))
    assert "grpo-gsm8k" in names
    assert all(name in _help("algorithm") for name in names), _help("algorithm")


def test_every_profile_of_the_folder_is_in_the_profile_help():
    names = sorted(p.stem for p in (CONFIG / "profiles").glob("*.yaml") if p.stem != "base")
    assert names and all(name in _help("profile") for name in names), _help("profile")
    assert "base," not in _help("profile")
