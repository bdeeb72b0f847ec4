"""Validate the tcemu.numerics model against the GPU's Tensor Cores, bit for bit, on random inputs.

Every case (mma.sync fp16, bf16, tf32, e4m3, e5m2 with fp32 output, the fp16-output variants, wgmma tf32,
fp16, bf16, e4m3, e5m2) gets --samples outputs from each of the input families (normal, uniform, random bit
patterns, exact cancellations, wide exponent spread, dominant c, zero c with tiny products). The GPU produces
batches while a pool of CPU processes runs the model; every mismatch is saved with a shrunk reproducer.

Writes OUT/h200_validation_summary.json, OUT/h200_validation_mismatches.npz, OUT/h200_validation_replay.npz.
With several GPUs, --gpus N runs one process per GPU over a share of the cases and merges the results.

Without a GPU: --replay NPZ checks the model against stored hardware samples (the replay set).

--emulation validates the CPU twin of tcemu's emulated GEMMs (tcemu.numerics.emulated_matmul) instead: TF32x3,
BF16x3, BF16x6, BF16x9 on every kernel family the dispatcher uses (the Triton kernel; on Hopper the Gluon kernels
g, pg, gw/tgw, pgw/ptgw), --outputs output elements per method and family, six input families, every element
compared with the twin. Writes OUT/h200_emulation_summary.json, _mismatches.npz, _replay.npz.
--replay-emulation NPZ checks the twin against a stored set of GPU outputs on any CPU.

Examples:
  tcemu validate --samples 10000000 --out val-out
  tcemu validate --smoke                      # SASS check and fragment-layout check only
  tcemu validate --wmma --samples 1e7 --out val-wmma   # CUDA's WMMA API (as the compiler lowers it)
  tcemu validate --replay src/tcemu/numerics/hardware/data/h200_replay.npz [--measured]
  tcemu validate --emulation --out val-emu     # the emulated GEMMs against their twin (under 4 minutes, H200)
  tcemu validate --replay-emulation src/tcemu/numerics/hardware/data/h200_emulation_replay.npz
"""

from __future__ import annotations

import argparse

from .args import (BadArgument, at_least, bad_argument, check_choices, npz_file, output_dir, require_cuda_device,
                   seed)


def _samples(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of samples, got {text!r}") from None
    if not value >= 1 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="validate-out", type=output_dir, help="output folder (default: validate-out)")
    parser.add_argument("--cases", nargs="*", default=None, help="case names (default: the validation set)")
    parser.add_argument("--samples", type=_samples, default=1e7, help="samples per case (default 1e7)")
    parser.add_argument("--families", nargs="*", default=None, help="input families (default: all)")
    parser.add_argument("--workers", type=at_least(0), default=0, help="model processes (default 0: CPU count - 1)")
    parser.add_argument("--seed", type=seed, default=2026)
    parser.add_argument("--gpus", type=at_least(1), default=1,
                        help="shard the cases over this many GPUs (one process each)")
    parser.add_argument("--smoke", action="store_true", help="only check SASS and fragment layouts")
    parser.add_argument("--replay", default=None, metavar="NPZ", help="check the model against a replay set (CPU)")
    parser.add_argument("--measured", action="store_true",
                        help="with --replay: check the presets corrected by the H200 probe (data/h200_measured.json)")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--wmma", action="store_true", help="validate CUDA's WMMA API (fp16, bf16, tf32) instead")
    emu = parser.add_argument_group("emulated GEMMs (--emulation)")
    emu.add_argument("--emulation", action="store_true", help="validate the twin of the emulated GEMMs")
    emu.add_argument("--outputs", type=_samples, default=1e7, help="outputs per method and kernel family (default 1e7)")
    emu.add_argument("--methods", nargs="*", default=None, help="tf32x3 bf16x3 bf16x6 bf16x9 (default: all)")
    emu.add_argument("--kernels", nargs="*", default=None, help="triton g pg gw pgw (default: all)")
    emu.add_argument("--k-max", type=at_least(1), default=192, help="largest K of the random shapes (default 192)")
    emu.add_argument("--replay-emulation", default=None, metavar="NPZ",
                     help="check the twin against stored GPU outputs (CPU)")


