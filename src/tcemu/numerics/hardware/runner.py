"""Compile-once runner of the Tensor Core kernels: nvcc builds a shared library, ctypes calls it with raw bits.

``Runner()`` builds ``_cuda_source.CUDA_SOURCE`` with ``nvcc -gencode=arch=compute_90a,code=sm_90a`` (no
``-ftz``, no fast math) into a cache folder keyed by the source hash, loads it, and runs any :class:`Case` on
NumPy arrays of raw bits::

    r = Runner()
    d = r.run(case, a, b, c)     # a (T, M, K), b (T, K, N), c (T, M, N): uint8/16/32 bits; d like c

The library allocates device memory itself (plain cudaMalloc, kept between calls), so nothing but NumPy and
the CUDA driver is needed at run time. ``sass()`` disassembles it with ``cuobjdump`` so a run can check that
the intended instruction ran; ``device_info()`` reads the GPU name, driver and runtime versions.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import time
from functools import cached_property
from pathlib import Path

import numpy as np

from ._cuda_source import CUDA_SOURCE, WMMA_INSTANTIATIONS, WMMA_SOURCE
from .cases import ALL_CASES, Case

__all__ = ["Runner", "build_library", "NVCC_FLAGS", "DEFAULT_LBO", "DEFAULT_SBO", "wmma_sass", "check_case_sass"]

NVCC_FLAGS = ("-O2", "-shared", "-Xcompiler", "-fPIC", "-gencode=arch=compute_90a,code=sm_90a")
# wgmma descriptors, K-major without swizzle (32-byte rows = 2 core matrices along K): LBO = distance between
# core matrices adjacent in K, SBO = between 8-row groups.
DEFAULT_LBO = 128
DEFAULT_SBO = 256


def _build_dir() -> Path:
    return Path(os.environ.get("TCEMU_HW_BUILD", Path.home() / ".cache" / "tcemu" / "hw"))


def build_library(build_dir: Path | None = None, nvcc: str | None = None, verbose: bool = False) -> Path:
    """Compile the kernels once (cached by source and flag hash); return the shared library's path."""
    build_dir = Path(build_dir or _build_dir())
    key = hashlib.sha256((CUDA_SOURCE + " ".join(NVCC_FLAGS)).encode()).hexdigest()[:16]
    lib = build_dir / f"libtcemu_hw_{key}.so"
    if lib.exists():
        return lib
    nvcc = nvcc or shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    build_dir.mkdir(parents=True, exist_ok=True)
    src = build_dir / f"tcemu_hw_{key}.cu"
    src.write_text(CUDA_SOURCE)
    tmp = lib.with_suffix(f".tmp{os.getpid()}.so")
    cmd = [nvcc, *NVCC_FLAGS, "-o", str(tmp), str(src)]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"nvcc failed ({' '.join(cmd)}):\n{res.stderr[-4000:]}")
    tmp.replace(lib)
    if verbose:
        print(f"built {lib.name} in {time.perf_counter() - t0:.1f} s")
    return lib


class Runner:
    """Runs Tensor Core cases on the current CUDA device (see module docstring)."""

    def __init__(self, lib_path: str | Path | None = None, verbose: bool = False,
                 lbo: int = DEFAULT_LBO, sbo: int = DEFAULT_SBO):
        self.lib_path = Path(lib_path) if lib_path else build_library(verbose=verbose)
        self._lib = ctypes.CDLL(str(self.lib_path))
        self._lib.tc_run.restype = ctypes.c_int
        self._lib.tc_run.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                     ctypes.c_void_p, ctypes.c_long, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                     ctypes.c_int]
        self._lib.tc_error_string.restype = ctypes.c_char_p
        self._lib.tc_device_info.restype = ctypes.c_int
        self.lbo, self.sbo = lbo, sbo
        n = self._lib.tc_num_cases()
        if n != len(ALL_CASES):
            raise RuntimeError(f"library has {n} cases, Python table {len(ALL_CASES)}")

    # ------------------------------------------------------------------------------------------------------
    def run(self, case: Case, a: np.ndarray, b: np.ndarray, c: np.ndarray, *, scale_d: int = 1) -> np.ndarray:
        """D = A @ B + C on the Tensor Core, bits in and out.

        a: (T, M, K) or (T, S, M, K) for S K-slices issued back to back into one accumulator (S <= 4 for wgmma);
        b: (T, K, N) or (T, S, K, N); c: (T, M, N). Dtypes are the formats' bit containers (uint8/16/32).
        ``scale_d=0`` issues the first wgmma with scale-d = 0 (C ignored); mma.sync ignores it.
        """
        a = np.asarray(a)
        b = np.asarray(b)
        c = np.asarray(c)
        if a.ndim == 3:
            a, b = a[:, None], b[:, None]
        t, s = a.shape[:2]
        if a.shape != (t, s, case.M, case.K) or b.shape != (t, s, case.K, case.N) or c.shape != (t, case.M, case.N):
            raise ValueError(f"{case.name}: shapes a {a.shape}, b {b.shape}, c {c.shape} do not fit "
                             f"M={case.M} N={case.N} K={case.K}")
        a = np.ascontiguousarray(a.astype(case.in_dtype, copy=False))
        bt = np.ascontiguousarray(np.swapaxes(b.astype(case.in_dtype, copy=False), -1, -2))  # N x K per slice
        c = np.ascontiguousarray(c.astype(case.out_dtype, copy=False))
        d = np.empty_like(c)
        rc = self._lib.tc_run(case.id, a.ctypes.data, bt.ctypes.data, c.ctypes.data, d.ctypes.data, t, s,
                              int(scale_d), self.lbo, self.sbo)
        if rc != 0:
            raise RuntimeError(f"{case.name}: tc_run failed: {self._lib.tc_error_string(rc).decode()} ({rc})")
        return d

    # ------------------------------------------------------------------------------------------------------
    @cached_property
    def device(self) -> dict:
        buf = ctypes.create_string_buffer(512)
        rc = self._lib.tc_device_info(buf, 512)
        if rc != 0:
            raise RuntimeError(f"tc_device_info failed: {self._lib.tc_error_string(rc).decode()}")
        name, cc, drv, rt, sms = buf.value.decode().split("|")
        info = {"gpu": name, "compute_capability": cc, "cuda_driver_api": _cuda_ver(int(drv)),
                "cuda_runtime": _cuda_ver(int(rt)), "sm_count": int(sms)}
        info.update(_tool_versions())
        return info

    def sass(self) -> dict[str, list[str]]:
        """Kernel name -> list of SASS opcodes (with modifiers), from ``cuobjdump -sass``."""
        return parse_sass(_run_text(["cuobjdump", "-sass", str(self.lib_path)]))

    def check_sass(self) -> dict[str, dict]:
        """Per case: the tensor-core opcodes found in its kernel and whether the expected family is there."""
        kernels = self.sass()
        return {case.name: check_case_sass(case, kernels) for case in ALL_CASES}


