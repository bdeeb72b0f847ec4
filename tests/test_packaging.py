"""The wheel's contents and metadata: package data covers every data file, the core stays lean, the extras carry
no stale caps (CI builds and installs the wheel itself: `make wheel-test`)."""

import fnmatch
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _packaged(path: Path) -> bool:
    rel = path.relative_to(ROOT / "src")
    for package, globs in PYPROJECT["tool"]["setuptools"]["package-data"].items():
        base = Path(*package.split("."))
        if base in rel.parents and any(fnmatch.fnmatch(str(rel.relative_to(base)), g) for g in globs):
            return True
    return False


def test_package_data_covers_every_data_file():
    data = [p for p in (ROOT / "src" / "tcemu").rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts]
    assert any(p.name == "water_box_192.extxyz" for p in data)
    assert [str(p) for p in data if not _packaged(p)] == []


def test_build_system_and_lean_core():
    assert "setuptools>=77" in PYPROJECT["build-system"]["requires"][0]  # the SPDX license string needs it
    deps = PYPROJECT["project"]["dependencies"]
    assert sorted(re.split(r"[<>=!;\s]", d)[0] for d in deps) == ["ml_dtypes", "numpy", "torch"]
    torch_floor = next(d for d in deps if d.startswith("torch"))
    assert tuple(int(x) for x in re.search(r">=(\d+)\.(\d+)", torch_floor).groups()) >= (2, 9)  # fp32_precision


def test_extras_have_no_unexplained_caps_or_runtime_setuptools():
    extras = PYPROJECT["project"]["optional-dependencies"]
    flat = [d for group in extras.values() for d in group]
    assert not any(d.startswith("setuptools") for d in flat)  # torchani's pkg_resources: tcemu.mlip._torchani
    assert not any(d.startswith("huggingface_hub") for d in flat)
    assert not any(d.startswith(("python-hostlist", "metatensor-learn")) for d in flat)  # metatrain's own
    assert {"ase", "torchsim", "mlip", "triton"} <= set(extras)


def test_no_stub_modules_for_dependencies():
    src = "\n".join(p.read_text() for p in (ROOT / "src").rglob("*.py"))
    assert 'sys.modules["hostlist"]' not in src


def test_autoload_hook_is_in_the_wheel():
    assert "_tcemu_autoload" in PYPROJECT["tool"]["setuptools"]["py-modules"]
    assert "tcemu-autoload.pth" in (ROOT / "setup.py").read_text()
    line = (ROOT / "src" / "tcemu-autoload.pth").read_text().strip()
    assert line.startswith("import ") and "\n" not in line  # site.py runs one-line imports only


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!;\[\s]", r)[0].lower() for r in requirements}


def test_the_demo_extra_is_the_mlip_extra_without_the_test_only_packages():
    extras = PYPROJECT["project"]["optional-dependencies"]
    demo, mlip = extras["demo"], extras["mlip"]
    assert set(demo) <= set(mlip)  # the same pins
    assert _names(mlip) - _names(demo) == {"mace-torch", "e3nn"}
    assert not _names(demo) & {"triton", "warp-lang", "nvalchemi-toolkit-ops", "torch-sim-atomistic"}
    assert "pytest-xdist" in _names(extras["dev"])

