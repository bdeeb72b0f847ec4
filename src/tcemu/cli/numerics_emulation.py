"""``tcemu numerics emulation`` (the twin's error tables per Tensor Core generation) and ``tcemu numerics explain
--method`` (one output element of an emulated GEMM, step by step): their arguments and handlers."""

from __future__ import annotations

import argparse

from .args import BadArgument, at_least, bad_argument, check_choices, csv_list, output_file

METHODS = ("tf32x3", "bf16x3", "bf16x6", "bf16x9")


def _ks(text: str) -> tuple[int, ...]:
    """--k: comma-separated positive integers."""
    return tuple(at_least(1)(item) for item in csv_list(text))


def add_emulation_parser(sub) -> None:
    em = sub.add_parser("emulation", help="error of TF32x3/BF16x3/x6/x9 on an architecture's Tensor Cores (the twin)",
                        description="The emulated GEMMs' error on one Tensor Core generation, from the CPU twin "
                                    "(tcemu.numerics.emulation_errors): normwise and elementwise against FP64, beside "
                                    "an FP32 SGEMM, per input family and K, and an adversarial search.")
    em.add_argument("--arch", default="h200", help="a100, ada, h100, h200 (default), b200")
    em.add_argument("--method", default=None, help="tf32x3, bf16x3, bf16x6, bf16x9 (default: all four)")
    em.add_argument("--instruction", default=None, help="the preset's instruction (default: what tl.dot compiles to)")
    em.add_argument("--k", default="256,4096", type=_ks, help="comma-separated K (default 256,4096)")
    em.add_argument("--families", default="normal,wide,cancel,tiny", type=csv_list,
                    help="input families (default: all four)")
    em.add_argument("--size", type=at_least(1), default=96, help="M = N of the products (a third of it for K > 1024)")
    em.add_argument("--no-search", action="store_true", help="skip the adversarial search")
    em.add_argument("--json", default=None, metavar="PATH", type=output_file, help="also write the tables as JSON")


def add_explain_arguments(ex: argparse.ArgumentParser) -> None:
    ex.add_argument("--method", default=None,
                    help="explain one output element of an emulated GEMM (tf32x3, bf16x3, bf16x6, bf16x9): --a is a "
                         "row of A, --b a column of B, FP32 values")
    ex.add_argument("--config", default=None, help="with --method: the kernel configuration (default: the "
                                                   "dispatcher's choice for --shape)")
    ex.add_argument("--shape", default="4096x1024", help="with --method: M x N of the product (default 4096x1024)")
    ex.add_argument("--brief", action="store_true", help="with --method: only each instruction chain's result")


def run_emulation(args: argparse.Namespace) -> int:
    import json

    from tcemu.numerics.emulation_errors import FAMILIES, error_table, format_table
    from tcemu.numerics.schedule import derive_schedule

    methods = [args.method] if args.method else list(METHODS)
    ks, fams = args.k, tuple(args.families)
    check_choices("--method", methods, METHODS)
    check_choices("--families", fams, FAMILIES)
    with bad_argument("--arch/--instruction"):  # before anything is computed
        derive_schedule(methods[0], arch=args.arch, instruction=args.instruction, M=4096, N=1024, K=ks[0])
    tables = []
    for m in methods:
        t = error_table(m, args.arch, args.instruction, ks=ks, families=fams, size=args.size,
                        search=False if args.no_search else None)
        tables.append(t)
        print(format_table(t) + "\n")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(tables, fh, indent=1)
    return 0


def _fp32_values(option: str, text: str):
    """--a / --b of ``explain --method``: FP32 values (rounded to FP32, as the GEMM's inputs are)."""
    from tcemu.numerics.explain_emulated import parse_fp32_values

    try:
        values = parse_fp32_values(text)
    except OverflowError:
        raise BadArgument(f"{option}: a value is beyond every float's range (FP32 holds up to about 3.4e38; "
                          "write inf for infinity)") from None
    if not len(values):
        raise BadArgument(f"{option} is empty: give the comma-separated FP32 values")
    return values


def explain_method(args: argparse.Namespace) -> int:
    from tcemu.numerics.explain_emulated import explain_emulated

    check_choices("--method", [args.method], METHODS)
    try:
        m, n = (at_least(1)(x) for x in args.shape.lower().split("x"))
    except (ValueError, argparse.ArgumentTypeError):
        raise ValueError(f"--shape {args.shape!r}: write M x N, e.g. 4096x1024") from None
    # --instruction's default (mma.sync) stands for "what the kernel compiles to" here (wgmma on sm_90, tcgen05 on
    # sm_100; numerically the same as mma.sync for TF32 and BF16 there)
    instruction = None if args.instruction == "mma.sync" else args.instruction
    print(explain_emulated(_fp32_values("--a", args.a), _fp32_values("--b", args.b), args.method, arch=args.arch,
                           instruction=instruction, config=args.config, shape=(m, n), brief=args.brief))
    return 0
