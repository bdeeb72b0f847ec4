"""``tcemu``: one command with subcommands, ASE style.

Each subcommand lives in its own module under :mod:`tcemu.cli` and provides
``add_arguments(parser)`` and ``run(args) -> int | None``; its module docstring
is its help. Modules must import heavy dependencies inside ``run`` so that
``tcemu --help`` stays fast.

Errors are one line on stderr, ``tcemu <command>: error: <what, and what to do>``. Exit status: 0 when the
command did what was asked, 2 for a bad argument (argparse's convention: a rejected option value, or a
:class:`~tcemu.cli.args.BadArgument` raised by the command before it computes), 1 for a failure while
running; ``-T`` / ``--traceback`` prints the traceback as well.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback

from .args import BadArgument, CommandFailed

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


class _Parser(argparse.ArgumentParser):
    """argparse with its errors on one line (no usage block): ``<prog>: error: <message>``, exit status 2."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
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


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc.args[0] if isinstance(exc, KeyError) and exc.args else exc).split())
    return text or type(exc).__name__


def _prog(args: argparse.Namespace) -> str:
    """``tcemu <command> [<subcommand>]`` of the parsed command line."""
    words = ["tcemu", args.command]
    words += [v for k, v in vars(args).items() if k.endswith("_command") and isinstance(v, str)]
    return " ".join(words)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a rejected argument (2), already reported by argparse
        return exc.code if isinstance(exc.code, int) else 2
    if not getattr(args, "_run", None):
        parser.print_help(sys.stderr)
        return 2
    prog = _prog(args)
    try:
        rc = args._run(args)
    except KeyboardInterrupt:
        return 130
    except BadArgument as exc:
        if args.traceback:
            traceback.print_exc()
        print(f"{prog}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except CommandFailed as exc:
        if args.traceback:
            traceback.print_exc()
        print(f"{prog}: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - a CLI reports a failure as one line unless -T
        if args.traceback:
            traceback.print_exc()
        print(f"{prog}: error: {type(exc).__name__}: {_one_line(exc)} (-T shows the traceback)", file=sys.stderr)
        return 1
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
