# /// script
# requires-python = ">=3.11"
# dependencies = ["tcemu"]
# ///
"""Speed of the bit-accurate Tensor Core model (tcemu.numerics), one CPU core: every preset, K=16-equivalent.

What is timed: ``block_fma_bits(a_bits (S, K), b_bits (S, K), c_bits (S,), preset[, scales])`` for every
preset of the coverage registry (``tcemu.numerics.list_presets``; h200 is h100's preset) under
``variant="measured"``, and under ``"mmasim"`` and ``"toolbox"`` where that variant's preset differs (a
variant a preset refuses is left out). Operands are N(0, 1) rounded to the input formats (``make_operands`` /
``scheme_operands``, kind ``normal``), block scales ``make_scales(..., "normal")``. K is the instruction's K,
or 16 where that is shorter (instructions chained); the rate is also given as K=16-equivalent dot products per
second, rate x K / 16, the unit of the target: at least 2e6 per core (:attr:`SpeedConfig.target`).

Timing: CPU time of the process (``time.process_time``: other work on a shared machine does not count), one
thread (OMP/OpenBLAS/MKL set to 1; NumPy's elementwise kernels are single-threaded). Per preset: a warm-up
(tables), one pilot call on one chunk of rows that sizes S so that a call takes about ``SpeedConfig.call_s``,
then ``SpeedConfig.repeats`` calls; the median is reported, with the slowest call's rate.

Output: a result file (``tcemu._results``), benchmark ``numerics_speed``, impl
``tcemu.numerics.block_fma_bits``, method the preset's family (how it accumulates), one case per (arch,
instruction, input, output, variant, K); metrics ``dot_products_per_cpu_s``, ``k16_equivalent_per_cpu_s``
(median), ``k16_equivalent_slowest`` and ``rows``; one provenance case (``run=provenance``: NumPy and Python
versions, load average before and after); the ``gpu`` column names the CPU. Beside it, a Markdown summary
(``--md``; per family the presets, the slowest and the median, and every preset under the target). Stored run:
``benchmarks/results/cpu/numerics/model_speed_all_presets_ci_machine.csv`` and ``.md``.

``--twin``: the emulated-GEMM twin (tcemu.numerics.emulated) instead, as ``tcemu validate --emulation``'s
workers run it, on the GEMMs of that validation's plan (``tcemu.numerics.hardware.gemm_families.plan``: K up
to 192, M and N up to 1024): per (method, kernel family) ``--gemms`` GEMMs, ``--twin-rows`` rows of each,
timed in CPU time of the process. Metrics per (method, kernel): ``outputs_per_cpu_s``, the plan's
``plan_outputs``, its output-weighted mean K ``plan_mean_k`` and ``plan_cpu_s`` (plan outputs / rate); and for
the whole plan ``plan_cpu_s``. Stored run: ``benchmarks/results/cpu/numerics/twin_speed_ci_machine.csv``.

Usage: ``python benchmarks/numerics_speed.py [--only TEXT] [--quick] [--out out/numerics_speed.csv] [--md
out/numerics_speed.md]``; ``python benchmarks/numerics_speed.py --twin [--outputs 4e6] [--gemms 6]
[--twin-rows 24] --out out/twin_speed.csv``
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from tcemu._results import Provenance, case, measurement, read_wide, write_results  # noqa: E402
from tcemu.numerics import block_fma_bits, get_preset, list_presets  # noqa: E402
from tcemu.numerics.inputs import make_operands  # noqa: E402
from tcemu.numerics.inputs_mx import make_scales  # noqa: E402
from tcemu.numerics.inputs_schemes import scheme_operands  # noqa: E402
from tcemu.numerics.params import MMAParams  # noqa: E402


@dataclasses.dataclass(frozen=True)
class SpeedConfig:
    """How the presets are timed (module docstring)."""

    call_s: float = 0.1  # CPU seconds one timed call aims at
    repeats: int = 3  # timed calls per preset (median reported)
    pilot_rows: int = 8192  # rows of the pilot call (one chunk of the models)
    min_rows: int = 8192
    max_rows: int = 1 << 20
    target: float = 2e6  # K=16-equivalent dot products per CPU second (the target)
    seed: int = 0
    variants: tuple[str, ...] = ("measured", "mmasim", "toolbox")


QUICK = SpeedConfig(call_s=0.02, repeats=1, max_rows=1 << 16)
UNITS = {"dot_products_per_cpu_s": "1/s", "k16_equivalent_per_cpu_s": "1/s", "k16_equivalent_slowest": "1/s",
         "rows": "count"}


def family(p: MMAParams) -> str:
    """How a preset accumulates, for the summary (one word-group per model path)."""
    if p.scheme is not None:
        kind = p.scheme.kind
        if kind == "fma_chain":
            return f"{p.input_format} FMA chain" + (" (AMD)" if "v_mfma" in p.label else " (NVIDIA DMMA)")
        return {"pairwise": "AMD pairwise fp32 tree (CDNA1/2)", "fused_rd": "AMD fused round-down (CDNA3)",
                "exact_group": "AMD exact group sums (CDNA1, toolbox)"}[kind]
    if p.interleave is not None:
        return "FP8 mma.sync emulated on the fp16 path"
    if p.scale_format is not None:
        return "block-scaled, exact chunk sums (mxf4nvf4)" if p.scale_chunk else "block-scaled (mxf8f6f4)"
    if p.input_format in ("fp16", "bf16", "tf32"):
        return "block FMA fp16/bf16/tf32" + (" (wmma chained)" if "wmma" in p.label else "")
    return "block FMA FP8/FP6/FP4"


def configurations(cfg: SpeedConfig, only: str | None = None) -> list[tuple[tuple[str, ...], str, MMAParams]]:
    """(key, variant, preset) to time: every preset's measured one and each other variant that differs."""
    out = []
    for key in list_presets():
        if key[0] == "h200" or (only and only not in " ".join(key)):
            continue
        seen: list[MMAParams] = []
        for variant in cfg.variants:
            try:
                p = get_preset(*key, variant=variant)
            except ValueError:
                continue
            if p not in seen:
                seen.append(p)
                out.append((key, variant, p))
    return out


