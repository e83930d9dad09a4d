"""Staging the image's torch on the GPU machine (bench/device/stage_torch.py): wheels packed into chunks with their
checksums, checked and installed there; a damaged or missing chunk is named in one line and nothing is installed."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "device" / "stage_torch.py"
sys.path.insert(0, str(SCRIPT.parent))

import stage_torch  # noqa: E402


def _wheel(folder: Path, name: str, payload: bytes = b"", requires: tuple[str, ...] = ()) -> Path:
    """A minimal pure-Python wheel: a package `name` with `payload` stored (not compressed) as its data.bin."""
    path = folder / f"{name}-1.0-py3-none-any.whl"
    meta = "Metadata-Version: 2.1\nName: {}\nVersion: 1.0\n".format(name) + "".join(f"{r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(
            f"{name}/__init__.py",
            "import pathlib\nSIZE = (pathlib.Path(__file__).parent / 'data.bin').stat().st_size\n",
        )
        archive.writestr(f"{name}/data.bin", payload)
        archive.writestr(f"{name}-1.0.dist-info/METADATA", meta)
        archive.writestr(
            f"{name}-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{name}-1.0.dist-info/RECORD", "")
    return path


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_the_wheels_go_in_chunks_and_are_installed_after_every_check(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "alpha", os.urandom(3 << 19))  # 1.5 MiB that does not compress: two chunks of 1 MiB
    _wheel(wheels, "beta")
    packed = _run("pack", "--wheels", str(wheels), "--chunk-mib", "1", "--out", str(tmp_path))
    assert packed.returncode == 0, packed.stderr
    folders = sorted(p.name for p in tmp_path.glob(".gpu-torch-*"))
    assert folders == [".gpu-torch-00", ".gpu-torch-01"] and "2 wheels" in packed.stdout
    chunks = tmp_path / "chunks"
    chunks.mkdir()
    for folder in folders:  # as the device calls copy them, one folder each
        for f in (tmp_path / folder).iterdir():
            (chunks / f.name).write_bytes(f.read_bytes())

    damaged = bytearray((chunks / "c01").read_bytes())
    damaged[10] ^= 1
    original = (chunks / "c01").read_bytes()
    (chunks / "c01").write_bytes(bytes(damaged))
    refused = _run("unpack", "--chunks", str(chunks), "--target", str(tmp_path / "site"))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines()[-1].startswith("stage_torch unpack: error: chunk c01 under ")
    assert not (tmp_path / "site").exists()  # nothing installed from a damaged chunk

    (chunks / "c01").unlink()
    missing = _run("unpack", "--chunks", str(chunks), "--target", str(tmp_path / "site"))
    assert missing.returncode == 2 and "1 of 2 chunks missing" in missing.stderr

    (chunks / "c01").write_bytes(original)
    installed = _run("unpack", "--chunks", str(chunks), "--target", str(tmp_path / "site"))
    assert installed.returncode == 0, installed.stderr
    check = "import alpha, beta; print(alpha.SIZE)"
    run = subprocess.run(
        [sys.executable, "-c", check],
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
        capture_output=True,
        text=True,
    )
    assert run.stdout.strip() == str(3 << 19), run.stderr


def test_what_travels_with_torch_is_its_linux_cuda_pins_less_triton(tmp_path):
    wheel = _wheel(
        tmp_path,
        "torch",
        requires=(
            "Requires-Dist: filelock",
            "Requires-Dist: nvidia-cublas-cu12 (==12.4.5.8) ; platform_machine == 'x86_64'",
            'Requires-Dist: triton (==3.2.0) ; platform_system == "Linux" and platform_machine == "x86_64"',
            'Requires-Dist: sympy (==1.13.1) ; python_version >= "3.9"',
            "Requires-Dist: optree (>=0.13.0) ; extra == 'optree'",
            'Requires-Dist: nvidia-cudnn-cu12 (==9.1.0.70) ; platform_system == "Windows"',
            'Requires-Dist: Nvidia_Nccl.CU12 (==2.21.5) ; python_version >= "3.12"',
        ),
    )
    assert stage_torch.pins_of(wheel) == [
        "nvidia-cublas-cu12==12.4.5.8",
        "sympy==1.13.1",
        "nvidia-nccl-cu12==2.21.5",  # its name made canonical; Windows' cuDNN left out
    ]
    assert "nvidia-nccl-cu12==2.21.5" not in stage_torch.pins_of(wheel, python="3.11")  # the machine's Python decides
    assert stage_torch.lock_pin("SymPy") == stage_torch.lock_pin("sympy") == "sympy==1.13.1"  # the image lock's


def _dist(site: Path, name: str, requires: tuple[str, ...] = (), top: str | None = None) -> None:
    """An installed distribution `name` (its dist-info and a package of the same name) under `site`."""
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    (info / "METADATA").write_text(meta)
    module = (top or name).replace("-", "_")
    (site / module).mkdir()
    (site / module / "__init__.py").write_text("")
    (info / "RECORD").write_text(f"{module}/__init__.py,,\n{info.name}/METADATA,,\n")
    if top:
        (info / "top_level.txt").write_text(top + "\n")


def test_the_machines_packages_built_for_its_torch_are_hidden_beside_the_staged_one(tmp_path):
    machine, target = tmp_path / "machine", tmp_path / "target"
    target.mkdir()
    _dist(machine, "torchvision", ("torch (==2.11.0)", "numpy"))
    _dist(machine, "timm", ("torch", "torchvision", "pyyaml"))
    _dist(machine, "pytorch-lightning", ("torch>=2.1", "tqdm"), top="pytorch_lightning")
    _dist(machine, "peft", ("torch>=1.13",))  # the image installs it: kept
    _dist(machine, "numpy")  # needs no torch: kept
    image = stage_torch.image_names()
    assert {"peft", "torch", "transformers", "verl"} <= image and "torchvision" not in image

    hidden = stage_torch.hide_foreign(target, image, [str(machine)])
    assert hidden == ["pytorch_lightning", "timm", "torchvision"]
    modules = ("pytorch_lightning", "timm", "torchvision", "peft", "numpy")
    probe = f"import importlib.util as u; print([u.find_spec(m) is None for m in {modules!r}])"
    seen = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "PYTHONPATH": f"{target}{os.pathsep}{machine}"},
        capture_output=True,
        text=True,
    )
    assert seen.stdout.strip() == "[True, True, True, False, False]", seen.stderr


# A stand-in for ../shared/gpu/pascal-mask/sitecustomize.py's head: it counts its runs and runs the first other
# sitecustomize.py on the path, as the mask does.
MASK = """\
import importlib.util, os, sys
sys.MASK_RUNS = getattr(sys, "MASK_RUNS", 0) + 1
_here = os.path.dirname(os.path.abspath(__file__))
for _p in list(sys.path):
    if os.path.abspath(_p or ".") == _here:
        continue
    _cand = os.path.join(_p or ".", "sitecustomize.py")
    if os.path.isfile(_cand):
        _spec = importlib.util.spec_from_file_location("_chained_sitecustomize", _cand)
        _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
        break
