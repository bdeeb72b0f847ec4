"""tcemu's native library: the ``tcemu::`` ops of rewritten TorchScript graphs for LibTorch hosts (no Python).

:func:`tcemu.emulate_` rewrites a scripted model's products into calls of ``tcemu::`` ops
(:mod:`tcemu.emulation.script_ops`); :func:`export_script` saves such a model. Python registers the ops when
tcemu is imported. A C++ host (LAMMPS's metatomic pair style, a LibTorch program) has no Python: it loads
``libtcemu_native.so`` (``torch::ops::load_library`` / ``dlopen`` before ``torch::jit::load``), whose kernels run
tcemu's reference algorithm (:mod:`tcemu.emulation.reference`) in C++, with the bits of the Python path with
``backend="torch"``: the same ATen calls in the same order (the piece products on the CPU, or on cuBLAS with TF32
off). Every backend string runs that reference: the Triton kernels are not compiled ahead of time.

Build: ``python -m tcemu.native build`` (or ``make native``) compiles ``csrc/`` with CMake and Ninja against the
installed torch, into ``build/native`` of the working directory (``TCEMU_NATIVE_BUILD`` overrides it).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
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


def torch_cmake_args() -> list[str]:
    """CMake definitions of the installed torch: headers, libraries and the C++ ABI flag it was built with."""
    import torch  # noqa: PLC0415
    from torch.utils import cpp_extension  # noqa: PLC0415

    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return [f"-DTCEMU_TORCH_INCLUDE_DIRS={';'.join(cpp_extension.include_paths())}",
            f"-DTCEMU_TORCH_LIBRARY_DIR={Path(torch.__file__).parent / 'lib'}", f"-DTCEMU_CXX11_ABI={abi}"]


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"tcemu: building the native library needs {name}, which is not on PATH; install it "
                           "(cmake, ninja and a C++17 compiler)")
    return found


def build(directory: str | os.PathLike | None = None, *, host: bool = False, jobs: int | None = None,
          quiet: bool = True) -> Path:
    """Configure and build the native library (and, with ``host``, the C++ host demo against metatomic-torch's
    libraries from its wheel); returns the library's path. Incremental: an up-to-date build costs a second."""
    out = Path(directory or build_dir()).resolve()
    out.mkdir(parents=True, exist_ok=True)
    configure = [_tool("cmake"), "-S", str(CSRC), "-B", str(out), "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={_tool('ninja')}",
                 "-DCMAKE_BUILD_TYPE=Release", *torch_cmake_args()]
    if host:
        import torch  # noqa: PLC0415

        # (metatensor-torch's CMake package finds torch's own: TorchConfig.cmake)
        prefixes = [*metatomic_prefix_path(), torch.utils.cmake_prefix_path]
        configure += ["-DTCEMU_BUILD_HOST=ON", f"-DCMAKE_PREFIX_PATH={';'.join(prefixes)}"]
    steps = [configure, [_tool("cmake"), "--build", str(out), *(["-j", str(jobs)] if jobs else [])]]
    for cmd in steps:
        done = subprocess.run(cmd, capture_output=quiet, text=True)
        if done.returncode:
            log = (done.stdout or "") + (done.stderr or "") if quiet else ""
            raise RuntimeError(f"tcemu: building the native library failed ({' '.join(cmd[:3])} ...):\n{log[-4000:]}")
    return library_path(out)


def metatomic_prefix_path() -> list[str]:
    """CMake prefixes of metatomic-torch, metatensor-torch and metatensor from their wheels (the versions built
    for the installed torch)."""
    import metatensor  # noqa: PLC0415
    import metatensor.torch  # noqa: F401, PLC0415
    import metatomic.torch  # noqa: F401, PLC0415
    import torch  # noqa: PLC0415

    version = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    site = Path(metatensor.__file__).parent.parent
    prefixes = [site / "metatomic" / "torch" / f"torch-{version}", site / "metatensor_torch" / f"torch-{version}",
                site / "metatensor"]
    missing = [str(p) for p in prefixes if not p.is_dir()]
    if missing:
        raise RuntimeError(f"tcemu: metatomic-torch / metatensor-torch libraries for torch {version} not found "
                           f"({', '.join(missing)}); install metatomic-torch built for this torch")
    return [str(p) for p in prefixes]


@functools.cache
def load(path: str | os.PathLike | None = None) -> str:
    """Load the native library into this process (``torch.ops.load_library``); returns what
    ``torch.ops.tcemu.native_info()`` says: where tcemu's Python ops were imported first, their kernels stay."""
    import torch  # noqa: PLC0415

    torch.ops.load_library(str(path or library_path()))
    return torch.ops.tcemu.native_info()


def export_script(model, method: str, path: str | os.PathLike, *, backend: str = "torch",
                  grad_weight_method: str | None = None,
                  native_library: str | os.PathLike | None = None) -> dict[str, int]:
    """Write a TorchScript ``.pt`` whose graphs call the ``tcemu::`` ops: ``model`` (a scripted module, a
    metatomic ``AtomisticModel``, any scriptable ``nn.Module``, or the path of a saved ``.pt``) is emulated with
    ``method`` by :func:`tcemu.emulate_` (a copy: its graphs rewritten) and saved with ``torch.jit.save``, the
    file's extra files (metatomic's metadata) kept. ``native_library`` (a metatomic model only): the built library,
    listed among the model's extensions, so that metatomic's ``load_model_extensions`` (which LAMMPS's pair style
    calls) loads it. Returns the rewritten ops and their counts. A host loads the file after loading the native
    library (or tcemu's Python); ``backend`` is what tcemu's Python runs (the native library runs its reference)."""
    from ._export import export_script as _export  # noqa: PLC0415

    return _export(model, method, path, backend=backend, grad_weight_method=grad_weight_method,
                   native_library=native_library)


