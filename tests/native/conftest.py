"""tcemu's native library (tcemu.native): built once per session (incrementally, into build/native-tests under
the repository, shared by the xdist workers under a file lock), then loaded in subprocesses without tcemu."""

from __future__ import annotations

import fcntl
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build" / "native-tests"


def _missing_tools() -> list[str]:
    return [tool for tool in ("cmake", "ninja", "c++") if shutil.which(tool) is None]


def _build(host: bool) -> Path:
    from tcemu import native

    missing = _missing_tools()
    if missing:
        pytest.skip(f"building tcemu's native library needs {', '.join(missing)} (cmake, ninja, a C++17 compiler)")
    BUILD.mkdir(parents=True, exist_ok=True)
    with open(BUILD.parent / ".native-tests.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time (xdist workers); the others find it up to date
        return native.build(BUILD, host=host)


@pytest.fixture(scope="session")
def native_library() -> Path:
    """The built ``libtcemu_native.so``."""
    return _build(host=False)


@pytest.fixture(scope="session")
def native_host(native_library) -> Path:
    """The built C++ host demo (``tcemu_host``), against metatomic-torch's libraries from its wheel."""
    pytest.importorskip("metatomic.torch", reason="the host demo links metatomic-torch")
    _build(host=True)
    return BUILD / "tcemu_host"
