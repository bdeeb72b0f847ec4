# /// script
# requires-python = ">=3.11"
# dependencies = ["tcemu[mlip]"]
# ///
"""The full-size MLIP validation suite (issue 5) on a GPU: every method against FP64 and FP32.

Compares fp32, tf32, tf32x3, bf16x3, bf16x6 and bf16x9 (tcemu.emulate_, Triton kernels on CUDA)
on the checks of tcemu.mlip: single points of random-weight PET (S, S with 32 neighbours, M, L)
on the 192-atom water box and PET S on the 17,280-atom supercell, ANI-1x and CHGNet on water;
the CO drag curve (60 heights) with CHGNet and PET S; ANI-1x NVE of the water box; CHGNet FIRE2
relaxation of the 539-atom Cantor slab. Writes long-format CSVs, figures, verdicts.csv and
report.md to --out (copy them to benchmarks/results/mlip_*).

Usage: python benchmarks/mlip_full.py --out benchmarks/results/mlip_full [--nve-ps 2] [--skip chgnet]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace


def main(argv: list[str] | None = None) -> int:
    from tcemu.mlip.report import SuiteConfig, run_suite, verdict_table

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="benchmarks/results/mlip_full")
    p.add_argument("--device", default="cuda")
    p.add_argument(
        "--nve-ps", type=float, default=None, help="NVE length per method (default: the full config's)"
    )
    p.add_argument("--relax-repeats", type=int, default=None)
    p.add_argument(
        "--skip", default="", help="comma-separated potentials to leave out (e.g. chgnet when not installed)"
    )
    p.add_argument("--checks", default="single_point,energy_curve,nve,relax")
    p.add_argument("--no-supercell", action="store_true", help="leave out the 17,280-atom single point")
    p.add_argument(
        "--sp", default=None, help="single-point cases to run, e.g. 'ani1x:water_192,pet-s:water_17280'"
    )
    args = p.parse_args(argv)

    cfg = SuiteConfig.full(device=args.device, checks=tuple(args.checks.split(",")))
    skip = {s for s in args.skip.split(",") if s}
    sp = tuple(
        c for c in cfg.single_point if c[0] not in skip and not (args.no_supercell and c[1] == "water_17280")
    )
    if args.sp:
        sp = tuple(tuple(c.split(":")) for c in args.sp.split(","))
    over = {"single_point": sp, "curve_potentials": tuple(c for c in cfg.curve_potentials if c not in skip)}
    if args.nve_ps is not None:
        over["nve_ps"] = args.nve_ps
    if args.relax_repeats is not None:
        over["relax_repeats"] = args.relax_repeats
    if cfg.relax_potential in skip:
        over["checks"] = tuple(c for c in cfg.checks if c != "relax")
    cfg = replace(cfg, **over)
    t0 = time.perf_counter()
    res = run_suite(
        cfg,
        args.out,
        show_progress=False,
        log=lambda s: print(f"[{time.perf_counter() - t0:7.1f} s] {s}", flush=True),
    )
    print(verdict_table(res))
    print(f"total {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
