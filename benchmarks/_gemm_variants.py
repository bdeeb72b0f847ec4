"""The timing and bookkeeping that ``benchmarks/gemm_register_a.py`` and ``benchmarks/gemm_tma_store.py`` share:
kernel variants timed against cuBLAS side by side, interleaved round by round, and compared bit for bit."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch

from gemm_range_cost import percentile, timed  # noqa: E402 - the timing of the range-check benchmark


def same_bits(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Equal bits everywhere except NaN payloads (NaN in the same places)."""
    nan = torch.isnan(x)
    return bool(torch.equal(nan, torch.isnan(y)) and torch.equal(x[~nan].view(torch.int32), y[~nan].view(torch.int32)))


def cublas_tf32(a: torch.Tensor, b: torch.Tensor) -> Callable[[], torch.Tensor]:
    """cuBLAS a @ b with TF32 on (one pass: the bound of any emulation), FP32 IEEE mode restored after."""
    def run() -> torch.Tensor:
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        try:
            return torch.mm(a, b)
        finally:
            torch.backends.cuda.matmul.fp32_precision = "ieee"
    return run


def interleaved_times(impls: dict[str, Callable], rounds: int, calls: int) -> dict[str, list[float]]:
    """Each implementation called twice (compile, warm-up), then ``rounds`` rounds of ``calls`` timed calls each,
    the order rotated from round to round: {name: [ms, ...]}."""
    for fn in impls.values():
        fn()
        fn()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {k: [] for k in impls}
    keys = list(impls)
    for r in range(rounds):
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            times[k] += [timed(impls[k]) for _ in range(calls)]
    return times


def time_values(ts: list[float], sgemm_ms: float, flops: float) -> dict[str, float]:
    """Median, 20th and 80th percentiles (ms), TFLOP/s and the multiple of SGEMM's median of one implementation."""
    med = statistics.median(ts)
    return dict(median_ms=med, p20_ms=percentile(ts, 0.2), p80_ms=percentile(ts, 0.8), tflops=flops / med / 1e9,
                x_sgemm=sgemm_ms / med)
