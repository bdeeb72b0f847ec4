"""Probe the GPU's Tensor Cores: run crafted vectors, infer the MMA parameters, compare with the presets.

Runs every probe family (block structure, accumulator fraction bits, alignment rounding, output rounding,
normalisation, c = 0 floor, c exponent floor, overflow under RZ, NaN payloads, subnormals, tf32 conversion,
chaining, mma.sync vs wgmma) through mma.sync and wgmma on the current GPU (needs CUDA, nvcc and an sm_90
device), infers each parameter with no prior knowledge of the GPU, and writes:

  OUT/h200_probe_raw.npz   the hardware bits of every vector (rerun the inference with --from-raw on any CPU)
  OUT/h200-probe.json      per case and parameter: inferred value, preset value, the deciding vectors
  OUT/h200_probe_report_full.json   every stage, candidate grid and rejection
  OUT/h200-probe.md        a readable summary

Examples:
  tcemu probe --out probe-out
  tcemu probe --wmma --out probe-wmma          # WMMA: what the compiler lowers it to, probed like an instruction
  tcemu probe --from-raw src/tcemu/numerics/hardware/data/h200_probe_raw.npz --out docs/hardware
"""

from __future__ import annotations

import argparse

from .args import BadArgument, bad_argument, npz_file, output_dir, require_cuda_device


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="probe-out", type=output_dir, help="output folder (default: probe-out)")
    parser.add_argument("--cases", nargs="*", default=None, help="case names (default: all); see --list")
    parser.add_argument("--from-raw", default=None, metavar="NPZ", help="infer from stored hardware bits, no GPU")
    parser.add_argument("--collect-only", action="store_true", help="only run the vectors on the GPU and save them")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--wmma", action="store_true",
                        help="probe CUDA's WMMA API (fp16, bf16, tf32 on 16 x 16 tiles) instead of the instructions")


def run(args: argparse.Namespace) -> int:
    import json
    import os

    from tcemu.numerics.hardware.cases import ALL_CASES, CASES, WMMA_CASES, get_case
    from tcemu.numerics.hardware.probe import collect, load_raw, probe_report, save_raw
    from tcemu.numerics.hardware.report import probe_markdown

    if args.list:
        for c in ALL_CASES:
            print(f"{c.name:<22} {c.ptx}")
        return 0
    if args.collect_only and args.from_raw:
        raise BadArgument("--collect-only runs the vectors on the GPU, --from-raw reads stored ones: give one")
    with bad_argument("--cases"):
        cases = [get_case(n) for n in args.cases] if args.cases else (WMMA_CASES if args.wmma else CASES)
    if args.from_raw:
        with npz_file("--from-raw", args.from_raw, "the .npz of hardware bits that tcemu probe writes"):
            raw, device = load_raw(args.from_raw)
    else:
        require_cuda_device("probe", "--from-raw NPZ infers from stored hardware bits on any machine")
    os.makedirs(args.out, exist_ok=True)
    if not args.from_raw:
        from tcemu.numerics.hardware.runner import Runner

        runner = Runner(verbose=True)
        device = runner.device
        raw = collect(runner, cases)
        save_raw(os.path.join(args.out, "h200_probe_raw.npz"), raw, device)
        if args.collect_only:
            return 0
    from tcemu.numerics.hardware.campaign import measured_params
    from tcemu.numerics.hardware.report import compact_probe

    rep = probe_report(raw, device, cases=args.cases or None, workers=os.cpu_count() or 1)
    with open(os.path.join(args.out, "h200_probe_report_full.json"), "w") as fh:
        json.dump(rep, fh, indent=1, default=str)
    _, changes = measured_params(rep)
    with open(os.path.join(args.out, "h200-probe.json"), "w") as fh:
        json.dump(compact_probe(rep, changes), fh, indent=1, default=str)
    with open(os.path.join(args.out, "h200-probe.md"), "w") as fh:
        fh.write(probe_markdown(rep))
    bad = [c["case"] for c in rep["cases"] if c["final"]["mismatches"]]
    print(f"probe: {len(rep['cases'])} cases; final hypothesis fails some vectors in: {bad or 'none'}")
    return 0
