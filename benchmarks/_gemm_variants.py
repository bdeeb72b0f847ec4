"""The timing and bookkeeping that ``benchmarks/gemm_register_a.py``, ``benchmarks/gemm_tma_store.py`` and
``benchmarks/gemm_fused_split.py`` share: kernel variants timed against cuBLAS side by side, interleaved round by
round, compared bit for bit, written as result rows; their common options and the saving of their figures."""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable

import torch

from tcemu._results import measurement

from gemm_range_cost import percentile, timed  # noqa: E402 - the timing of the range-check benchmark

#: the cuBLAS implementations timed beside every variant (their rows' method is "fp32")
CUBLAS = ("sgemm", "cublas_tf32")


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


def timing_rows(benchmark: str, method: str, this_case: str, times: dict[str, list[float]], flops: float,
                units: dict[str, str], extra: dict[str, dict] | None = None,
                impl_name: Callable[[str], str] = str) -> tuple[list[dict], list[tuple[str, dict]]]:
    """Result rows of one product's timings (:func:`time_values` against the ``sgemm`` median, plus ``extra[name]``
    values), each under ``impl_name(name)``; and (name, values) per implementation, for the script's log line."""
    sgemm_ms = statistics.median(times["sgemm"])
    rows, logged = [], []
    for name, ts in times.items():
        values = time_values(ts, sgemm_ms, flops) | (extra or {}).get(name, {})
        rows += measurement(benchmark, impl_name(name), "fp32" if name in CUBLAS else method, this_case, values,
                            units)
        logged.append((name, values))
    return rows, logged


def variant_parser(doc: str, budget_s: float, shapes: bool = True) -> argparse.ArgumentParser:
    """The options every variant script takes: ``--out``, ``--methods``, ``--shapes`` (with ``shapes``),
    ``--rounds``, ``--calls``, ``--budget-s`` and ``--plot-only``."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or "benchmarks/results/h200/gemm_variants")
    parser.add_argument("--methods", default="tf32x3,bf16x6,bf16x3")
    if shapes:
        parser.add_argument("--shapes", default="", help="MxKxN,... (default: the module's SHAPES)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument("--budget-s", type=float, default=budget_s)
    parser.add_argument("--plot-only", default="", help="draw the figure from this CSV and exit")
    return parser


def parse_shapes(text: str, default: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """``"MxKxN,..."`` -> [(M, K, N), ...]; empty: ``default``."""
    return [tuple(map(int, s.split("x"))) for s in text.split(",")] if text else default


def save_figure(fig, csv_path: str) -> str:
    """The figure beside its CSV, as ``<name>.png``; returns the path."""
    out = csv_path.removesuffix(".csv") + ".png"
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return out
