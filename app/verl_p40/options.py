"""Command-line options from dataclasses, as trl's CLI does it: a field with `option(...)` metadata is the one source
of its flag (`--field-name`), default, environment variable (compose sets these), checks and help.

Flags are converted and checked by argparse while it parses. Environment values are read only after parsing
(`resolve`), for the options the command has: a bad value in `.env` never breaks `--help` or a command that does not
read it, and its one-line error names the variable, where a flag's names the flag. Every number is finite."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Iterable
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from verl_p40 import UserError

FOLDER, FILE = "folder", "file"


class _Unset:
    """argparse's default for an option: the flag was not given (its environment variable or default applies)."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


@dataclass(frozen=True)
class Spec:
    help: str
    env: str | None = None  # the environment variable that gives the value when the flag is not given
    kind: type | None = None  # int or float: a finite number within [low, high]
    low: float | None = None
    high: float | None = None
    choices: Iterable[str] | Callable[[], Iterable[str]] | None = None  # a callable is called only when checking
    shown: str | None = None  # what --help prints as the default where that is not the value itself
    flag: str | None = None  # the option string where it is not --field-name; "" for a positional argument
    path: str | None = None  # FOLDER or FILE: what the value must be where it exists
    exists: bool = False  # the path must exist
    unless: tuple[str, ...] = ()  # values that are not paths: exact, or prefixes when they end with ":" ("hf:")
    below: str | None = None  # the environment variable names a folder; the value is this path inside it
    check: Callable[[Any, str], Any] | None = None  # (value, origin): raises UserError naming origin
    # (text, origin): the typed value the field holds, made from the flag's or variable's text once, here; raises
    # UserError naming origin. The default is already of that type
    convert: Callable[[str, str], Any] | None = None
    metavar: str | None = None
    many: bool = False  # repeatable (a list)
    switch: bool = False  # a flag without a value (True when given)
    required: bool = False  # argparse asks for it (no environment variable or default stands in)


def option(default: Any, help: str, **spec: Any) -> Any:
    """A dataclass field that is also a command-line option (the keywords are `Spec`'s). A list default is copied for
    each instance."""
    meta = {"option": Spec(help=help, **spec)}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


def number_problem(text: str, kind: type, low: float | None = None, high: float | None = None) -> tuple[Any, str]:
    """(`text` as a number of `kind`, "") when it is a finite one within [low, high], else (None, what is wrong)."""
    try:
        value = kind(str(text).strip())
    except (TypeError, ValueError, OverflowError):
        value = None
    finite = value is not None and math.isfinite(value)
    if finite and (low is None or value >= low) and (high is None or value <= high):
        return value, ""
    bounds = (f" from {low:g}" if low is not None else "") + (f" to {high:g}" if high is not None else "")
    what = "n integer" if kind is int else (" number" if value is None or finite else " finite number")
    return None, f"{text!r} is not a{what}{bounds}"


def number(kind: type, low: float | None = None, high: float | None = None) -> Callable[[str], Any]:
    """An argparse type: a finite number of `kind` within [low, high] (NaN and infinity are refused)."""

    def convert(text: str):
        value, problem = number_problem(text, kind, low, high)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value

    return convert


def path_problem(value: str, kind: str, exists: bool = False) -> str:
    """What is wrong with `value` as a path to a `kind` (FOLDER or FILE), or "": where it exists it must be one, and
    where it does not, nothing above it may be a file."""
    path = Path(value).expanduser()
    try:
        if path.exists():
            if kind == FOLDER and not path.is_dir():
                return "is a file, not a folder"
            if kind == FILE and path.is_dir():
                return "is a folder, not a file"
            return ""
        above = next((p for p in path.absolute().parents if p.exists()), None)
    except OSError:  # not ours to look at (no permission): the command that opens it says why
        return ""
    if above is not None and not above.is_dir():
        return f"{above} is a file, so nothing can be inside it"
    return f"not a {kind}: it does not exist" if exists else ""


def check_path(value: str, kind: str, origin: str, exists: bool = False) -> None:
    """Raise the one line for a path that is not what `origin` needs (see `path_problem`)."""
    problem = path_problem(value, kind, exists)
    if problem:
        raise UserError(f"{origin} {value}: {problem}")


def flag_of(f) -> str:
    spec: Spec = f.metadata["option"]
    if spec.flag == "":
        return spec.metavar or f.name.upper()
    return spec.flag or "--" + f.name.replace("_", "-")


def option_fields(cls: type) -> list:
    return [f for f in fields(cls) if "option" in f.metadata]


def _shown(f, spec: Spec) -> str:
    if spec.shown is not None:
        return f" [{spec.shown}]"
    if spec.switch or spec.many or f.default is None or f.default is MISSING:
        return ""
    return f" [{str(f.default).replace('%', '%%')}]"


