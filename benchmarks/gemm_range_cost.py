"""What the range check and fix-up cost in the emulated GEMMs (docs/emulation.md, "The top of the range").

Every emulated GEMM kernel flags the rows of C whose levels or results are not finite, and a fix-up kernel,
launched after it every time, computes those rows again with exact power-of-two scaling; on ordinary data it
only reads the flags. This script times, on the goal shapes (M, K, N of y = x @ W^T: 8192^3; the PET-S edge
layers at 17,280 atoms, 604800 x (256, 1024), (256, 768), (512, 256), (768, 256), (256, 256), (512, 512); the node
layer 17280 x 1024 x 4096), in both directions (``fwd`` y = x W^T, ``bwd_input`` dx = dy W), for TF32x3, BF16x3
and BF16x6, through the public path (``tcemu.EmulatedLinear`` with a frozen weight, its pieces cached; the
input gradient by ``torch.autograd.grad``), these variants (``impl``):

* ``checked``: the library as it runs, on N(0, 1) data (nothing flagged);
* ``unchecked``: the same products with the check and the fix-up switched off
  (``tcemu.emulation.gemm.emu_mm._RANGE_FIXUP = False``, a diagnostic switch: kernels compiled without the
  check, no flags, no fix-up launch), so that ``checked / unchecked - 1`` is the cost, measured in one run;
* ``checked_4_rows`` (fwd only): N(0, 1) data with 4 rows of x holding a value of 1e38, so that their products
  overflow (truly or falsely) and the fix-up recomputes them: its cost when it runs.

Timing: CUDA events around each call, the variants interleaved round by round (order rotated), median and 20th/80th
percentiles over all calls; the first calls (compiles) are not timed. ``checked`` and ``unchecked`` are also
compared bit for bit on the ordinary data (``same_bits``: 1 where equal, as they must be).

Output: ``<out>/gemm_range_cost.csv``, long format: benchmark, impl, method, case, metric, value, unit, and the
provenance gpu, driver, torch, triton, git_commit, date. ``case`` is ``<direction>_<M>x<K>x<N>``; metrics
``median_ms``, ``p20_ms``, ``p80_ms``, ``tflops``, and per case ``cost`` (checked / unchecked - 1, unit ``%``) and
``same_bits``. ``<out>`` is ``--out``, else ``$OUT``, else ``benchmarks/results``. About 3 minutes on an H200
(``--quick``: two shapes, fewer repeats).

Usage: ``PYTHONPATH=src python benchmarks/gemm_range_cost.py [--out DIR] [--quick]``
"""

from __future__ import annotations

import argparse
import csv
import datetime
import importlib
import os
import statistics
import subprocess
import time

import torch

from tcemu.emulation.linear import EmulatedLinear

em = importlib.import_module("tcemu.emulation.gemm.emu_mm")  # the module (the package exports the function)

SHAPES = [(8192, 8192, 8192), (604800, 256, 1024), (604800, 256, 768), (604800, 512, 256), (604800, 768, 256),
          (604800, 256, 256), (604800, 512, 512), (17280, 1024, 4096)]
METHODS = ["tf32x3", "bf16x3", "bf16x6"]
COLUMNS = ["benchmark", "impl", "method", "case", "metric", "value", "unit", "gpu", "driver", "torch", "triton",
           "git_commit", "date"]
FLAGGED_ROWS = 4


def provenance() -> dict[str, str]:
    import triton  # noqa: PLC0415

    def run(cmd: list[str]) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    commit = run(["git", "rev-parse", "HEAD"]) or os.environ.get("TCEMU_GIT_COMMIT", "unknown")
    driver = (run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]).splitlines() or [""])[0]
    return dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                driver=driver, git_commit=commit,
                date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))


def timed(fn) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def set_check(on: bool) -> None:
    em._RANGE_FIXUP = on


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def measure_case(method: str, M: int, K: int, N: int, rounds: int, calls: int, gen: torch.Generator):
    """{(direction, impl): [ms, ...]} and {direction: same_bits} for one shape and method."""
    layer = EmulatedLinear.from_linear(torch.nn.Linear(K, N, bias=False, device="cuda"), method, backend="triton")
    layer.weight.requires_grad_(False)
    x = torch.randn(M, K, device="cuda", generator=gen)
    dy = torch.randn(M, N, device="cuda", generator=gen)
    x_hot = x.clone()
    x_hot[torch.randperm(M, device="cuda", generator=gen)[:FLAGGED_ROWS], 0] = 1e38
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
    parser.add_argument("--out", default=os.environ.get("OUT") or "benchmarks/results")
    parser.add_argument("--quick", action="store_true", help="two shapes, fewer repeats")
    args = parser.parse_args()
    import tcemu.emulation.gemm as gemm  # noqa: PLC0415

    gemm.SMALL_SHAPE_FALLBACK = False  # (every goal shape is above the threshold anyway)
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    shapes = SHAPES[:2] if args.quick else SHAPES
    rounds, calls = (3, 3) if args.quick else (4, 4)
    prov = provenance()
    print(prov, flush=True)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "gemm_range_cost.csv")
    gen = torch.Generator(device="cuda").manual_seed(0)
    t0 = time.time()
    with open(path, "w", newline="") as f:
        out = csv.DictWriter(f, COLUMNS)
        out.writeheader()

        def row(impl, method, case, metric, value, unit):
            out.writerow(dict(benchmark="gemm_range_cost", impl=impl, method=method, case=case, metric=metric,
                              value=f"{value:.6g}", unit=unit, **prov))

        for M, K, N in shapes:
            for method in METHODS:
                times, same = measure_case(method, M, K, N, rounds, calls, gen)
                flops = 2.0 * M * N * K
                for (direction, impl), ts in times.items():
                    case = f"{direction}_{M}x{K}x{N}"
                    med = statistics.median(ts)
                    row(impl, method, case, "median_ms", med, "ms")
                    row(impl, method, case, "p20_ms", percentile(ts, 0.2), "ms")
                    row(impl, method, case, "p80_ms", percentile(ts, 0.8), "ms")
                    row(impl, method, case, "tflops", flops / med / 1e9, "TFLOP/s")
                for direction in ("fwd", "bwd_input"):
                    case = f"{direction}_{M}x{K}x{N}"
                    on = statistics.median(times[(direction, "checked")])
                    off = statistics.median(times[(direction, "unchecked")])
                    row("checked", method, case, "cost", 100 * (on / off - 1), "%")
                    row("checked", method, case, "same_bits", same[direction], "1")
                    hot = times.get((direction, f"checked_{FLAGGED_ROWS}_rows"))
                    extra = f", {FLAGGED_ROWS} rows fixed {statistics.median(hot):.3f} ms" if hot else ""
                    print(f"{method} {case}: checked {on:.3f} ms, unchecked {off:.3f} ms ({100 * (on / off - 1):+.2f} %)"
                          f"{extra}, same bits {same[direction]:.0f}  [{time.time() - t0:.0f} s]", flush=True)
                f.flush()
                torch.cuda.empty_cache()
    print("wrote", path)


if __name__ == "__main__":
    main()