"""


def test_the_hiding_and_the_pascal_mask_both_run_whichever_comes_first_on_the_path(tmp_path):
    machine, target, mask = tmp_path / "machine", tmp_path / "target", tmp_path / "mask"
    target.mkdir()
    mask.mkdir()
    (mask / "sitecustomize.py").write_text(MASK)
    _dist(machine, "timm", ("torch",))
    assert stage_torch.hide_foreign(target, stage_torch.image_names(), [str(machine)]) == ["timm"]
    probe = "import sys, importlib.util as u; print(u.find_spec('timm') is None, sys.MASK_RUNS)"
    for first, second in ((mask, target), (target, mask)):
        seen = subprocess.run(
            [sys.executable, "-c", probe],
            env={**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (first, second, machine)))},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert seen.stdout.split() == ["True", "1"], (first.name, seen.stderr)


def test_a_namespace_a_kept_package_shares_an_extra_and_a_compiled_module_are_told_apart(tmp_path):
    machine, target = tmp_path / "machine", tmp_path / "target"
    target.mkdir()
    _dist(machine, "protobuf", top="google")  # the image's: google.protobuf must stay importable
    (machine / "google-cloud-torchthing-1.0.dist-info").mkdir()
    (machine / "google-cloud-torchthing-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: google-cloud-torchthing\nVersion: 1.0\nRequires-Dist: torch\n"
    )
    (machine / "google-cloud-torchthing-1.0.dist-info" / "top_level.txt").write_text("google\n")
    _dist(machine, "optitorch", ('torch ; extra == "torch"',))  # torch only for an extra: kept
    info = machine / "cext-1.0.dist-info"  # a compiled module alone at the top, no top_level.txt
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cext\nVersion: 1.0\nRequires-Dist: torch>=2\n")
    (info / "RECORD").write_text("cext_cuda.cpython-312-x86_64-linux-gnu.so,,\ncext-1.0.dist-info/METADATA,,\n")
    (machine / "cext_cuda.cpython-312-x86_64-linux-gnu.so").write_bytes(b"")
    image = stage_torch.image_names()
    assert "protobuf" in image and "optitorch" not in image
    assert stage_torch.hide_foreign(target, image, [str(machine)]) == ["cext_cuda"]


def test_a_stray_folder_of_a_torch_needing_wheel_is_not_hidden(tmp_path):
    """botorch-like wheels ship top-level `sphinx/` or `docs/` folders (no __init__.py); hidden, `sphinx` stood in
    sys.modules as None and scipy.stats, which asks `'sphinx' in sys.modules` first, failed under transformers."""
    machine, target = tmp_path / "machine", tmp_path / "target"
    target.mkdir()
    _dist(machine, "botorch", ("torch>=2",))
    info = machine / "botorch-1.0.dist-info"
    (machine / "sphinx" / "source").mkdir(parents=True)
    (machine / "sphinx" / "source" / "conf.py").write_text("")
    (machine / "scripts").mkdir()
    (machine / "scripts" / "run_tutorials.py").write_text("")
    (machine / "loose.py").write_text("")
    (info / "RECORD").write_text(
        "botorch/__init__.py,,\nsphinx/source/conf.py,,\nscripts/run_tutorials.py,,\nloose.py,,\n"
        "botorch-1.0.dist-info/METADATA,,\n"
    )
    assert stage_torch.hide_foreign(target, stage_torch.image_names(), [str(machine)]) == ["botorch", "loose"]
    seen = subprocess.run(
        [sys.executable, "-c", "import sys; print('sphinx' in sys.modules, sys.modules.get('botorch', 1) is None)"],
        env={**os.environ, "PYTHONPATH": f"{target}{os.pathsep}{machine}"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert seen.stdout.split() == ["False", "True"], seen.stderr


def test_what_the_bundle_holds_at_other_versions_than_the_lock_travels_at_the_locks(tmp_path):
    (tmp_path / "whl").mkdir()
    nvml = stage_torch.lock_pin("nvidia-ml-py")
    assert nvml and nvml.startswith("nvidia-ml-py==")
    hub = stage_torch.lock_pin("huggingface-hub")  # the lock spells it huggingface_hub: the same pin all the same
    for name in (
        "nvidia_ml_py-13.615.71-py3-none-any.whl",
        f"huggingface_hub-{hub.split('==')[1]}-py3-none-any.whl",
        "not_in_the_lock-1.0-py3-none-any.whl",
        "omegaconf-2.3-py3-none-any.whl",  # the lock's 2.3.0, written short: the same version
    ):
        (tmp_path / "whl" / name).write_bytes(b"")
    assert stage_torch.bundle_mismatches(tmp_path) == [nvml]
    assert stage_torch.bundle_mismatches(tmp_path / "absent") == [] and stage_torch.bundle_mismatches(None) == []
