"""Build and load CUTLASS's 3xTF32 GEMM (``gemm_3xtf32.cu``, CUTLASS example 27's configuration) for
``benchmarks/gemm.py --cutlass``.

CUTLASS is header-only: the headers come from the ``nvidia-cutlass`` wheel (``cutlass_library/source/include``),
given as the wheel file itself (unpacked here, no install), its unpacked folder, or a CUTLASS checkout. nvcc builds
one shared library (about a minute), loaded with ctypes; the GEMM runs on torch's current stream.

    python benchmarks/cutlass_3xtf32/build.py --cutlass nvidia_cutlass-4.2.0.0-py3-none-any.whl --out /tmp/c3x
"""

from __future__ import annotations

import argparse
import ctypes
import shutil
import subprocess
import time
import zipfile
from pathlib import Path

import torch

SOURCE = Path(__file__).resolve().parent / "gemm_3xtf32.cu"
#: where the headers sit in the nvidia-cutlass wheel, and in a CUTLASS checkout
WHEEL_INCLUDE = "cutlass_library/source/include"
CHECKOUT_INCLUDE = "include"


def include_dir(cutlass: str | Path, scratch: Path) -> Path:
    """CUTLASS's include folder from a wheel file (unpacked into ``scratch``), an unpacked wheel or a checkout."""
    cutlass = Path(cutlass)
    if cutlass.is_file() and cutlass.suffix == ".whl":
        dest = scratch / "nvidia_cutlass"
        if not (dest / WHEEL_INCLUDE / "cutlass" / "cutlass.h").is_file():
            with zipfile.ZipFile(cutlass) as z:
                z.extractall(dest, [n for n in z.namelist() if n.startswith(WHEEL_INCLUDE + "/")])
        cutlass = dest
    for sub in (WHEEL_INCLUDE, CHECKOUT_INCLUDE, "."):
        if (cutlass / sub / "cutlass" / "cutlass.h").is_file():
            return cutlass / sub
    raise FileNotFoundError(f"no CUTLASS headers (cutlass/cutlass.h) under {cutlass}: give the nvidia-cutlass wheel "
                            "(pip download nvidia-cutlass --no-deps), its unpacked folder or a CUTLASS checkout")


def build(cutlass: str | Path, out_dir: str | Path, arch: str = "90a", nvcc: str | None = None) -> Path:
    """Compile ``gemm_3xtf32.cu`` into ``out_dir/libtcemu_cutlass_3xtf32_sm<arch>.so``, unless a library built
    from the same source is there already (a build started earlier, e.g. in the background)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lib = out_dir / f"libtcemu_cutlass_3xtf32_sm{arch}.so"
    if lib.is_file() and lib.stat().st_mtime >= SOURCE.stat().st_mtime:
        print(f"using {lib}", flush=True)
        return lib
    inc = include_dir(cutlass, out_dir)
    nvcc = nvcc or shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    tmp = lib.with_name(lib.name + ".tmp")  # renamed when complete: a reader never loads half a library
    cmd = [nvcc, "-O3", "-std=c++17", "-DNDEBUG", "--expt-relaxed-constexpr", "-shared", "-Xcompiler", "-fPIC",
           f"-gencode=arch=compute_{arch},code=sm_{arch}", f"-I{inc}", "-o", str(tmp), str(SOURCE)]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"nvcc failed ({' '.join(cmd)}):\n{res.stderr[-4000:]}")
    tmp.replace(lib)
    print(f"built {lib} with {nvcc} in {time.perf_counter() - t0:.0f} s", flush=True)
    return lib


class Cutlass3xTF32:
    """``a @ b`` by CUTLASS's 3xTF32 kernel: ``nt(a, w)`` = a @ w^T for w (N, K); ``nn(a, b)`` = a @ b for b (K, N).
    float32, contiguous, CUDA; M, N, K multiples of 4 (the kernel's 16-byte loads)."""

    def __init__(self, lib: str | Path):
        self._lib = ctypes.CDLL(str(lib))
        for name in ("tcemu_cutlass_3xtf32_nt", "tcemu_cutlass_3xtf32_nn"):
            fn = getattr(self._lib, name)
            fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 3 + [ctypes.c_void_p]
            fn.restype = ctypes.c_int

    def _call(self, fn, a: torch.Tensor, b: torch.Tensor, N: int) -> torch.Tensor:
        if a.dtype != torch.float32 or b.dtype != torch.float32 or not (a.is_contiguous() and b.is_contiguous()):
            raise ValueError("tcemu cutlass 3xTF32: float32 contiguous operands only")
        M, K = a.shape
        d = torch.empty(M, N, device=a.device, dtype=torch.float32)
        rc = fn(a.data_ptr(), b.data_ptr(), d.data_ptr(), M, N, K, torch.cuda.current_stream(a.device).cuda_stream)
        if rc != 0:
            raise RuntimeError(f"tcemu cutlass 3xTF32 failed (code {rc}) at M={M} N={N} K={K}")
        return d

    def nt(self, a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return self._call(self._lib.tcemu_cutlass_3xtf32_nt, a, w, w.shape[0])

    def nn(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self._call(self._lib.tcemu_cutlass_3xtf32_nn, a, b, b.shape[1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cutlass", required=True, help="nvidia-cutlass wheel, its unpacked folder, or a CUTLASS checkout")
    p.add_argument("--out", default="out/cutlass_3xtf32")
    p.add_argument("--arch", default="90a")
    args = p.parse_args()
    lib = build(args.cutlass, args.out, args.arch)
    if torch.cuda.is_available():  # a check against the FP64 product
        g = Cutlass3xTF32(lib)
        a, w = torch.randn(1000, 256, device="cuda"), torch.randn(512, 256, device="cuda")
        ref = a.double() @ w.double().T
        for name, out in (("nt", g.nt(a, w)), ("nn", g.nn(a, w.T.contiguous()))):
            print(name, f"rel error {((out.double() - ref).norm() / ref.norm()).item():.2e}")


if __name__ == "__main__":
    main()
