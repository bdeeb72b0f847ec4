"""Building the native library and the host demo against the installed torch (:func:`tcemu.native.build`)."""

from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import CSRC, LIBRARY_NAME

SOURCES = ("methods.cpp", "reference.cpp", "autograd.cpp", "contractions.cpp", "einsum.cpp", "ops.cpp",
           "aot_launch.cpp", "aot_gemm.cpp", "decision.cpp")
#: where the ahead-of-time kernels are generated, under the build directory
AOT_DIR = "aot"
HOST = "tcemu_host"


def _torch():
    import torch  # noqa: PLC0415
    from torch.utils import cpp_extension  # noqa: PLC0415

    return (cpp_extension.include_paths(), Path(torch.__file__).parent / "lib", int(torch._C._GLIBCXX_USE_CXX11_ABI),
            torch.utils.cmake_prefix_path, ".".join(torch.__version__.split("+")[0].split(".")[:2]))


def metatomic_prefix_path() -> list[Path]:
    """Prefixes (include/, lib/) of metatomic-torch, metatensor-torch and metatensor from their wheels, the versions
    built for the installed torch."""
    import metatensor  # noqa: PLC0415
    import metatensor.torch  # noqa: F401, PLC0415
    import metatomic.torch  # noqa: F401, PLC0415

    version = _torch()[4]
    site = Path(metatensor.__file__).parent.parent
    prefixes = [site / "metatomic" / "torch" / f"torch-{version}", site / "metatensor_torch" / f"torch-{version}",
                site / "metatensor"]
    missing = [str(p) for p in prefixes if not p.is_dir()]
    if missing:
        raise RuntimeError(f"tcemu: metatomic-torch / metatensor-torch libraries for torch {version} not found "
                           f"({', '.join(missing)}); install metatomic-torch built for this torch")
    return prefixes


def _run(cmd: list[str], quiet: bool) -> None:
    done = subprocess.run(cmd, capture_output=quiet, text=True)
    if done.returncode:
        log = ((done.stdout or "") + (done.stderr or "")) if quiet else ""
        raise RuntimeError(f"tcemu: building the native library failed ({' '.join(cmd[:3])} ...):\n{log[-4000:]}")


def _aot_sources(out: Path) -> list[Path]:
    """The generated sources: the ahead-of-time kernels (compiled by the installed Triton, or none and why) and the
    shipped small-shape tables."""
    from . import _aot, _decision  # noqa: PLC0415

    return [_aot.generate(out / AOT_DIR), _decision.generate(out / AOT_DIR)]


def _with_cmake(out: Path, host: bool, jobs: int | None, quiet: bool) -> None:
    includes, libdir, abi, torch_prefix, _ = _torch()
    cmake, ninja = shutil.which("cmake"), shutil.which("ninja")
    configure = [cmake, "-S", str(CSRC), "-B", str(out), "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}",
                 "-DCMAKE_BUILD_TYPE=Release", f"-DTCEMU_TORCH_INCLUDE_DIRS={';'.join(includes)}",
                 f"-DTCEMU_TORCH_LIBRARY_DIR={libdir}", f"-DTCEMU_CXX11_ABI={abi}",
                 f"-DTCEMU_AOT_SOURCE={';'.join(map(str, _aot_sources(out)))}"]
    if host:  # (metatensor-torch's CMake package finds torch's own: TorchConfig.cmake)
        prefixes = [*map(str, metatomic_prefix_path()), torch_prefix]
        configure += ["-DTCEMU_BUILD_HOST=ON", f"-DCMAKE_PREFIX_PATH={';'.join(prefixes)}"]
    else:
        configure += ["-DTCEMU_BUILD_HOST=OFF"]
    _run(configure, quiet)
    _run([cmake, "--build", str(out), *(["-j", str(jobs)] if jobs else [])], quiet)


def _with_compiler(out: Path, host: bool, jobs: int | None, quiet: bool, library: bool = True) -> None:
    """The same build without CMake: one compiler call per source (in parallel), then the link; ``library=False``:
    the host demo only."""
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        raise RuntimeError("tcemu: building the native library needs a C++17 compiler (c++, g++ or $CXX) and "
                           "preferably cmake and ninja; none is on PATH")
    includes, libdir, abi, _, _ = _torch()
    flags = ["-std=c++17", "-O3", "-fPIC", "-DNDEBUG", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
             *(f"-isystem{p}" for p in includes)]
    sources = [CSRC / s for s in SOURCES] + (_aot_sources(out) if library else [])
    objects = [out / f"{s.stem}.o" for s in sources]
    headers = max((CSRC / h).stat().st_mtime for h in ("tcemu_native.h", "aot.h", "decision.h"))

    def compile_one(pair: tuple[Path, Path]) -> None:
        source, obj = pair
        if not obj.exists() or obj.stat().st_mtime < max(source.stat().st_mtime, headers):
            _run([cxx, *flags, f"-I{CSRC}", "-c", str(source), "-o", str(obj)], quiet)

    if library:
        with ThreadPoolExecutor(jobs or os.cpu_count() or 1) as pool:
            list(pool.map(compile_one, zip(sources, objects)))
    cuda = [f"-l{lib}" for lib in ("torch_cuda", "c10_cuda") if (libdir / f"lib{lib}.so").exists()]
    # (a CUDA torch: its CUDA kernels are registered when these load; a C++ host must load them itself)
    torch_libs = [f"-L{libdir}", "-ltorch", "-ltorch_cpu", "-lc10", f"-Wl,-rpath,{libdir}",
                  *(["-Wl,--no-as-needed", *cuda, "-Wl,--as-needed"] if cuda else [])]
    if library:
        _run([cxx, "-shared", *map(str, objects), "-o", str(out / LIBRARY_NAME), *torch_libs, "-ldl"], quiet)
    binary = out / HOST
    if host and not (binary.exists() and binary.stat().st_mtime > (CSRC / "host" / "host.cpp").stat().st_mtime):
        prefixes = metatomic_prefix_path()
        _run([cxx, *flags, *(f"-isystem{p / 'include'}" for p in prefixes), str(CSRC / "host" / "host.cpp"), "-o",
              str(out / HOST), *torch_libs, *(f"-L{p / 'lib'}" for p in prefixes),
              *(f"-Wl,-rpath,{p / 'lib'}" for p in prefixes), "-lmetatomic_torch", "-lmetatensor_torch", "-lmetatensor",
              "-ldl"], quiet)


def build(out: Path, *, host: bool = False, jobs: int | None = None, quiet: bool = True) -> Path:
    """See :func:`tcemu.native.build`."""
    out.mkdir(parents=True, exist_ok=True)
    if not (shutil.which("cmake") and shutil.which("ninja")) or os.environ.get("TCEMU_NATIVE_NO_CMAKE"):
        _with_compiler(out, host, jobs, quiet)
        return out / LIBRARY_NAME
    try:
        _with_cmake(out, host, jobs, quiet)
    except RuntimeError:
        if not host:
            raise
        # the host's CMake packages (metatomic-torch finds TorchConfig.cmake, which a CUDA torch ties to a CUDA
        # toolkit that CMake must find): the compiler directly then, the library with the same sources
        _with_cmake(out, False, jobs, quiet)
        _with_compiler(out, True, jobs, quiet, library=False)
    return out / LIBRARY_NAME
