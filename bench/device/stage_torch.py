"""The image's torch on the lent GPU machine (issue 45): PyPI's torch 2.6.0 wheel and the CUDA 12 libraries it pins,
carried in pieces under what one device call may carry, checked there, installed into a folder of their own.

The GPU machine reaches nothing and runs its own torch; ~2.6 GiB of wheels travel as chunks of bench/device/chunks.py
(one ignored folder each, .gpu-torch-NN, of the size that fits one call beside the checkout: 84 of 32 MiB on
2026-12-04). Here:

    python3 bench/device/stage_torch.py pack               # downloads (PyPI), checksums, .gpu-torch-00 ... -NN

then one device call per chunk, carrying `.gpu-torch-NN`:
    mkdir -p /tmp/chunks/torch && cp .gpu-torch-NN/* /tmp/chunks/torch/
and there, once:

    python3 bench/device/stage_torch.py unpack --chunks /tmp/chunks/torch --target /tmp/torch26
    export PYTHONPATH=/tmp/torch26:$PYTHONPATH     # before /tmp/site and the checkout: `import torch` is 2.6.0

What goes: torch==2.6.0 for CPython 3.12 (the machine's) and every nvidia-* requirement of its wheel at the version it
pins; sympy at the image lock's version (torch 2.6 pins 1.13.1); and the lock's pins of what ../shared/gpu's bundle
holds at other versions (nvidia-ml-py, peft, prometheus-client on 2026-12-04), first on the path as the image has
them. Left out: triton (torch imports it only for
torch.compile and Triton kernels, which a P40 cannot run and the mask refuses). Every wheel's sha256 and every
chunk's are written by pack and checked by unpack before anything is installed; a damaged or missing chunk is named.
The machine's own packages that need torch and that the image does not install (torchvision, timm, ...: built for
its torch 2.11) are hidden beside the staged torch by a sitecustomize.py that unpack writes into the target: None in
sys.modules, so that `importlib.util.find_spec` answers None (transformers' availability checks call it unguarded,
so a finder that raised would break them); only real modules, never a stray folder (see is_module), and never a
namespace package (one without an __init__.py is not hidden).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lib import chunks  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
LEFT_OUT = {"triton": "torch.compile and Triton kernels only, which sm_61 cannot run"}


def requirement(text: str) -> Requirement | None:
    try:
        return Requirement(text)
    except InvalidRequirement:
        return None


def unconditional(req: Requirement, python: str = "3.12") -> bool:
    """Whether a requirement holds on the GPU machine (CPython `python` on Linux x86_64) without an extra."""
    where = {"extra": "", "platform_system": "Linux", "platform_machine": "x86_64", "sys_platform": "linux"}
    return req.marker is None or req.marker.evaluate({**where, "python_version": python})


def pins_of(wheel: Path, python: str = "3.12") -> list[str]:
    """The `name==version` nvidia-* and sympy requirements of a wheel on Linux x86_64 under CPython `python` (its
    METADATA), less LEFT_OUT."""
    with zipfile.ZipFile(wheel) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(meta).decode().splitlines()
    pins = []
    for line in lines:
        req = requirement(line.split(":", 1)[1]) if line.startswith("Requires-Dist:") else None
        if req is None or not unconditional(req, python):
            continue
        name = canonicalize_name(req.name)
        exact = [spec.version for spec in req.specifier if spec.operator == "=="]
        if exact and name not in LEFT_OUT and (name.startswith("nvidia-") or name == "sympy"):
            pins.append(f"{name}=={exact[0]}")
    return pins


def image_lock() -> dict[str, str]:
    """The image's lock (docker/requirements.txt): each distribution's canonical name -> its pinned line."""
    lock = {}
    for line in (REPO / "docker" / "requirements.txt").read_text().splitlines():
        req = requirement(line.split("#")[0].strip())
        if req is not None:
            lock[canonicalize_name(req.name)] = str(req)
    return lock


def lock_pin(name: str) -> str | None:
    return image_lock().get(canonicalize_name(name))


def bundle_mismatches(bundle: Path | None) -> list[str]:
    """The image lock's pins of what ../shared/gpu's bundle (`bundle`/whl) holds at another version: staged beside
    the image's torch, ahead of the bundle on the path, so that the image's stack runs them as the image does (on
    2026-12-04 the bundle held nvidia-ml-py 13.615.71, peft 0.21.2 and prometheus-client 0.26.0; the lock pins
    12.575.51, 0.16.0 and 0.22.1)."""
    if bundle is None or not (bundle / "whl").is_dir():
        return []
    pins = []
    for wheel in sorted((bundle / "whl").glob("*.whl")):
        name, version = wheel.name.split("-")[:2]
        pin = lock_pin(name)
        if pin and not Requirement(pin).specifier.contains(version, prereleases=True):
            pins.append(pin)
    return pins


def download(torch: str, python: str, into: Path, extra: list[str] = ()) -> list[Path]:
    def fetch(spec: str) -> None:
        command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(into)]
        command += ["--python-version", python, "--platform", "manylinux2014_x86_64", "--platform", "manylinux1_x86_64"]
        command += ["--platform", "manylinux_2_28_x86_64", spec]
        subprocess.run(command, check=True)

    fetch(f"torch=={torch}")
    wheel = next(into.glob(f"torch-{torch}-*.whl"))
    pins = pins_of(wheel, python)
    pins = [lock_pin("sympy") or p if p.startswith("sympy==") else p for p in pins]
    for spec in [*pins, *extra]:
        fetch(spec)
    return sorted(into.glob("*.whl"))


def pack(args: argparse.Namespace) -> None:
    out = Path(args.out)
    mib = chunks.chunk_mib(args.chunk_mib)
    work = Path(tempfile.mkdtemp(prefix="stage-torch-"))
    try:
        folder = work / "wheels"  # what travels: the wheels and their sha256 list, as one folder
        folder.mkdir()
        if args.wheels:  # taken as they are: the bundle's mismatches travel only when pack downloads
            for wheel in sorted(Path(args.wheels).glob("*.whl")):
                try:
                    os.link(wheel, folder / wheel.name)  # no second copy of 2.6 GiB where the disk allows
                except OSError:
                    shutil.copy(wheel, folder / wheel.name)
        else:
            extra = bundle_mismatches(Path(args.bundle) if args.bundle else None)
            if extra:
                print(f"the lock's pins where the bundle differs, staged too: {', '.join(extra)}")
            download(args.torch, args.python, folder, extra)
        wheels = sorted(folder.glob("*.whl"))
        (folder / "SHA256SUMS").write_text("".join(f"{chunks.sha256(w)}  {w.name}\n" for w in wheels))
        folders = chunks.split(folder, out, "torch", mib)  # wheels are compressed already: an uncompressed tar
        total = sum(w.stat().st_size for w in wheels)
        print(f"{len(wheels)} wheels, {total / 2**30:.2f} GiB, in {len(folders)} chunks of {mib} MiB:")
        print(f"  {out}/.gpu-torch-00 ... .gpu-torch-{len(folders) - 1:02d}; left out: {', '.join(LEFT_OUT)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def fail(text: str, action: str = "unpack") -> None:
    print(f"stage_torch {action}: error: {text}", file=sys.stderr)
    raise SystemExit(2)


def unpack(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="stage-torch-", dir=args.work))
    try:
        chunks.join(Path(args.chunks), work / "wheels", expect="folder")
        for line in (work / "wheels" / "SHA256SUMS").read_text().splitlines():
            digest, name = line.split()
            if chunks.sha256(work / "wheels" / name) != digest:
                fail(f"{name}: sha256 differs from pack's")
        wheels = sorted(str(w) for w in (work / "wheels").glob("*.whl"))
        command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", args.target]
        subprocess.run([*command, *wheels], check=True)
        print(f"{len(wheels)} wheels checked and installed into {args.target}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    hidden = hide_foreign(Path(args.target), image_names())
    print(
        "hidden beside the staged torch (built for this machine's torch, not in the image): "
        + (", ".join(hidden) or "none")
    )


def image_names() -> set[str]:
    """The distributions the image installs: its lock and what the lock's header says it leaves out (torch, verl,
    Apex)."""
    return {"torch", "triton", "verl", "apex", *image_lock()}


def needs_torch(requirements: list[str] | None) -> bool:
    """Whether a distribution's requirements name torch unconditionally (an extra's requirement does not count)."""
    return any(
        req is not None and canonicalize_name(req.name) == "torch" and unconditional(req)
        for req in map(requirement, requirements or [])
    )


def top_level(dist) -> set[str]:
    """The importable top-level names a distribution installs: its top_level.txt, else the first part of each of its
    files (a folder, or a module file such as `x.py` or `x.cpython-312-x86_64-linux-gnu.so`), less its metadata."""
    names = set((dist.read_text("top_level.txt") or "").split())
    if not names:
        for path in dist.files or []:
            parts = path.parts
            if not parts or parts[0] in ("..", "__pycache__") or parts[0].endswith((".dist-info", ".data")):
                continue
            names.add(parts[0] if len(parts) > 1 else parts[0].split(".")[0])
    return {name for name in names if name.isidentifier()}


def foreign(image: set[str], paths: list[str], kept_paths: tuple[str, ...] = ()) -> list[str]:
    """Top-level modules of the distributions under `paths` that need torch (built for the machine's torch: its
    torchvision, torchaudio, timm, ...) and that the image does not install, so that the image's torch never meets
    them; never a name that a kept distribution (any other, or one under `kept_paths`) installs too, such as a
    namespace (`google`, `nvidia`). transformers imports timm, and timm torchvision, whenever they are found (seen on
    the H200, 2026-12-03: the machine's torchvision 0.26 failed with torch 2.6.0, `operator torchvision::nms does
    not exist`)."""
    from importlib import metadata

    hidden: set[str] = set()
    kept: set[str] = set()
    for dist in metadata.distributions(path=list(paths)):
        name = canonicalize_name(dist.metadata["Name"] or "")
        foreign_one = bool(name) and name not in image and needs_torch(dist.requires)
        (hidden if foreign_one else kept).update(top_level(dist))
    for dist in metadata.distributions(path=list(kept_paths)):
        kept.update(top_level(dist))
    return sorted(name for name in hidden - kept if any(is_module(Path(p), name) for p in paths))


def is_module(folder: Path, name: str) -> bool:
    """Whether `name` is a module of its own in `folder`: a package with an __init__.py, or a module file (`x.py`,
    `x.cpython-312-x86_64-linux-gnu.so`). A folder without one is not hidden: a torch-needing wheel's stray `sphinx/`
    or `docs/` folder (botorch and friends ship some) would otherwise stand in sys.modules as None, and a library that
    asks `'sphinx' in sys.modules` before importing from it fails (scipy.stats, under transformers' generation code:
    seen on the H200, 2026-12-04)."""
    if (folder / name / "__init__.py").is_file():
        return True
    return any(f.is_file() for f in folder.glob(f"{name}.*") if f.suffix in (".py", ".so", ".pyd"))


SITECUSTOMIZE = """\
# Written by bench/device/stage_torch.py unpack: packages of this machine built for its own torch, which the image
# does not install, made unimportable beside the staged torch (None in sys.modules: find_spec answers None).
import importlib.util
import os
import sys

for _name in {hidden!r}:
    sys.modules.setdefault(_name, None)

# Python runs only the first sitecustomize.py on its path: when this one is that, the next one runs too (the Pascal
# mask is one, and it runs this one the same way when it comes first; run so, this one runs no other).
if __name__ == "sitecustomize":
    _here = os.path.dirname(os.path.abspath(__file__))
    for _entry in list(sys.path):
        _next = os.path.join(_entry or ".", "sitecustomize.py")
        if os.path.abspath(_entry or ".") != _here and os.path.isfile(_next):
            _spec = importlib.util.spec_from_file_location("_chained_sitecustomize", _next)
            _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
            break
"""


def hide_foreign(target: Path, image: set[str], paths: list[str] | None = None) -> list[str]:
    """A sitecustomize.py in `target` (on PYTHONPATH with the staged torch) that makes the foreign modules of `paths`
    (default: this Python's path less the target) unimportable, so that transformers takes them as absent, and runs
    the next sitecustomize.py on the path (the Pascal mask's) as Python would have."""
    if paths is None:
        paths = [p for p in sys.path if p and Path(p).resolve() != target.resolve()]
    hidden = foreign(image, paths, (str(target),))
    (target / "sitecustomize.py").write_text(SITECUSTOMIZE.format(hidden=hidden))
    return hidden


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("pack", help="download, checksum and split into .gpu-torch-NN folders")
    p.add_argument("--torch", default="2.6.0")
    p.add_argument("--python", default="3.12", help="the GPU machine's Python")
    p.add_argument("--wheels", help="wheels already here (a folder) instead of downloading")
    p.add_argument(
        "--bundle",
        default=str(REPO / ".gpu-bundle"),
        help="../shared/gpu's bundle: the lock's pins of what it holds at other versions travel with torch",
    )
    p.add_argument("--chunk-mib", type=int, help="default: what fits beside the checkout now (chunks.py fits)")
    p.add_argument("--out", default=str(REPO))
    u = sub.add_parser("unpack", help="check the chunks and the wheels, install them into --target")
    u.add_argument("--chunks", required=True)
    u.add_argument("--target", required=True)
    u.add_argument("--work", default=None, help="where the wheels are unpacked on the way (default: the temp folder)")
    args = parser.parse_args()
    try:
        {"pack": pack, "unpack": unpack}[args.action](args)
    except chunks.ChunkError as error:
        fail(str(error), args.action)


if __name__ == "__main__":
    main()