def add_arguments(
    parser: argparse.ArgumentParser, cls: type, only: Iterable[str] | None = None, skip: Iterable[str] = ()
) -> None:
    """One argparse option per `option()` field of dataclass `cls`: flags first, then positional arguments, a list
    last. Nothing is read from the environment here, and no callable `choices` is called."""
    only, skip = (set(only) if only is not None else None), set(skip)
    chosen = [f for f in option_fields(cls) if f.name not in skip and (only is None or f.name in only)]
    flags = [f for f in chosen if f.metadata["option"].flag != ""]
    positional = sorted((f for f in chosen if f not in flags), key=lambda f: f.metadata["option"].many)
    for f in flags + positional:
        spec: Spec = f.metadata["option"]
        kwargs: dict[str, Any] = {
            "help": spec.help + _shown(f, spec) + (f" (${spec.env})" if spec.env else ""),
            "default": None if spec.many else UNSET,  # argparse appends to a list default
            "metavar": spec.metavar,
        }
        if spec.choices is not None and not callable(spec.choices) and not spec.metavar:
            kwargs["metavar"] = "{" + ",".join(spec.choices) + "}"
        if spec.kind is not None:
            kwargs["type"] = number(spec.kind, spec.low, spec.high)
        if spec.flag == "":
            kwargs.update(nargs="*" if spec.many else (None if spec.required else "?"))
            kwargs["metavar"] = kwargs["metavar"] or f.name.upper()
            parser.add_argument(f.name, **kwargs)
            continue
        if spec.required:
            kwargs["required"] = True
        if spec.switch:
            del kwargs["metavar"]
            kwargs["action"] = "store_true"
        elif spec.many:
            kwargs["action"] = "append"
        parser.add_argument(flag_of(f), dest=f.name, **kwargs)


def _default(f) -> Any:
    if f.default is not MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not MISSING else None


def _from_environment(spec: Spec, text: str) -> tuple[Any, str]:
    """The value an environment variable gives, or (None, what is wrong)."""
    if spec.kind is not None:
        return number_problem(text, spec.kind, spec.low, spec.high)
    return (os.path.join(text, spec.below) if spec.below else text), ""


def _not_a_path(value: str, unless: tuple[str, ...]) -> bool:
    return any(value == u or (u.endswith(":") and value.startswith(u)) for u in unless)


def _check(spec: Spec, value: Any, origin: str) -> None:
    """The checks beyond the type; raises UserError naming `origin`."""
    if value is None or value is UNSET:
        return
    if spec.choices is not None:
        allowed = list(spec.choices() if callable(spec.choices) else spec.choices)
        if value not in allowed:
            raise UserError(f"{origin}: invalid choice: {value!r} (choose from {', '.join(allowed)})")
    if spec.path and not _not_a_path(str(value), spec.unless):
        check_path(str(value), spec.path, origin, spec.exists)
    if spec.check is not None:
        spec.check(value, origin)


def resolve(cls: type, args: argparse.Namespace, **values: Any):
    """An instance of `cls` from the parsed options it declares: a flag given wins, then a non-empty environment
    variable, then the default. Each value is checked here (choices, paths, `check`); a bad one is a UserError naming
    the flag, or the variable and the flag it stands for, and a given text becomes its typed value (`convert`). Fields
    the parser does not have keep their defaults."""
    given: dict[str, Any] = {}
    FROM_ENVIRONMENT.clear()
    for f in option_fields(cls):
        if f.name in values or not hasattr(args, f.name):
            continue
        spec: Spec = f.metadata["option"]
        value, origin, env_text = getattr(args, f.name), flag_of(f), None
        text = spec.convert is not None  # a flag's or variable's text, which `convert` types; not the default
        if value is UNSET or (value is None and spec.many):
            env_text = os.environ.get(spec.env) if spec.env else None
            if env_text:
                value, problem = _from_environment(spec, env_text)
                origin = f"${spec.env}"
                FROM_ENVIRONMENT[flag_of(f)] = spec.env
                if problem:
                    raise UserError(f"{origin}: {problem}{_for_flag(f)}")
            else:
                value, text = _default(f), False
        try:
            _check(spec, value, origin)
            if text:
                value = spec.convert(value, origin)
        except UserError as exc:  # the variable's own value is wrong (not, say, a folder its check reads)
            ours = env_text and str(exc).startswith((f"{origin}:", f"{origin} "))
            raise UserError(f"{exc}{_for_flag(f) if ours else ''}", exc.exit_code) from None
        given[f.name] = value
    return cls(**{**given, **values})


# The flags of the command being run whose value came from their environment variable (`resolve` fills it): a check
# made later, where the value is used (prep's validation slice, the GPUs a plan places), names the flag, and the line
# the user sees names the variable instead (`named`)
FROM_ENVIRONMENT: dict[str, str] = {}


def named(message: str) -> str:
    """`message` (a UserError's line) as the user must read it: one that begins with a flag whose value came from an
    environment variable begins with the variable instead, and says so."""
    for flag, env in FROM_ENVIRONMENT.items():
        if message.startswith((f"{flag} ", f"{flag}:")):
            return f"${env}{message[len(flag) :]} (the environment's value for {flag})"
    return message


def _for_flag(f) -> str:
    return f" (the environment's value for {flag_of(f)}: fix it or unset it)"
