"""What the range check and fix-up cost in the emulated GEMMs (docs/emulation.md, "The top of the range").

Every emulated GEMM kernel flags the rows of C whose levels or results are not finite, and a fix-up kernel,
launched after it every time, computes those rows again with exact power-of-two scaling; on ordinary data it
only reads the flags. This script times, on the goal shapes (M, K, N of y = x @ W^T: 8192^3; the PET-S
edge layers at 17,280 atoms, 604800 x (256, 1024), (256, 768), (512, 256), (768, 256), (256, 256), (512, 512);
the node layer 17280 x 1024 x 4096), in both directions (``fwd`` y = x W^T, ``bwd_input`` dx = dy W), for
TF32x3, BF16x3 and BF16x6, through the public path (``tcemu.EmulatedLinear`` with a frozen weight, its pieces cached; the
input gradient by ``torch.autograd.grad``), these variants (``impl``):

* ``checked``: the library as it runs, on N(0, 1) data (nothing flagged);
* ``unchecked``: the same products with the check and the fix-up switched off
  (``tcemu.config(range_fixup=False)``, a diagnostic setting: kernels compiled without the
  check, no flags, no fix-up launch), so that ``checked / unchecked - 1`` is the cost, measured in one run;
* ``checked_4_rows`` (fwd only): N(0, 1) data with 4 rows of x holding an Inf, so that every element of those
  rows is marked and the fix-up recomputes them: its cost when it runs.

Timing: CUDA events around each call, the variants interleaved round by round (order rotated), median and
20th/80th percentiles over all calls; the first calls (compiles) are not timed. ``checked`` and ``unchecked`` are also
compared bit for bit on the ordinary data (``same_bits``: True where equal, as they must be).

Output: ``<out>/range_cost.csv``, a result file of ``tcemu._results`` (long rows with the provenance: GPU,
driver, torch, Triton, commit, date): impl ``checked``, ``unchecked`` or ``checked_4_rows``, method, case
``direction=...;M=...;K=...;N=...``, metrics ``median_ms``, ``p20_ms``, ``p80_ms``, ``tflops``, and for
``checked`` ``cost`` (checked / unchecked - 1, unit ``%``) and ``same_bits``. ``<out>`` is ``--out``, else
``$OUT``, else ``benchmarks/results/h200/gemm``. About 3 minutes on an H200; ``--budget-s`` (default 220)
skips the cases that would start later (``--quick``: two shapes, fewer repeats).

Usage: ``PYTHONPATH=src python benchmarks/gemm_range_cost.py [--out DIR] [--quick] [--budget-s S]``
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time

import torch

import tcemu
from tcemu._results import Provenance, case, measurement, write_results
from tcemu.emulation.linear import EmulatedLinear

SHAPES = [(8192, 8192, 8192), (604800, 256, 1024), (604800, 256, 768), (604800, 512, 256), (604800, 768, 256),
          (604800, 256, 256), (604800, 512, 512), (17280, 1024, 4096)]
METHODS = ["tf32x3", "bf16x3", "bf16x6"]
UNITS = {"median_ms": "ms", "p20_ms": "ms", "p80_ms": "ms", "tflops": "TFLOP/s", "cost": "%",
         "same_bits": "bool"}
FLAGGED_ROWS = 4


def timed(fn) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


#: this run's settings (entered for the rest of the process), and on top of them the range check's switch
_SETTINGS = contextlib.ExitStack()
_CHECK = contextlib.ExitStack()


def set_check(on: bool) -> None:
    """Run what follows with the range check and fix-up on or off (``tcemu.config(range_fixup=...)``)."""
    _CHECK.close()
    _CHECK.enter_context(tcemu.config(range_fixup=on))


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def measure_case(method: str, M: int, K: int, N: int, rounds: int, calls: int, gen: torch.Generator):
    """{(direction, impl): [ms, ...]} and {direction: same_bits} for one shape and method."""
    linear = torch.nn.Linear(K, N, bias=False, device="cuda")
    layer = EmulatedLinear.from_linear(linear, method, backend="triton")
    layer.weight.requires_grad_(False)
    x = torch.randn(M, K, device="cuda", generator=gen)
    dy = torch.randn(M, N, device="cuda", generator=gen)
    x_hot = x.clone()
    x_hot[torch.randperm(M, device="cuda", generator=gen)[:FLAGGED_ROWS], 0] = float("inf")
    xg = x.clone().requires_grad_(True)

    def fwd(inp):
        return lambda: layer(inp)

    y = layer(xg)

    def bwd():
        return torch.autograd.grad(y, xg, dy, retain_graph=True)

    variants = {("fwd", "checked"): (True, fwd(x)), ("fwd", "unchecked"): (False, fwd(x)),
                ("fwd", f"checked_{FLAGGED_ROWS}_rows"): (True, fwd(x_hot)),
                ("bwd_input", "checked"): (True, bwd), ("bwd_input", "unchecked"): (False, bwd)}
    same = {}
    for direction, fn in (("fwd", fwd(x)), ("bwd_input", lambda: bwd()[0])):
        set_check(True)
        checked = fn()
        set_check(False)
        same[direction] = float(torch.equal(checked.view(torch.int32), fn().view(torch.int32)))
        del checked
    for on, fn in variants.values():  # compile and warm up outside the timing
        set_check(on)
        fn()
        fn()
    torch.cuda.synchronize()
    times: dict[tuple[str, str], list[float]] = {k: [] for k in variants}
    keys = list(variants)
    for r in range(rounds):
        for key in keys[r % len(keys):] + keys[:r % len(keys)]:
            on, fn = variants[key]
            set_check(on)
            times[key] += [timed(fn) for _ in range(calls)]
    set_check(True)
    return times, same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or "benchmarks/results/h200/gemm")
    parser.add_argument("--quick", action="store_true", help="two shapes, fewer repeats")
    parser.add_argument("--budget-s", type=float, default=220.0, help="start no case after this many seconds")
    args = parser.parse_args()
    _SETTINGS.enter_context(tcemu.config(small_shape_fallback=False))  # (every goal shape is above it anyway)
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    shapes = SHAPES[:2] if args.quick else SHAPES
    rounds, calls = (3, 3) if args.quick else (4, 4)
    prov = Provenance.current()
    print(prov, flush=True)
    path = os.path.join(args.out, "range_cost.csv")
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    t0 = time.time()
    for M, K, N in shapes:
        for method in METHODS:
            if time.time() - t0 > args.budget_s:
                print(f"time budget of {args.budget_s:.0f} s spent: {method} {M}x{K}x{N} not measured",
                      flush=True)
                continue
            times, same = measure_case(method, M, K, N, rounds, calls, gen)
            flops = 2.0 * M * N * K
            for (direction, impl), ts in times.items():
                med = statistics.median(ts)
                values = dict(median_ms=med, p20_ms=percentile(ts, 0.2), p80_ms=percentile(ts, 0.8),
                              tflops=flops / med / 1e9)
                if impl == "checked":
                    off = statistics.median(times[(direction, "unchecked")])
                    values.update(cost=100 * (med / off - 1), same_bits=bool(same[direction]))
                rows += measurement("gemm_range_cost", impl, method, case(direction=direction, M=M, K=K, N=N),
                                    values, UNITS)
            for direction in ("fwd", "bwd_input"):
                on = statistics.median(times[(direction, "checked")])
                off = statistics.median(times[(direction, "unchecked")])
                hot = times.get((direction, f"checked_{FLAGGED_ROWS}_rows"))
                extra = f", {FLAGGED_ROWS} rows fixed {statistics.median(hot):.3f} ms" if hot else ""
                print(f"{method} {direction} {M}x{K}x{N}: checked {on:.3f} ms, unchecked {off:.3f} ms "
                      f"({100 * (on / off - 1):+.2f} %){extra}, same bits {same[direction]:.0f}  "
                      f"[{time.time() - t0:.0f} s]", flush=True)
            write_results(path, rows, prov)  # after every case: a run cut short keeps what it measured
            torch.cuda.empty_cache()
    print("wrote", path)


if __name__ == "__main__":
    main()
