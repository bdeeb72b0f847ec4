"""FP64 DMMA on the GPU against the FMA-chain preset: ``mma.sync.aligned.m8n8k4.row.col.f64`` bit for bit.

``python -m tcemu.numerics.hardware.dmma_check [--tiles 512] [--slices 4] [--out dmma.json]`` compiles a small
kernel (nvcc, ``sm_90a`` by default; ``--arch 80`` for an A100), issues ``--slices`` chained m8n8k4 instructions per
8 x 8 tile (K = 4 x slices, one accumulator in registers), on operands of every kind of
:mod:`tcemu.numerics.inputs_schemes`, and compares every output bit with ``get_preset(arch, "mma.m8n8k4", "fp64")``
(NaN bits too), and on the kind ``nan_priority``: operands NaN with probability 0.35 each, every NaN with its own
payload, sign and quiet bit, so that several NaNs meet in one FMA and the bits tell which operand's payload the
hardware keeps. It also checks that the kernel's SASS holds ``DMMA``. The JSON
summary lists, per kind, samples, agreements and the first disagreements (a, b, c, hardware, model).

Fragments (PTX ISA, "Matrix fragments for mma.m8n8k4 with .f64"): lane = 4 g + t; a = A[g][t], b = B[t][g],
c/d = C[g][2t], C[g][2t + 1].
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

__all__ = ["DMMA_SOURCE", "build", "run_dmma", "check", "main"]

DMMA_SOURCE = r"""
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void dmma_m8n8k4(const double* a, const double* b, const double* c, double* d, int slices) {
    // a: (T, S, 8, 4), b: (T, S, 4, 8), c, d: (T, 8, 8); one warp per tile
    int tile = blockIdx.x, lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    const double* ct = c + (size_t)tile * 64;
    double d0 = ct[g * 8 + 2 * t], d1 = ct[g * 8 + 2 * t + 1];
    for (int s = 0; s < slices; ++s) {
        double av = a[((size_t)tile * slices + s) * 32 + g * 4 + t];
        double bv = b[((size_t)tile * slices + s) * 32 + t * 8 + g];
        asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%4, %5};"
                     : "=d"(d0), "=d"(d1) : "d"(av), "d"(bv), "d"(d0), "d"(d1));
    }
    double* dt = d + (size_t)tile * 64;
    dt[g * 8 + 2 * t] = d0;
    dt[g * 8 + 2 * t + 1] = d1;
}

