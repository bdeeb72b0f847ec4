# /// script
# requires-python = ">=3.11"
# dependencies = ["tcemu"]
# ///
"""Speed of the bit-accurate Tensor Core model (tcemu.numerics) on one CPU core: dot products per second.

What is timed: ``block_fma_bits(a_bits (S, K), b_bits (S, K), c_bits (S,), preset)`` on S = 2^20 random
N(0, 1) dot products (the distribution of the public hardware data), for the configurations below, each
repeated ``--repeats`` times; reported as dot products per second (median, 20th and 80th percentiles).
The exact rational oracle (tcemu.numerics.oracle) is timed on 2,000 rows for comparison. Each rate is also given
as K=16-equivalent dot products per second (rate x K / 16: the issue's unit for longer instructions).
Threads are pinned to one (OMP/OpenBLAS/MKL env vars); NumPy's elementwise kernels are single-threaded.

Reference points (the public models' own figures, not measured here; docs/numerics.md, "Speed"): MMA-Sim
about 1.4e4 outputs/s, a NumPy port of it about 1.2e6 outputs/s. The issue's target: at least 2e6 dot
products of length 16 per second.

Output: a result file (``tcemu._results``), benchmark ``numerics_speed``, impl the function timed, one case
per (recipe: the preset, K), metrics ``dot_products_per_s`` (median) and its ``_p20`` / ``_p80``; the provenance's
``gpu`` names the CPU. Stored runs: ``benchmarks/results/cpu/numerics/``.

``--twin``: the emulated-GEMM twin (tcemu.numerics.emulated) instead, as ``tcemu validate --emulation``'s workers
run it, on the GEMMs of that validation's plan (``tcemu.numerics.hardware.gemm_families.plan``: K up to 192, M
and N up to 1024): per (method, kernel family) ``--gemms`` GEMMs, ``--twin-rows`` rows of each, timed in CPU time
of the process (``time.process_time``: on a machine loaded by other work wall time would count the others).
Metrics per (method, kernel): ``outputs_per_cpu_s``, the plan's ``plan_outputs``, its output-weighted mean K
``plan_mean_k`` and ``plan_cpu_s`` (plan outputs / rate); and for the whole plan ``plan_cpu_s``, the CPU seconds of
the H200 run's twin for ``--outputs`` outputs per (method, kernel). Stored run:
``benchmarks/results/cpu/numerics/twin_speed_ci_machine.csv``.

``--schemes``: the FMA-chain (FP64 DMMA, AMD fp32/fp64), AMD MFMA and Turing presets, in CPU time, with the h100
fp16 block-FMA row as the same run's baseline; metrics ``dot_products_per_cpu_s`` and ``k16_equivalent_per_cpu_s``.
Stored run: ``benchmarks/results/cpu/numerics/model_speed_schemes_ci_machine.csv``.

Usage: ``python benchmarks/numerics_speed.py [--rows 1048576] [--repeats 5] [--quick] [--only TEXT] [--cpu-time]
[--out out/numerics_speed.csv]``; ``python benchmarks/numerics_speed.py --twin [--outputs 4e6] [--gemms 6]
[--twin-rows 24] --out out/twin_speed.csv``
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from tcemu._results import Provenance, case, measurement, write_results  # noqa: E402
from tcemu.numerics import block_fma_bits, get_preset  # noqa: E402
from tcemu.numerics.inputs import make_operands  # noqa: E402
from tcemu.numerics.inputs_mx import make_scales  # noqa: E402
from tcemu.numerics.oracle import oracle_bits  # noqa: E402

CONFIGS = [  # (arch, instruction, input, output, K)
    ("h100", "mma.sync", "fp16", "fp32", 16),
    ("h100", "mma.sync", "bf16", "fp32", 16),
    ("a100", "mma.sync", "fp16", "fp32", 16),
    ("a100", "mma.sync", "fp16", "fp16", 16),
    ("v100", "mma.sync", "fp16", "fp32", 16),
    ("h100", "mma.sync", "tf32", "fp32", 16),
    ("h100", "wgmma", "e4m3", "fp32", 32),
    ("h100", "mma.sync", "e4m3", "fp32", 32),
    ("h100", "mma.sync", "fp16", "fp32", 256),
    # low-precision kinds (tcemu.numerics.presets_blackwell); block-scaled ones get N(0,1)-like scales
    ("b200", "tcgen05", "e4m3.e5m2", "fp32", 32),
    ("b200", "tcgen05", "e2m1", "fp32", 32),
    ("b200", "tcgen05", "e2m3.e3m2", "fp32", 32),
    ("b200", "tcgen05.mxf8f6f4", "e4m3:ue8m0x32", "fp32", 32),
    ("b200", "tcgen05.mxf8f6f4", "e2m1.e4m3:ue8m0x32", "fp32", 32),
    ("b200", "tcgen05.mxf4nvf4", "e2m1:ue4m3x16", "fp32", 64),
    ("b200", "tcgen05.mxf4nvf4", "e2m1:ue8m0x32", "fp32", 64),
    ("sm120", "mma.sync.mxf4nvf4", "e2m1:ue4m3x16", "fp32", 64),
    ("ada", "mma.sync", "e4m3.e5m2", "fp32", 32),
    ("h100", "wgmma", "e4m3.e5m2", "fp32", 32),
]


UNITS = {"dot_products_per_s": "1/s", "dot_products_per_s_p20": "1/s", "dot_products_per_s_p80": "1/s"}


def _rates(impl: str, recipe: str, k: int, rate: np.ndarray) -> list:
    """Result rows of one timed configuration: median, 20th and 80th percentile of the dot-product rate."""
    p20, p50, p80 = np.percentile(rate, [20, 50, 80])
    return measurement("numerics_speed", impl, "", case(recipe=recipe, K=k),
                       {"dot_products_per_s": float(p50), "dot_products_per_s_p20": float(p20),
                        "dot_products_per_s_p80": float(p80)}, UNITS)


def _time(fn, repeats: int, clock=time.perf_counter) -> np.ndarray:
    fn()  # warm-up: tables, allocations
    times = []
    for _ in range(repeats):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return np.array(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1 << 20, help="dot products per timed call (default 2^20)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2^17 rows, 3 repeats, no oracle")
    ap.add_argument("--out", default="out/numerics_speed.csv", help="result file")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time block_fma_bits in CPU seconds of the process (time.process_time), for a machine "
                         "loaded by other work (the oracle stays in wall time)")
    ap.add_argument("--only", default=None, help="time only the configurations whose name contains this text")
    ap.add_argument("--twin", action="store_true", help="time the emulated-GEMM twin on the validation plan")
    ap.add_argument("--outputs", type=float, default=4e6, help="--twin: outputs per (method, kernel) of the plan")
    ap.add_argument("--gemms", type=int, default=6, help="--twin: GEMMs timed per (method, kernel)")
    ap.add_argument("--twin-rows", type=int, default=24, help="--twin: rows of each GEMM timed")
    ap.add_argument("--schemes", action="store_true",
                    help="time the FMA-chain, AMD MFMA and Turing presets (CPU time; beside the h100 baseline)")
    args = ap.parse_args(argv)
    if args.twin:
        return _twin(args)
    if args.schemes:
        return _schemes(args)
    rows, repeats = (1 << 17, 3) if args.quick else (args.rows, args.repeats)
    clock = time.process_time if args.cpu_time else time.perf_counter
    configs = [c for c in CONFIGS if args.only is None or args.only in " ".join(map(str, c[:4]))]
    rng = np.random.default_rng(0)
    prov = Provenance.current(device="cpu")
    prov = dataclasses.replace(prov, gpu=f"{prov.gpu} (1 core)")  # the threads are pinned to one
    out_rows = []
    for arch, instr, fin, fout, k in configs:
        p = get_preset(arch, instr, fin, fout)
        a, b, c = make_operands(p, rows, k, "normal", rng)
        scales = make_scales(p, rows, k, "normal", rng) if p.scale_format else (None, None)
        t = _time(lambda: block_fma_bits(a, b, c, p, *scales), repeats, clock)
        rate = rows / t
        p20, p50, p80 = np.percentile(rate, [20, 50, 80])
        recipe = f"{arch} {instr} {fin}->{fout}"
        print(f"{recipe:48s} K={k:<4d} {p50:10.3g} dot products/s  (p20 {p20:.3g}, p80 {p80:.3g}; "
              f"K=16-equivalent {p50 * k / 16:.3g})")
        out_rows += _rates("tcemu.numerics.block_fma_bits", recipe, k, rate)
    if not args.quick and args.only is None:
        p = get_preset("h100", "mma.sync", "fp16", "fp32")
        a, b, c = make_operands(p, 2000, 16, "normal", rng)
        t = _time(lambda: oracle_bits(a, b, c, p), 2)
        rate = 2000 / t
        print(f"{'oracle h100 mma.sync fp16->fp32':32s} K=16   {np.median(rate):10.3g} dot products/s")
        out_rows += _rates("tcemu.numerics.oracle.oracle_bits", "h100 mma.sync fp16->fp32", 16, rate)
    print(f"wrote {write_results(args.out, out_rows, prov)}")
    return 0


def _twin(args) -> int:
    """--twin (module docstring): the twin's outputs per CPU second on the validation plan."""
    import warnings

    import torch

    from tcemu.numerics.hardware.emulation_validate import METHODS, _twin_bits
    from tcemu.numerics.hardware.gemm_families import gemm_inputs, plan
    from tcemu.numerics.schedule import KERNEL_FAMILIES

    warnings.filterwarnings("ignore", message="TRITON_DEFAULT_FP_FUSION")
    torch.set_num_threads(1)
    units = {"outputs_per_cpu_s": "1/s", "plan_outputs": "count", "plan_mean_k": "count", "plan_cpu_s": "s"}
    jobs = plan(METHODS, KERNEL_FAMILIES, int(args.outputs))
    out_rows, total = [], 0.0
    for method in METHODS:
        for kernel in KERNEL_FAMILIES:
            js = [j for j in jobs if (j.method, j.kernel) == (method, kernel)]
            if not js:
                continue
            cpu = outputs = 0.0
            for j in js[6: 6 + args.gemms]:  # past the first round (short-K replay GEMMs)
                a, b = gemm_inputs(j.family, j.m, j.k, j.n, np.random.default_rng(j.seed))
                r = min(args.twin_rows, j.m)
                _twin_bits(method, j.config, "h200", True, a[:2], b)  # warm-up: the schedule, the tables
                t0 = time.process_time()
                _twin_bits(method, j.config, "h200", True, a[:r], b)
                cpu += time.process_time() - t0
                outputs += r * j.n
            rate = outputs / cpu
            n_out = sum(j.m * j.n for j in js)
            mean_k = sum(j.m * j.n * j.k for j in js) / n_out
            total += n_out / rate
            print(f"{method} {kernel:<6s} {rate:10.3g} outputs per CPU second (plan: mean K {mean_k:.0f}, "
                  f"{n_out:.3g} outputs, {n_out / rate:6.1f} CPU s)")
            out_rows += measurement("numerics_speed", "tcemu.numerics.emulated", method, case(kernel=kernel),
                                    {"outputs_per_cpu_s": rate, "plan_outputs": n_out, "plan_mean_k": mean_k,
                                     "plan_cpu_s": n_out / rate}, units)
    print(f"plan: {total:.0f} CPU s")
    out_rows += measurement("numerics_speed", "tcemu.numerics.emulated", "", case(kernel="all"),
                            {"plan_outputs": sum(j.m * j.n for j in jobs), "plan_cpu_s": total}, units)
    prov = Provenance.current(device="cpu")
    prov = dataclasses.replace(prov, gpu=f"{prov.gpu} (1 core)")
    print(f"wrote {write_results(args.out, out_rows, prov)}")
    return 0


