"""Triton kernels of ``benchmarks/gemm.py`` and their parallel compilation.

* ``builtin_mm``: one plain Triton matmul kernel with ``tl.dot(input_precision=...)``, the ``triton-builtin``
  implementation the tcemu kernels are compared with;
* ``precompile``: every distinct specialisation of a run's kernels (tcemu's and the built-in one) compiled once
  in parallel processes, so that Triton's on-disk cache holds the binaries before the timed process loads them;
  it returns each launch's compile time, registers, spills and PTX instruction counts.
"""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor

import torch
import triton
import triton.language as tl


@triton.jit
def _builtin_mm_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    PREC: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    width = GROUP_M * num_n
    first_m = (pid // width) * GROUP_M
    gsize = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % gsize
    pid_n = (pid % width) // gsize
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + (rm % M).to(tl.int64)[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + (rn % N).to(tl.int64)[None, :] * stride_bn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kt in range(0, tl.cdiv(K, BK)):
        k_left = K - kt * BK
        a = tl.load(a_ptrs, mask=rk[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PREC)
        a_ptrs += BK * stride_ak
        b_ptrs += BK * stride_bk
    c_ptrs = c_ptr + rm.to(tl.int64)[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


BUILTIN_CFG = dict(BM=128, BN=128, BK=32, GROUP_M=8, num_warps=8, num_stages=3)


def builtin_mm(a: torch.Tensor, b: torch.Tensor, prec: str) -> torch.Tensor:
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    grid = (triton.cdiv(M, 128) * triton.cdiv(N, 128),)
    _builtin_mm_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                             c.stride(0), c.stride(1), PREC=prec, **BUILTIN_CFG)
    return c


# ------------------------------------------------------------------------------------------------------
# parallel compilation (fills Triton's on-disk cache; the timed process then loads the binaries)
# ------------------------------------------------------------------------------------------------------
def _compile_job(job: tuple) -> tuple:
    kind = job[0]
    t0 = time.perf_counter()
    try:
        if kind == "tcemu":
            from tcemu.emulation.gemm.launch import KernelConfig, emu_mm_compile

            _, method, M, N, K, cfg_text, has_bias = job
            k = emu_mm_compile(method, M, N, K, has_bias=has_bias, config=KernelConfig.parse(cfg_text))
        else:  # builtin: (kind, prec, M, N, K, sa, sb)
            _, prec, M, N, K, sa, sb = job
            f32 = torch.float32
            k = _builtin_mm_kernel.warmup(f32, f32, f32, M, N, K, sa[0], sa[1], sb[0], sb[1], N, 1,
                                          grid=(1,), PREC=prec, **BUILTIN_CFG)
        secs = time.perf_counter() - t0
        ptx = k.asm.get("ptx", "")
        try:
            k._init_handles()  # loads the binary; sets n_regs / n_spills
            regs, spills = k.n_regs, k.n_spills
        except Exception:  # noqa: BLE001
            regs = spills = -1
        counts = "/".join(str(ptx.count(op)) for op in ("wgmma.mma_async", "wgmma.wait_group", "mma.sync",
                                                        "st.local", "bar.sync"))
        return job, secs, regs, spills, counts, None
    except Exception as exc:  # noqa: BLE001 - reported, not fatal
        return job, time.perf_counter() - t0, -1, -1, "", f"{type(exc).__name__}: {exc}"[:300]


def _signature(job: tuple) -> tuple:
    """What Triton specializes a launch on: constexprs, and for ints divisibility by 16 and == 1."""
    def sig(v):
        if isinstance(v, bool) or not isinstance(v, int):
            return v
        return ("int", v % 16 == 0, v == 1)
    flat = []
    for v in job:
        flat.extend(v if isinstance(v, tuple) else (v,))
    if job[0] == "tcemu":  # EVEN_K depends on K modulo the K-tile
        from tcemu.emulation.gemm.launch import KernelConfig

        flat.append(job[4] % KernelConfig.parse(job[5]).bk == 0)
    return tuple(sig(v) for v in flat)


def precompile(jobs: list[tuple], workers: int) -> dict:
    """Compile each distinct specialization once, in parallel; returns compile info for every job."""
    jobs = list(dict.fromkeys(jobs))
    first: dict[tuple, tuple] = {}
    for j in jobs:
        first.setdefault(_signature(j), j)
    reps = list(first.values())
    if not jobs:
        return {}
    t0 = time.perf_counter()
    ctx = multiprocessing.get_context("spawn")
    by_sig = {}
    with ProcessPoolExecutor(max_workers=min(workers, len(reps)), mp_context=ctx) as pool:
        for job, secs, regs, spills, n_wgmma, err in pool.map(_compile_job, reps):
            by_sig[_signature(job)] = dict(compile_s=secs, regs=regs, spills=spills, wgmma=n_wgmma, error=err)
            if err:
                print(f"  compile FAILED {job}: {err}", flush=True)
    print(f"precompiled {len(reps)} kernels ({len(jobs)} launches) with {workers} processes in "
          f"{time.perf_counter() - t0:.1f} s (sum of compile times "
          f"{sum(v['compile_s'] for v in by_sig.values()):.1f} s)", flush=True)
    return {j: by_sig[_signature(j)] for j in jobs}
