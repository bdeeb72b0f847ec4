"""``tcemu``: one command with subcommands, ASE style.

Each subcommand lives in its own module under :mod:`tcemu.cli` and provides
``add_arguments(parser)`` and ``run(args) -> int | None``; its module docstring
is its help. Modules must import heavy dependencies inside ``run`` so that
``tcemu --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback

# name -> module implementing it. Order is the order shown in --help.
COMMANDS: dict[str, str] = {
    "info": "tcemu.cli.info",
    "accuracy": "tcemu.cli.accuracy",
    "numerics": "tcemu.cli.numerics",
    "probe": "tcemu.cli.probe",
    "validate": "tcemu.cli.validate",
    "mlip": "tcemu.cli.mlip",
    "run": "tcemu.cli.run",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tcemu",
        description="FP32 emulation on Tensor Cores: info, accuracy, numerics model, MLIP validation.",
    )
    parser.add_argument("-T", "--traceback", action="store_true", help="show the full traceback on error")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, modname in COMMANDS.items():
        try:
            mod = importlib.import_module(modname)
        except ModuleNotFoundError as exc:  # an optional dependency missing: say so in --help, keep the rest
            sub.add_parser(name, help=f"(unavailable: {exc})")
            continue
        doc = (mod.__doc__ or "").strip()
        short = doc.splitlines()[0] if doc else name
        p = sub.add_parser(name, help=short, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 1
    try:
        rc = args._run(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - a CLI reports errors as one line unless -T
        if args.traceback:
            traceback.print_exc()
        else:
            print(f"tcemu {args.command}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
            print("(run with -T for the traceback)", file=sys.stderr)
        return 2
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
