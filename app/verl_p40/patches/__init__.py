"""Apply and check the verl-p40 patch set: named, minimal textual edits to verl 0.5.0, kept as data.

Rules: an edit's old text must occur exactly once in its file; an edit whose new text is already there is
skipped (idempotent); a target that is missing or ambiguous fails with the patch's name and file, and then no
file is written at all. A new-file edit (old text None) creates a file that must not exist with other content.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from verl_p40 import VERL_VERSION, UserError
from verl_p40.atomic import write_text
from verl_p40.patches.edit import Edit


class PatchError(UserError):
    pass


APPLIED, PENDING = "applied", "not applied"


def default_verl_dir() -> Path:
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise PatchError("verl is not installed; pass the verl package folder (the one holding workers/, utils/)")
    return Path(list(spec.submodule_search_locations)[0])


def verl_version(verl_dir: Path) -> str:
    version_file = verl_dir / "version" / "version"
    return version_file.read_text().strip() if version_file.is_file() else "unknown"


def resolve_dir(verl_dir: str | Path | None) -> Path:
    root = Path(verl_dir) if verl_dir else default_verl_dir()
    if (root / "verl" / "workers").is_dir() and not (root / "workers").is_dir():
        root = root / "verl"  # a source checkout was given
    if not (root / "workers").is_dir():
        raise PatchError(f"{root}: not a verl package folder (no workers/)")
    return root


def edit_state(edit: Edit, text: str | None) -> str:
    """APPLIED or PENDING; raises PatchError when the target is missing or ambiguous."""
    where = f"patch {edit.name!r} ({edit.file})"
    if edit.old is None:
        if text is None:
            return PENDING
        if text == edit.new:
            return APPLIED
        raise PatchError(f"{where}: the file exists with other content")
    if text is None:
        raise PatchError(f"{where}: file not found")
    if text.count(edit.new) == 1 and (edit.old not in text or edit.old in edit.new):
        return APPLIED
    found = text.count(edit.old)
    if found == 1:
        return PENDING
    raise PatchError(
        f"{where}: target text {'not found' if found == 0 else f'found {found} times'} "
        f"(another verl version, the file changed by hand, or a patch of an older verl-p40: reinstall verl "
        f"{VERL_VERSION} and run verl-p40 patch-verl again)"
    )


def _read(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.is_file() else None


def all_edits() -> list[Edit]:
    from verl_p40.patches.verl_050 import EDITS

    return EDITS


def status(verl_dir: str | Path | None = None, edits: list[Edit] | None = None) -> dict[str, str]:
    root = resolve_dir(verl_dir)
    return {e.name: edit_state(e, _read(root / e.file)) for e in (edits or all_edits())}


def check(verl_dir: str | Path | None = None) -> dict[str, bool]:
    return {name: state == APPLIED for name, state in status(verl_dir).items()}


def apply(verl_dir: str | Path | None = None, force: bool = False, edits: list[Edit] | None = None) -> dict[str, str]:
    """Apply every pending edit; returns {name: "applied" | "already applied"}. All-or-nothing on errors."""
    root = resolve_dir(verl_dir)
    version = verl_version(root)
    if version != VERL_VERSION and not force:
        raise PatchError(f"{root}: verl {version}, but this patch set is for verl {VERL_VERSION} (--force to try)")
    edits = edits or all_edits()
    texts: dict[str, str | None] = {}
    report: dict[str, str] = {}
    # Pass 1: compute every new file text in memory; any problem stops here, before a byte is written.
    for edit in edits:
        if edit.file not in texts:
            texts[edit.file] = _read(root / edit.file)
        state = edit_state(edit, texts[edit.file])
        if state == APPLIED:
            report[edit.name] = "already applied"
            continue
        texts[edit.file] = edit.new if edit.old is None else texts[edit.file].replace(edit.old, edit.new, 1)
        if edit_state(edit, texts[edit.file]) != APPLIED:
            raise PatchError(f"patch {edit.name!r} ({edit.file}): did not apply cleanly")
        report[edit.name] = "applied"
    # Pass 2: write the changed files, each atomically.
    for file in sorted({e.file for e in edits if report[e.name] == "applied"}):
        target = root / file
        write_text(target, texts[file], mode=target.stat().st_mode & 0o777 if target.exists() else 0o644)
    return report