extern "C" int dmma_run(const double* a, const double* b, const double* c, double* d, long tiles, int slices) {
    size_t na = (size_t)tiles * slices * 32 * sizeof(double), nc = (size_t)tiles * 64 * sizeof(double);
    double *da, *db, *dc, *dd;
    if (cudaMalloc(&da, na) || cudaMalloc(&db, na) || cudaMalloc(&dc, nc) || cudaMalloc(&dd, nc)) return 1;
    cudaMemcpy(da, a, na, cudaMemcpyHostToDevice);
    cudaMemcpy(db, b, na, cudaMemcpyHostToDevice);
    cudaMemcpy(dc, c, nc, cudaMemcpyHostToDevice);
    dmma_m8n8k4<<<(unsigned)tiles, 32>>>(da, db, dc, dd, slices);
    int err = (int)cudaDeviceSynchronize();
    cudaMemcpy(d, dd, nc, cudaMemcpyDeviceToHost);
    cudaFree(da); cudaFree(db); cudaFree(dc); cudaFree(dd);
    return err;
}
"""


def build(arch: str = "90a", build_dir: Path | None = None) -> Path:
    """Compile :data:`DMMA_SOURCE` for ``sm_<arch>`` (cached by source and arch); return the library's path."""
    build_dir = Path(build_dir or os.environ.get("TCEMU_HW_BUILD", Path.home() / ".cache" / "tcemu" / "hw"))
    key = hashlib.sha256((DMMA_SOURCE + arch).encode()).hexdigest()[:16]
    lib = build_dir / f"libtcemu_dmma_{key}.so"
    if not lib.exists():
        build_dir.mkdir(parents=True, exist_ok=True)
        src = build_dir / f"tcemu_dmma_{key}.cu"
        src.write_text(DMMA_SOURCE)
        nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
        cmd = [nvcc, "-O2", "-shared", "-Xcompiler", "-fPIC", f"-gencode=arch=compute_{arch},code=sm_{arch}",
               "-o", str(lib), str(src)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode:
            raise RuntimeError(f"tcemu: nvcc failed ({' '.join(cmd)}):\n{res.stderr[-3000:]}")
    return lib


def sass_has_dmma(lib: Path) -> bool:
    """Whether the compiled kernel holds a DMMA instruction (cuobjdump -sass)."""
    from .runner import _triton_cuobjdump  # cuobjdump from PATH, or the one Triton ships

    tool = _triton_cuobjdump()
    out = subprocess.run([tool, "-sass", str(lib)], capture_output=True, text=True).stdout
    return "DMMA" in out


def run_dmma(lib: Path, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """a (T, S, 8, 4), b (T, S, 4, 8), c (T, 8, 8) float64 -> d (T, 8, 8): S chained m8n8k4 per tile."""
    dll = ctypes.CDLL(str(lib))
    dll.dmma_run.restype = ctypes.c_int
    dll.dmma_run.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_long, ctypes.c_int]
    a, b, c = (np.ascontiguousarray(x, np.float64) for x in (a, b, c))
    d = np.empty_like(c)
    rc = dll.dmma_run(a.ctypes.data, b.ctypes.data, c.ctypes.data, d.ctypes.data, a.shape[0], a.shape[1])
    if rc:
        raise RuntimeError(f"tcemu: dmma_run failed with CUDA error {rc}")
    return d


#: the input kind whose NaNs meet: which operand's payload survives
NAN_PRIORITY = "nan_priority"


def nan_priority_operands(shape: tuple[int, ...], rng: np.random.Generator, p_nan: float = 0.35) -> np.ndarray:
    """fp64 bit patterns (uint64): normal random values, each a NaN with probability ``p_nan`` instead, with a
    random payload, sign and quiet bit of its own (so that the result's bits name the operand it came from)."""
    bits = rng.standard_normal(shape).view(np.uint64).copy()
    payload = rng.integers(1, 1 << 51, size=shape, dtype=np.uint64)
    quiet = rng.integers(0, 2, size=shape, dtype=np.uint64) << np.uint64(51)
    sign = rng.integers(0, 2, size=shape, dtype=np.uint64) << np.uint64(63)
    nans = sign | np.uint64(0x7FF0000000000000) | quiet | payload
    where = rng.random(shape) < p_nan
    bits[where] = nans[where]
    return bits


def check(lib, arch_name: str, tiles: int, slices: int, seed: int = 0, runner=run_dmma) -> dict:
    """Hardware (``runner(lib, a, b, c)``) against the preset on every input kind; returns the summary."""
    from tcemu.numerics import block_fma_bits, get_preset
    from tcemu.numerics.inputs_schemes import SCHEME_KINDS, scheme_operands

    p = get_preset(arch_name, "mma.m8n8k4", "fp64")
    k = 4 * slices
    out = {"preset": p.label, "sources": p.sources, "tiles": tiles, "K": k, "kinds": {}}
    for i, kind in enumerate((*SCHEME_KINDS, NAN_PRIORITY)):
        rng = np.random.default_rng(seed + i)
        # 8 rows of A and 8 columns of B per tile: operands drawn as rows, outputs (i, j) pair A row i, B column j
        if kind == NAN_PRIORITY:
            a_rows, b_rows, c0 = (nan_priority_operands(shape, rng) for shape in ((tiles * 8, k), (tiles * 8, k),
                                                                                   (tiles * 64,)))
        else:
            a_rows, b_rows, c0 = scheme_operands(p, tiles * 8, k, kind, rng)
        a = a_rows.view(np.float64).reshape(tiles, 8, slices, 4).transpose(0, 2, 1, 3)
        bcols = b_rows.view(np.float64).reshape(tiles, 8, slices, 4)  # (T, N, S, 4)
        b = bcols.transpose(0, 2, 3, 1)  # (T, S, 4, N)
        c = np.resize(c0.view(np.float64), tiles * 64).reshape(tiles, 8, 8)
        d = runner(lib, a, b, c)
        # the model: output (i, j) of tile T is the chain over A[T, :, i, :] and B[T, :, :, j]
        am = np.broadcast_to(a_rows.view(np.float64).reshape(tiles, 8, 1, k), (tiles, 8, 8, k)).reshape(-1, k)
        bm = np.broadcast_to(b_rows.view(np.float64).reshape(tiles, 1, 8, k), (tiles, 8, 8, k)).reshape(-1, k)
        want = block_fma_bits(am.view(np.uint64), bm.view(np.uint64), c.reshape(-1).view(np.uint64), p)
        got = d.reshape(-1).view(np.uint64)
        nan = np.isnan(d.reshape(-1)) & np.isnan(want.view(np.float64))
        same = got == want  # NaN bits included
        bad = np.nonzero(~same)[0]
        out["kinds"][kind] = {
            "samples": int(same.size), "agree": int(same.sum()), "nan_outputs": int(nan.sum()),
            "nan_bits_agree": int((same & nan).sum()),
            "nan_bits_hw": sorted({f"{int(x):#x}" for x in got[np.isnan(d.reshape(-1))][:1000]}),
            "disagreements": [{"a": am[j].tolist(), "b": bm[j].tolist(), "c": float(c.reshape(-1)[j]),
                               "hw": f"{int(got[j]):#x}", "model": f"{int(want[j]):#x}"} for j in bad[:5]],
        }
    out["agree_all"] = all(v["samples"] == v["agree"] for v in out["kinds"].values())
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="90a", help="nvcc sm_ target: 90a (H100/H200), 80 (A100)")
    ap.add_argument("--tiles", type=int, default=512, help="8 x 8 tiles per input kind")
    ap.add_argument("--slices", type=int, default=4, help="chained m8n8k4 per tile (K = 4 x slices)")
    ap.add_argument("--out", default=None, help="JSON summary (default: $OUT/dmma_check.json or ./dmma_check.json)")
    args = ap.parse_args(argv)
    lib = build(args.arch)
    summary = check(lib, "h100" if args.arch.startswith("90") else "a100", args.tiles, args.slices)
    summary["sass_dmma"] = sass_has_dmma(lib)
    path = Path(args.out or Path(os.environ.get("OUT", ".")) / "dmma_check.json")
    path.write_text(json.dumps(summary, indent=1))
    for kind, v in summary["kinds"].items():
        print(f"{kind:8s} {v['agree']}/{v['samples']} agree; NaN bits {v['nan_bits_hw'][:3]}")
    print(f"SASS DMMA: {summary['sass_dmma']}; all agree: {summary['agree_all']}; wrote {path}")
    return 0 if summary["agree_all"] and summary["sass_dmma"] else 1


if __name__ == "__main__":
    sys.exit(main())