SCHEME_CONFIGS = [  # (arch, instruction, input, output, K); the h100 block-FMA row is the baseline of the same run
    ("h100", "mma.sync", "fp16", "fp32", 16),
    ("turing", "mma", "fp16", "fp32", 16),
    ("h100", "mma.m16n8k16", "fp64", "fp64", 16),
    ("a100", "mma", "fp64", "fp64", 16),
    ("mi100", "mfma", "fp32", "fp32", 16),
    ("mi250", "mfma", "fp64", "fp64", 16),
    ("mi100", "mfma", "fp16", "fp32", 16),
    ("mi250", "mfma", "fp16", "fp32", 16),
    ("mi250", "v_mfma_f32_32x32x4bf16", "bf16", "fp32", 16),
    ("mi300", "mfma", "xf32", "fp32", 16),
    ("mi300", "mfma", "fp16", "fp32", 16),
    ("mi300", "mfma", "bf16", "fp32", 16),
    ("mi300", "mfma", "fp8", "fp32", 32),
    ("mi300", "mfma", "fp8.bf8", "fp32", 32),
]


def _schemes(args) -> int:
    """--schemes: dot products per CPU second (``time.process_time``: on a loaded machine wall time would count
    the other jobs) of the presets in :data:`SCHEME_CONFIGS`, and the K = 16-equivalent rate (rate x K / 16)."""
    from tcemu.numerics.inputs_schemes import scheme_operands

    rows, repeats = (1 << 16, 3) if args.quick else (min(args.rows, 1 << 18), args.repeats)
    rng = np.random.default_rng(0)
    units = {"dot_products_per_cpu_s": "1/s", "k16_equivalent_per_cpu_s": "1/s"}
    out_rows = []
    for arch, instr, fin, fout, k in SCHEME_CONFIGS:
        p = get_preset(arch, instr, fin, fout)
        a, b, c = (scheme_operands if p.scheme is not None else make_operands)(p, rows, k, "normal", rng)
        block_fma_bits(a[:256], b[:256], c[:256], p)  # warm-up: tables
        times = []
        for _ in range(repeats):
            t0 = time.process_time()
            block_fma_bits(a, b, c, p)
            times.append(time.process_time() - t0)
        rate = rows / float(np.median(times))
        recipe = f"{p.label}"
        print(f"{recipe:40s} K={k:<3d} {rate:10.3g} dot products per CPU s, K=16-equivalent {rate * k / 16:10.3g}")
        out_rows += measurement("numerics_speed", "tcemu.numerics.block_fma_bits", "", case(recipe=recipe, K=k),
                                {"dot_products_per_cpu_s": rate, "k16_equivalent_per_cpu_s": rate * k / 16}, units)
    prov = Provenance.current(device="cpu")
    prov = dataclasses.replace(prov, gpu=f"{prov.gpu} (1 core)")
    print(f"wrote {write_results(args.out, out_rows, prov)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