def run(args: argparse.Namespace) -> int:
    import json
    import os

    if args.measured and not args.replay:
        raise BadArgument("--measured applies to --replay NPZ (the stored samples); add --replay or drop it")
    if args.emulation or args.replay_emulation:
        return _emulation(args)
    if args.replay:
        from tcemu.numerics.hardware.replay import check_replay, measured_table

        with npz_file("--replay", args.replay, "a replay set of hardware samples (.npz)"):
            res = check_replay(args.replay, table=measured_table() if args.measured else None)
        for key, r in res["groups"].items():
            if r["mismatches"]:
                print(f"{key:<40} {r['samples']:6d} samples {r['mismatches']:6d} mismatches")
        print(f"replay: {res['samples']} samples, {res['mismatches']} mismatches in {len(res['groups'])} groups")
        return 1 if res["mismatches"] else 0

    from tcemu.numerics.hardware.cases import VALIDATION_CASES, get_case
    from tcemu.numerics.hardware.families import FAMILIES
    from tcemu.numerics.hardware.runner import Runner

    if args.cases:
        cases = tuple(args.cases)
    else:
        from tcemu.numerics.hardware.cases import WMMA_CASES

        cases = tuple(c.name for c in (WMMA_CASES if args.wmma else VALIDATION_CASES))
    with bad_argument("--cases"):
        for name in cases:
            get_case(name)
    check_choices("--families", args.families or (), FAMILIES)
    if args.smoke and args.gpus > 1:
        raise BadArgument("--smoke checks one GPU; drop --gpus")
    require_cuda_device("validate", "--replay NPZ checks stored hardware samples on any machine")
    os.makedirs(args.out, exist_ok=True)
    if args.gpus > 1:
        from tcemu.numerics.hardware.shard import run_sharded

        return run_sharded(args, cases)
    runner = Runner(verbose=True)
    if args.smoke:
        from tcemu.numerics.hardware.smoke import check_layouts

        out = {"device": runner.device, "sass": runner.check_sass(), "layouts": check_layouts(runner)}
        with open(os.path.join(args.out, "h200_smoke.json"), "w") as fh:
            json.dump(out, fh, indent=1)
        for name in out["sass"]:
            s, lay = out["sass"][name], out["layouts"][name]
            print(f"{name:<22} sass {'ok ' if s['ok'] else 'BAD'} {','.join(s['opcodes'])[:70]:<70} "
                  f"layout {'ok' if lay['ok'] else 'BAD ' + json.dumps(lay)}")
        return 0 if all(v["ok"] for v in out["sass"].values()) and all(v["ok"] for v in out["layouts"].values()) else 1
    from tcemu.numerics.hardware.validate import ValidationConfig, run_validation

    cfg = ValidationConfig(cases=cases, samples=int(args.samples), families=tuple(args.families or FAMILIES),
                           workers=args.workers, seed=args.seed, progress=not args.no_progress)
    summary = run_validation(runner, cfg, args.out)
    return 1 if summary["total_mismatches"] else 0


def _emulation(args) -> int:
    """--emulation / --replay-emulation: the emulated-GEMM twin against the GPU's kernels."""
    from tcemu.numerics.hardware import emulation_validate as ev

    if args.replay_emulation:
        with npz_file("--replay-emulation", args.replay_emulation, "a stored set of emulated-GEMM GPU outputs"):
            res = ev.check_replay(args.replay_emulation)
        for group, r in res["groups"].items():
            if r["mismatches"]:
                print(f"{group:<36} {r['outputs']:6d} outputs {r['mismatches']:6d} mismatches (K = {r['k']})")
        print(f"emulation replay: {res['outputs']} outputs, {res['mismatches']} mismatches in {len(res['groups'])} groups")
        return 1 if res["mismatches"] else 0
    from tcemu.numerics.hardware.gemm_families import GEMM_FAMILIES
    from tcemu.numerics.schedule import KERNEL_FAMILIES

    check_choices("--methods", args.methods or (), ev.METHODS)
    check_choices("--kernels", args.kernels or (), KERNEL_FAMILIES)
    check_choices("--families", args.families or (), GEMM_FAMILIES)

    cfg = ev.EmulationValidationConfig(
        methods=tuple(args.methods or ev.METHODS), kernels=tuple(args.kernels or KERNEL_FAMILIES),
        outputs=int(args.outputs), families=tuple(args.families or GEMM_FAMILIES), k_max=args.k_max,
        workers=args.workers, seed=args.seed, progress=not args.no_progress)
    import torch

    # without CUDA: a dry run of the pipeline on the kernels' interpreter (TRITON_INTERPRET=1), else a clear error
    runner = ev.TorchGemmRunner("cuda" if torch.cuda.is_available() else "cpu")
    summary = ev.run_emulation_validation(runner, cfg, args.out)
    return 1 if summary["total_mismatches"] else 0