def operands(p: MMAParams, rows: int, k: int, rng: np.random.Generator) -> tuple:
    """(a, b, c, scale_a, scale_b) of N(0, 1) dot products for ``p`` (scales None where unscaled)."""
    a, b, c = (scheme_operands if p.scheme is not None else make_operands)(p, rows, k, "normal", rng)
    scales = make_scales(p, rows, k, "normal", rng) if p.scale_format else (None, None)
    return a, b, c, *scales


def time_preset(p: MMAParams, cfg: SpeedConfig, rng: np.random.Generator) -> tuple[int, int, np.ndarray]:
    """(K, rows, dot products per CPU second of each timed call) of one preset."""
    k = max(p.k_instr, 16)
    ops = operands(p, cfg.pilot_rows, k, rng)
    block_fma_bits(*(x[:256] if x is not None else None for x in ops[:3]), p, *(
        x[:256] if x is not None else None for x in ops[3:]))  # warm-up: tables
    t0 = time.process_time()
    block_fma_bits(*ops[:3], p, *ops[3:])
    pilot = max(time.process_time() - t0, 1e-4)
    rows = int(np.clip(cfg.pilot_rows * cfg.call_s / pilot, cfg.min_rows, cfg.max_rows)) // 1024 * 1024
    ops = operands(p, rows, k, rng)
    rates = []
    for _ in range(cfg.repeats):
        t0 = time.process_time()
        block_fma_bits(*ops[:3], p, *ops[3:])
        rates.append(rows / (time.process_time() - t0))
    return k, rows, np.array(rates)


def run_all(cfg: SpeedConfig, only: str | None, out: str, md: str | None) -> int:
    """Time every configuration, write the result file (and the Markdown summary)."""
    rng = np.random.default_rng(cfg.seed)
    prov = Provenance.current(device="cpu")
    prov = dataclasses.replace(prov, gpu=f"{prov.gpu} (1 core)")  # the threads are pinned to one
    load0 = os.getloadavg()[0]
    out_rows = []
    configs = configurations(cfg, only)
    t_start = time.perf_counter()
    for i, (key, variant, p) in enumerate(configs):
        k, rows, rates = time_preset(p, cfg, rng)
        rate = float(np.median(rates))
        k16, slow = rate * k / 16, float(rates.min()) * k / 16
        print(f"[{i + 1}/{len(configs)}] {' '.join(key):60s} {variant:8s} K={k:<3d} {rate:9.3g}/s  "
              f"K16-eq {k16:9.3g}{'  BELOW TARGET' if k16 < cfg.target else ''}", flush=True)
        out_rows += measurement("numerics_speed", "tcemu.numerics.block_fma_bits", family(p),
                                case(arch=key[0], instruction=key[1], input=key[2], output=key[3],
                                     variant=variant, K=k),
                                {"dot_products_per_cpu_s": rate, "k16_equivalent_per_cpu_s": k16,
                                 "k16_equivalent_slowest": slow, "rows": rows}, UNITS)
    info = {"numpy": np.__version__, "python": platform.python_version(), "load_average_1min_before": load0,
            "load_average_1min_after": os.getloadavg()[0], "configurations": len(configs),
            "wall_s": time.perf_counter() - t_start}
    out_rows += measurement("numerics_speed", "tcemu.numerics.block_fma_bits", "", case(run="provenance"),
                            info,
                            {"numpy": "text", "python": "text", "load_average_1min_before": "count",
                             "load_average_1min_after": "count", "configurations": "count", "wall_s": "s"})
    path = write_results(out, out_rows, prov)
    print(f"wrote {path}")
    if md:
        Path(md).write_text(summary_md(path, cfg))
        print(f"wrote {md}")
    return 0


