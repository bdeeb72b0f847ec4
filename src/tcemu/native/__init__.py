"""tcemu's native library: the ``tcemu::`` ops of rewritten TorchScript graphs for LibTorch hosts (no Python).

:func:`tcemu.emulate_` rewrites a scripted model's products into calls of ``tcemu::`` ops
(:mod:`tcemu.emulation.script_ops`); :func:`export_script` saves such a model. Python registers the ops when
tcemu is imported. A C++ host (LAMMPS's metatomic pair style, a LibTorch program) has no Python: it loads
``libtcemu_native.so`` (``torch::ops::load_library`` / ``dlopen`` before ``torch::jit::load``). With
``backend="torch"``, and on the CPU, its kernels run tcemu's reference algorithm (:mod:`tcemu.emulation.reference`)
in C++, with the bits of the Python path with that backend: the same ATen calls in the same order (the piece
products on the CPU, or on cuBLAS with TF32 off). With ``"auto"`` or ``"triton"`` on CUDA its GEMMs run tcemu's
Triton kernels compiled ahead of time (:mod:`tcemu.native._aot`), with the bits of the Python Triton path.

Build: ``python -m tcemu.native build`` (or ``make native``) compiles the kernels with the installed Triton and
``csrc/`` with CMake and Ninja against the installed torch, into ``build/native`` of the working directory
(``TCEMU_NATIVE_BUILD`` overrides it).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

__all__ = ["CSRC", "build", "build_dir", "library_path", "load", "export_script"]

#: the C++ sources and their CMakeLists.txt
CSRC = Path(__file__).parent / "csrc"
LIBRARY_NAME = "libtcemu_native.so"


def build_dir() -> Path:
    """Where :func:`build` writes: ``$TCEMU_NATIVE_BUILD``, else ``build/native`` under the working directory."""
    return Path(os.environ.get("TCEMU_NATIVE_BUILD") or Path.cwd() / "build" / "native").resolve()


def library_path(directory: str | os.PathLike | None = None) -> Path:
    """The built library's path (in :func:`build_dir` by default); FileNotFoundError that says how to build it."""
    path = Path(directory or build_dir()) / LIBRARY_NAME
    if not path.is_file():
        raise FileNotFoundError(f"tcemu: the native library is not built ({path} is missing); run "
                                "`python -m tcemu.native build` (or `make native`)")
    return path


def build(directory: str | os.PathLike | None = None, *, host: bool = False, jobs: int | None = None,
          quiet: bool = True) -> Path:
    """Build the native library (and, with ``host``, the C++ host demo against metatomic-torch's libraries from
    its wheel) into ``directory`` (:func:`build_dir` by default); returns the library's path. The GEMM kernels are
    compiled first with the installed Triton (into ``directory/aot``; none where Triton is missing). With CMake and
    Ninja: an incremental build (an up-to-date one costs a second); without them, the C++ compiler directly
    (``c++`` or ``$CXX``). Raises RuntimeError with the compiler's output if the build fails."""
    from ._build import build as _build  # noqa: PLC0415

    return _build(Path(directory or build_dir()).resolve(), host=host, jobs=jobs, quiet=quiet)


@functools.cache
def load(path: str | os.PathLike | None = None) -> str:
    """Load the native library into this process (``torch.ops.load_library``); returns what
    ``torch.ops.tcemu.native_info()`` says: where tcemu's Python ops were imported first, their kernels stay."""
    import torch  # noqa: PLC0415

    torch.ops.load_library(str(path or library_path()))
    return torch.ops.tcemu.native_info()


def export_script(model, method: str, path: str | os.PathLike, *, backend: str = "torch",
                  grad_weight_method: str | None = None, native_library: str | os.PathLike | None = None,
                  collect_extensions: str | os.PathLike | None = None) -> dict[str, int]:
    """Write a TorchScript ``.pt`` whose graphs call the ``tcemu::`` ops: ``model`` (a scripted module, a
    metatomic ``AtomisticModel``, any scriptable ``nn.Module``, or the path of a saved ``.pt``) is emulated with
    ``method`` by :func:`tcemu.emulate_` (a copy: its graphs rewritten) and saved with ``torch.jit.save``, the
    file's extra files (metatomic's metadata) kept. Returns the rewritten ops and their counts. A host loads the
    file after loading the native library (or tcemu's Python); ``backend`` is what both run: ``"torch"`` the
    reference, ``"auto"`` the GEMM kernels on CUDA (in the native library: those compiled ahead of time).

    For a metatomic model, ``native_library`` (the built library) is listed among the model's extensions, so that
    metatomic's ``load_model_extensions`` (which LAMMPS's pair style calls) loads it: by its absolute path, or,
    with ``collect_extensions``, copied into that directory (as ``tcemu/libtcemu_native.so``) and listed relative
    to it, for an engine given that directory as its extensions directory."""
    from ._export import export_script as _export  # noqa: PLC0415

    return _export(model, method, path, backend=backend, grad_weight_method=grad_weight_method,
                   native_library=native_library, collect_extensions=collect_extensions)