def check_case_sass(case: Case, kernels: dict[str, list[str]]) -> dict:
    """Whether a case's kernel (by its tag, in ``kernels``: name -> opcodes) issues the intended instructions: the
    expected family (HMMA, HGMMA, QGMMA; mma.sync never a warpgroup op), and for WMMA only ``case.sass_exact``,
    a multiple of ``case.sass_count`` of them (the compiler may unroll the K-slice loop)."""
    ops = next((v for k, v in kernels.items() if case.kernel_tag in k), None)
    if ops is None:
        return {"ok": False, "opcodes": [], "note": "kernel not found"}
    tc = sorted({o for o in ops if re.match(r"(HMMA|HGMMA|QGMMA|IMMA|F2FP|HADD2|FADD|WARPGROUP)", o)})
    ok = any(o.split(".")[0] == case.sass for o in ops)
    if case.sass == "HMMA":  # mma.sync must not be a warpgroup op, and vice versa
        ok = ok and not any(o.startswith(("HGMMA", "QGMMA")) for o in ops)
    out = {"ok": ok, "expected": case.sass, "opcodes": tc}
    if case.sass_exact:
        mmas = [o for o in ops if o.startswith(("HMMA", "HGMMA", "QGMMA"))]
        out["ok"] = ok and bool(mmas) and set(mmas) == {case.sass_exact} and len(mmas) % case.sass_count == 0
        out["expected"] = f"{case.sass_exact} x {case.sass_count} per K-slice"
        out["count"] = len(mmas)
    return out


def wmma_sass(arch: str = "90a", nvcc: str | None = None) -> dict[str, list[str]]:
    """The WMMA kernels alone compiled for ``sm_<arch>`` (no GPU needed): kernel name -> SASS opcodes. Shows
    what ``wmma::mma_sync`` becomes on each architecture (presets.WMMA_LOWERING)."""
    import tempfile  # noqa: PLC0415

    nvcc = nvcc or shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    tool = shutil.which("cuobjdump") or _triton_cuobjdump()
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "wmma.cu", Path(tmp) / "wmma.cubin"
        src.write_text(WMMA_SOURCE + WMMA_INSTANTIATIONS)
        cmd = [nvcc, "-cubin", "-O2", f"-gencode=arch=compute_{arch},code=sm_{arch}", "-o", str(out), str(src)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"nvcc failed ({' '.join(cmd)}):\n{res.stderr[-2000:]}")
        return parse_sass(_run_text([tool, "-sass", str(out)]))


def _triton_cuobjdump() -> str:
    try:
        import triton  # noqa: PLC0415

        return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    except ImportError:  # pragma: no cover
        return "cuobjdump"


def parse_sass(text: str) -> dict[str, list[str]]:
    kernels: dict[str, list[str]] = {}
    cur = None
    for line in text.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = m.group(1)
            kernels[cur] = []
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_x]+)*)", line)
        if m and cur is not None:
            kernels[cur].append(m.group(1))
    return kernels


def _cuda_ver(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def _run_text(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _tool_versions() -> dict:
    """Versions next to the runner's own reading: tcemu._hw (the project's one device module) where it imports,
    plus the nvcc that built the kernels."""
    info = {}
    try:
        from tcemu._hw import versions

        v = versions()
        info.update({"driver": v.get("driver"), "torch": v.get("torch"), "torch_cuda": v.get("cuda"),
                     "numpy": v.get("numpy"), "tcemu": v.get("tcemu"), "python": v.get("python")})
    except Exception:  # noqa: BLE001 - torch missing: fall back to nvidia-smi
        smi = _run_text(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
        if smi.strip():
            info["driver"] = smi.splitlines()[0].strip()
    nv = _run_text([shutil.which("nvcc") or "nvcc", "--version"])
    m = re.search(r"release ([\d.]+), V([\d.]+)", nv)
    if m:
        info["nvcc"] = m.group(2)
    try:
        import ml_dtypes

        info["ml_dtypes"] = ml_dtypes.__version__
    except ImportError:  # pragma: no cover
        pass
    return {k: v for k, v in info.items() if v is not None}
