"""Command-line options from dataclasses, as trl's CLI does it: a field with `option(...)` metadata is the one source
of its flag (`--field-name`), default, environment variable (compose sets these) and help."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable
from dataclasses import MISSING, field, fields
from typing import Any


def number(kind: type, low: float | None = None, high: float | None = None, env: str | None = None):
    """An argparse type: a number of `kind` within [low, high]. Defaults that come from an environment variable are
    strings that argparse converts with this too, so a bad variable gets one line naming it, not a traceback."""

    def convert(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or (low is not None and value < low) or (high is not None and value > high):
            bounds = f" from {low:g}" if low is not None else ""
            bounds += f" to {high:g}" if high is not None else ""
            where = f" (also read from ${env})" if env else ""
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a{'n integer' if kind is int else ' number'}{bounds}{where}"
            )
        return value

    return convert


def option(
    default: Any,
    help: str,
    env: str | None = None,
    kind: type | None = None,
    low: float | None = None,
    high: float | None = None,
    choices: Iterable[str] | Callable[[], Iterable[str]] | None = None,
    shown: str | None = None,
) -> Any:
    """A dataclass field that is also a command-line option. `kind` (int/float) with `low`/`high` checks numbers;
    `shown` is what --help prints as the default where that is not the value itself (e.g. "the algorithm's")."""
    return field(
        default=default,
        metadata={"help": help, "env": env, "kind": kind, "low": low, "high": high, "choices": choices, "shown": shown},
    )


def add_arguments(
    parser: argparse.ArgumentParser, cls: type, only: Iterable[str] | None = None, skip: Iterable[str] = ()
) -> None:
    """One argparse option per `option()` field of dataclass `cls`."""
    only, skip = (set(only) if only is not None else None), set(skip)
    for f in fields(cls):
        meta = f.metadata
        if "help" not in meta or f.name in skip or (only is not None and f.name not in only):
            continue
        env = meta["env"]
        default = None if f.default is MISSING else f.default
        if env and os.environ.get(env):
            default = os.environ[env]  # a string: argparse converts it with `type`, as typed values
        kwargs: dict[str, Any] = {
            "default": default,
            "help": f"{meta['help']} [{meta['shown'] or '%(default)s'}]" + (f" (${env})" if env else ""),
        }
        if meta["kind"] is not None:
            kwargs["type"] = number(meta["kind"], meta["low"], meta["high"], env)
        if meta["choices"] is not None:
            choices = meta["choices"]
            kwargs["choices"] = list(choices() if callable(choices) else choices)
        parser.add_argument("--" + f.name.replace("_", "-"), **kwargs)


def from_args(cls: type, args: argparse.Namespace, **values: Any):
    """An instance of `cls` from the parsed options it declares (those the parser has), plus `values`."""
    given = {f.name: getattr(args, f.name) for f in fields(cls) if "help" in f.metadata and hasattr(args, f.name)}
    return cls(**{**given, **values})
