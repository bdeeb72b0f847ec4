# /// script
# requires-python = ">=3.11"
# dependencies = ["numpy>=1.26", "ml_dtypes>=0.4", "torch>=2.4", "triton>=3.2"]
# ///
"""Speed of the emulated-GEMM twin (tcemu.numerics.emulated) on one CPU core, and what it means for the H200 run.

What is timed: the twin (``run_schedule`` on the pieces, as ``tcemu validate --emulation``'s workers run it) on
GEMMs of the validation plan (:func:`tcemu.numerics.hardware.gemm_families.plan`, default sizes: K up to 192, M and
N up to 1024): for each (method, kernel family) ``--gemms`` GEMMs of the plan, ``--rows`` rows of each. CPU time
of this process (``time.process_time``: the shared development machine is loaded by other work, which wall time
would count), reported as outputs per CPU second; then the plan's total CPU seconds for ``--outputs`` outputs
per (method, kernel) and the wall time on ``--workers`` processes.

Output: ``benchmarks/results/twin_speed.csv`` (one row per (method, kernel) and a total row).

Usage: ``python benchmarks/twin_speed.py [--outputs 1e7] [--workers 15] [--gemms 6] [--rows 24]``
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import csv  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
warnings.filterwarnings("ignore")

from tcemu.numerics.hardware.emulation_validate import _twin_bits  # noqa: E402
from tcemu.numerics.hardware.gemm_families import gemm_inputs, plan  # noqa: E402
from tcemu.numerics.schedule import KERNEL_FAMILIES  # noqa: E402

METHODS = ("tf32x3", "bf16x3", "bf16x6", "bf16x9")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--outputs", type=float, default=1e7, help="outputs per (method, kernel) of the extrapolation")
    ap.add_argument("--workers", type=int, default=15, help="twin processes of the extrapolation (H200 host: 15)")
    ap.add_argument("--gemms", type=int, default=6, help="GEMMs timed per (method, kernel)")
    ap.add_argument("--rows", type=int, default=24, help="rows of each GEMM timed")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "twin_speed.csv"))
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    jobs = plan(METHODS, KERNEL_FAMILIES, int(args.outputs))
    rows_out, total_cpu = [], 0.0
    for method in METHODS:
        for kernel in KERNEL_FAMILIES:
            js = [j for j in jobs if (j.method, j.kernel) == (method, kernel)]
            if not js:
                continue
            cpu = outputs = 0.0
            for j in js[6: 6 + args.gemms]:  # past the short-K replay GEMMs
                a, b = gemm_inputs(j.family, j.m, j.k, j.n, np.random.default_rng(j.seed))
                r = min(args.rows, j.m)
                _twin_bits(method, j.config, "h200", True, a[:2], b)  # warm-up: schedule, tables
                t0 = time.process_time()
                _twin_bits(method, j.config, "h200", True, a[:r], b)
                cpu += time.process_time() - t0
                outputs += r * j.n
            rate = outputs / cpu
            plan_outputs = sum(j.m * j.n for j in js)
            mean_k = sum(j.m * j.n * j.k for j in js) / plan_outputs
            total_cpu += plan_outputs / rate
            print(f"{method} {kernel:<6s} {rate:10.3g} outputs per CPU second (mean K of the plan {mean_k:.0f}); "
                  f"plan {plan_outputs:.3g} outputs = {plan_outputs / rate:7.1f} CPU s")
            rows_out.append(dict(method=method, kernel=kernel, outputs_per_cpu_second=f"{rate:.4g}",
                                 plan_outputs=plan_outputs, plan_mean_k=f"{mean_k:.1f}",
                                 plan_cpu_seconds=f"{plan_outputs / rate:.1f}"))
    wall = total_cpu / args.workers
    print(f"total: {total_cpu:.0f} CPU s, {wall:.0f} s on {args.workers} processes of this machine's cores")
    rows_out.append(dict(method="all", kernel="all", outputs_per_cpu_second="",
                         plan_outputs=sum(j.m * j.n for j in jobs), plan_mean_k="",
                         plan_cpu_seconds=f"{total_cpu:.1f}"))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows_out[0]))
        w.writeheader()
        w.writerows(rows_out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