def summary_md(csv_path: Path, cfg: SpeedConfig) -> str:
    """A short Markdown summary of a stored run: per family the count, the slowest and the median."""
    rows = read_wide(csv_path)
    run = next(r for r in rows if r.get("run") == "provenance")
    timed = [r for r in rows if "k16_equivalent_per_cpu_s" in r]
    fams: dict[str, list[dict]] = {}
    for r in timed:
        fams.setdefault(r["method"], []).append(r)

    def name(r: dict) -> str:
        v = "" if r["variant"] == "measured" else f", variant={r['variant']}"
        return f"{r['arch']} {r['instruction']} {r['input']}->{r['output']}{v}"

    before, after = float(run["load_average_1min_before"]), float(run["load_average_1min_after"])
    head = (f"{csv_path.name}: {run['gpu']}, NumPy {run['numpy']}, Python {run['python']}, commit "
            f"{run['commit']}, {run['date']}; load average {before:.1f} before, {after:.1f} after; "
            f"{len(timed)} configurations in {float(run['wall_s']):.0f} s. N(0, 1) operands, median of "
            f"{cfg.repeats} calls of about {cfg.call_s} CPU s; K = the instruction's K or 16; "
            f"K=16-equivalent = rate x K / 16. Target: {cfg.target:.0e}.")
    title = "# Model speed, every preset: K=16-equivalent dot products per CPU second, one core"
    lines = [title, "", head, "",
             "| family | configurations | slowest (K=16-eq. / CPU s) | slowest configuration | median |",
             "|---|---|---|---|---|"]

    def slowest(kv: tuple[str, list[dict]]) -> float:
        return min(float(r["k16_equivalent_per_cpu_s"]) for r in kv[1])

    for fam, rs in sorted(fams.items(), key=slowest):
        vals = [float(r["k16_equivalent_per_cpu_s"]) for r in rs]
        worst = rs[int(np.argmin(vals))]
        lines.append(f"| {fam} | {len(rs)} | {min(vals):.3g} | {name(worst)} (K={worst['K']}) | "
                     f"{float(np.median(vals)):.3g} |")
    below = [r for r in timed if float(r["k16_equivalent_per_cpu_s"]) < cfg.target]
    lines += ["", f"Under the target: {len(below)} of {len(timed)}."]
    lines += [f"- {name(r)}: {float(r['k16_equivalent_per_cpu_s']):.3g}" for r in below]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/numerics_speed.csv", help="result file")
    ap.add_argument("--md", default=None, help="also write the Markdown summary here")
    ap.add_argument("--only", default=None, help="time only the presets whose key contains this text")
    ap.add_argument("--quick", action="store_true", help="short calls, one repeat (a smoke test)")
    ap.add_argument("--twin", action="store_true", help="time the emulated-GEMM twin on the validation plan")
    ap.add_argument("--outputs", type=float, default=4e6,
                    help="--twin: outputs per (method, kernel) of the plan")
    ap.add_argument("--gemms", type=int, default=6, help="--twin: GEMMs timed per (method, kernel)")
    ap.add_argument("--twin-rows", type=int, default=24, help="--twin: rows of each GEMM timed")
    args = ap.parse_args(argv)
    if args.twin:
        return _twin(args)
    return run_all(QUICK if args.quick else SpeedConfig(), args.only, args.out, args.md)


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



if __name__ == "__main__":
    sys.exit(main())
