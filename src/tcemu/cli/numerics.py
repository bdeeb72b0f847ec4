"""Bit-accurate Tensor Core arithmetic model: explain one dot product, list presets, check public data.

Subcommands:

  explain   step by step: each aligned addend, the bits truncated, the sum and the final rounding
            tcemu numerics explain --arch a100 --a "2^-24,2^-24,2^-24" --b "1,0.5,0.5" --c 1
            tcemu numerics explain --arch h100 --instruction wgmma --input-format e4m3 --a 0.5 --b 2^-7 --c 1
  presets   the model parameters of every (arch, instruction, input, output), with sources
  coverage  architecture x instruction x format: each preset's source and validation status
            (measured here / public data / literature)
  data      the model against the bundled public hardware data (Khattak & Mikaitis), per case
  emulation the emulated GEMMs' error on one Tensor Core generation (the CPU twin), e.g.
            tcemu numerics emulation --arch b200 --method bf16x9
  explain --method tf32x3: one output element of an emulated GEMM (pieces, instructions, FP32 steps)
            tcemu numerics explain --arch h200 --method tf32x3 --a "1.1,-2.5,3e-3" --b "0.7,0.25,-1"

Values: 1.5, -2^-24, 1.5*2^-3, 0x1.8p-3 (hex float), inf, nan, or raw bits 0x3C00 / bits:0x7E00.
What-if: --frac-bits, --n-fma, --czero-floor (none or an exponent), --variant mmasim|toolbox.
"""

from __future__ import annotations

import argparse
import sys

from .args import BadArgument, at_least, bad_argument


def _floor(text: str) -> int | None:
    """--czero-floor: an exponent, or 'none'."""
    if text.strip().lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an exponent (an integer) or 'none', got {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="numerics_command", metavar="SUBCOMMAND")
    ex = sub.add_parser("explain", help="explain one dot product a.b + c, step by step")
    ex.add_argument("--arch", required=True, help="v100, a100, ada, h100, h200, b200")
    ex.add_argument("--instruction", default="mma.sync", help="mma.sync (default), wgmma, tcgen05")
    ex.add_argument("--input-format", default="fp16", help="fp16 (default), bf16, tf32, e4m3, e5m2")
    ex.add_argument("--output-format", default="fp32", help="fp32 (default) or fp16")
    ex.add_argument("--a", required=True, help="comma-separated a values (k = 0, 1, ...)")
    ex.add_argument("--b", required=True, help="comma-separated b values, as many as a")
    ex.add_argument("--c", default="0", help="c (default 0)")
    ex.add_argument("--variant", default="measured",
                    help="measured (default: what the H100/H200 answered), mmasim or toolbox: c=0 / c exponent "
                         "floors, zero factors in E_max (mmasim: at exponent -126)")
    ex.add_argument("--frac-bits", type=at_least(0), help="what-if: F")
    ex.add_argument("--n-fma", type=at_least(1), help="what-if: N (block size)")
    ex.add_argument("--czero-floor", type=_floor, default=False, help="what-if: c = 0 floor exponent, or 'none'")
    ex.add_argument("--pad", action="store_true", help="pad a and b with zeros to the instruction's K")
    from .numerics_emulation import add_emulation_parser, add_explain_arguments

    add_explain_arguments(ex)
    add_emulation_parser(sub)
    sub.add_parser("presets", help="list every preset with its parameters and sources")
    sub.add_parser("coverage", help="architecture x instruction x format: source and validation status")
    da = sub.add_parser("data", help="check the model on the bundled public hardware data")
    da.add_argument("--gpu", help="only this GPU folder (V100, A100, A2, Ada, L40S, H100, H200, B200)")


def _explain(args: argparse.Namespace) -> int:
    with bad_argument():  # every argument is interpreted here: a value error is a bad argument
        if args.method:  # one output element of an emulated GEMM
            from .numerics_emulation import explain_method

            return explain_method(args)
        text = _explanation(args)
    print(text)
    return 0


def _explanation(args: argparse.Namespace) -> str:
    from dataclasses import replace

    from tcemu.numerics import get_preset
    from tcemu.numerics.explain import explain, parse_values

    p = get_preset(args.arch, args.instruction, args.input_format, args.output_format, variant=args.variant)
    changes: dict = {}
    if args.frac_bits is not None:
        changes["frac_bits"] = args.frac_bits
    if args.n_fma is not None:
        changes["n_fma"] = args.n_fma
        changes["k_instr"] = max(p.k_instr, args.n_fma) if p.k_instr % args.n_fma == 0 else args.n_fma
    if args.czero_floor is not False:
        changes["czero_floor"] = args.czero_floor
    if changes:
        p = replace(p, label=p.label + " (what-if: " + ", ".join(f"{k}={v}" for k, v in changes.items()) + ")",
                    **changes)
    a = parse_values(args.a, p.input_format)
    b = parse_values(args.b, p.b_format)
    if not a:
        raise BadArgument("--a is empty: give the comma-separated values of a (as many as --b)")
    if len(a) != len(b):
        raise ValueError(f"--a has {len(a)} values, --b has {len(b)}")
    c = parse_values(args.c, p.c_in_format)
    if len(c) != 1:
        raise ValueError("--c takes one value")
    if args.pad and len(a) % p.k_instr:
        extra = p.k_instr - len(a) % p.k_instr
        a, b = a + [0] * extra, b + [0] * extra
    return explain(a, b, c[0], p)


def _presets() -> int:
    from tcemu.numerics import get_preset, list_presets

    def floor(x):
        return "none" if x is None else str(x)

    print(f"{'arch':5s} {'instruction':17s} {'in':18s} {'out':5s} {'K':>3s} {'N':>3s} {'F':>3s} {'D format':8s} "
          f"{'round':5s} {'c=0 floor':>9s} {'(mmasim/toolbox)':>16s} {'c exp floor':>11s}  notes")
    for key in list_presets(extra=False):  # the literature-based ones: _literature_presets
        p = get_preset(*key)
        ms = get_preset(*key, variant="mmasim")
        tb = get_preset(*key, variant="toolbox")
        notes = "emulated: fp16 path, groups k mod 4 in {0,1},{2,3}, c added RNE" if p.interleave else ""
        if p.scale_format:
            notes = ("scaled chunks of 16 (exact sums)" if p.scale_chunk else "scale exponents into products")
        if "literature-based" in p.sources:
            notes += ("; " if notes else "") + "literature-based"
        print(f"{key[0]:5s} {key[1]:17s} {key[2]:18s} {key[3]:5s} {p.k_instr:3d} {p.n_fma:3d} {p.frac_bits:3d} "
              f"{p.output_format:8s} {p.output_rounding.value.upper():5s} {floor(p.czero_floor):>9s} "
              f"{floor(ms.czero_floor) + '/' + floor(tb.czero_floor):>16s} {floor(p.c_exp_floor):>11s}  {notes}")
    print("\nc=0 floor and c exponent floor: the 'measured' variant (what the H200 answered, docs/hardware/h200.md); "
          "the literature's mmasim/toolbox choices in brackets. Sources: tcemu.numerics.get_preset(...).sources")
    _literature_presets()
    return 0


def _literature_presets() -> None:
    """The literature-based presets (Turing, FP64 DMMA, AMD MFMA), one line each with its sources."""
    from tcemu.numerics import get_preset
    from tcemu.numerics.presets_extra import extra_keys

    print("\nLiterature-based (no hardware data here): Turing, FP64 DMMA (FMA chains), AMD CDNA MFMA")
    for key in extra_keys():
        p = get_preset(*key)
        print(f"{' '.join(key)}: {p.describe()}\n    sources: {p.sources}")


def _data(args: argparse.Namespace) -> int:
    import numpy as np

    from tcemu.numerics import block_fma_bits, get_preset
    from tcemu.numerics.public_data import load_cases

    cases = load_cases()
    if args.gpu:
        gpus = sorted({case.gpu for case in cases})
        cases = [case for case in cases if case.gpu.lower() == args.gpu.lower()]
        if not cases:
            raise BadArgument(f"--gpu {args.gpu}: the bundled data has no such GPU; choose one of {', '.join(gpus)}")
    worst, checked = 1.0, 0
    for case in cases:
        p = get_preset(case.arch, "mma.sync", case.input_format, case.output_format)
        pad = -case.a.shape[1] % p.k_instr
        a = np.pad(case.a, ((0, 0), (0, pad)))
        b = np.pad(case.b, ((0, 0), (0, pad)))
        match = (block_fma_bits(a, b, case.c, p) == case.d).mean()
        line = f"{case.gpu:5s} {case.name:10s} {p.label:45s} {match:8.2%}"
        if not case.c_applied:
            w = get_preset(case.arch, "wgmma", case.input_format, case.output_format)
            m0 = (block_fma_bits(a, b, np.zeros_like(case.c), w) == case.d).mean()
            line += f"   d lacks c (data caveat): as wgmma with c = 0: {m0:.2%}"
        else:
            worst = min(worst, match)
            checked += 1
        print(line)
    if not checked:
        print("\nno consistent case among these (every one is a data caveat): nothing to match")
        return 1
    print(f"\nworst match over the consistent cases: {worst:.2%} ({checked} cases)")
    return 0 if worst == 1.0 else 1


def run(args: argparse.Namespace) -> int | None:
    cmd = getattr(args, "numerics_command", None)
    if cmd == "explain":
        return _explain(args)
    if cmd == "presets":
        return _presets()
    if cmd == "data":
        return _data(args)
    if cmd == "coverage":
        from tcemu.numerics.coverage import format_coverage

        print(format_coverage())
        return 0
    if cmd == "emulation":
        from .numerics_emulation import run_emulation

        return run_emulation(args)
    print(__doc__, file=sys.stderr)
    raise BadArgument("give a subcommand: explain, emulation, presets, coverage or data")
