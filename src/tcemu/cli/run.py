"""Run a Python script with every torch model it builds emulated (the script needs no change).

    tcemu run --method tf32x3 --attention my_md.py --steps 1000
    tcemu run --method bf16x6 -m my_package.md --steps 1000

Each model is emulated in place at its first call (``nn.Linear`` layers and, with ``--attention``, the
attention blocks tcemu knows, PET's); code outside the models runs untouched. ``TCEMU_FP32_PRECISION`` is set
for child processes (e.g. ``multiprocessing``), where the installed ``tcemu-autoload.pth`` picks it up;
setting that variable yourself does the same for a script started by plain ``python``. See
``docs/engines.md``.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import traceback
import warnings

from .args import BadArgument, bad_argument


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", default="tf32x3",
                   help="emulation method (tf32x3, bf16x6, bf16x9, bf16x3, tf32), optionally with +attn "
                        "(default tf32x3)")
    p.add_argument("--attention", action="store_true", help="also emulate attention (PET's attention blocks)")
    p.add_argument("--backend", default="auto", choices=("auto", "torch", "triton"))
    p.add_argument("--report", action="store_true", help="print what was emulated when the script ends (stderr)")
    p.add_argument("-m", dest="module", action="store_true", help="run a module (as python -m) instead of a file")
    p.add_argument("target", help="the script (or, with -m, the module)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")


def run(args: argparse.Namespace) -> int | None:
    """Run the script as ``python`` would: its ``sys.argv``, ``sys.path[0]`` (the script's folder; the current
    folder for ``-m``), its exit status and ``sys.exit`` message, its traceback (from its own frames)."""
    if not args.module and not os.path.isfile(args.target):
        raise BadArgument(f"no such script: {args.target!r} (use -m for a module)")
    if args.module:
        import importlib.util

        sys.path.insert(0, os.getcwd())  # as python -m does
        try:
            found = importlib.util.find_spec(args.target) is not None
        except (ImportError, ValueError):  # a parent package that is missing, or an empty name
            found = False
        if not found:
            raise BadArgument(f"-m {args.target}: no such module on sys.path")
    # tcemu's own setup: a bad argument is one error line, with no warning of the setup before it; warnings of a
    # setup that works are shown
    with warnings.catch_warnings(record=True) as setup_warnings:
        warnings.simplefilter("default")
        _install(args)
    for w in setup_warnings:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    sys.argv = [args.target, *args.args]
    try:
        if args.module:
            runpy.run_module(args.target, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(args.target)))
            runpy.run_path(os.path.abspath(args.target), run_name="__main__")
    except SystemExit as exc:  # the script's own exit: its status, or its message on stderr and status 1
        code = exc.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - the script's error, with its traceback, as python shows it
        traceback.print_exception(type(exc), exc, _script_frames(exc.__traceback__))
        return 1
    return 0


def _install(args: argparse.Namespace) -> None:
    """Install the autoload hook and set its variable for child processes."""
    from tcemu import autoload
    from tcemu.emulation.configuration import EmulationConfig

    with bad_argument("--method"):
        cfg = autoload.install(args.method, attention=args.attention, backend=args.backend, report=args.report)
    spelled = EmulationConfig(cfg.method, attention="blocks" if cfg.attention else "none")
    os.environ[autoload.ENV_VAR] = spelled.method_string
    if args.report:
        os.environ[autoload.REPORT_VAR] = "1"


def _script_frames(tb):
    """The traceback from the script's first frame on (without this module's and runpy's frames)."""
    while tb is not None and (tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__)
                              or tb.tb_frame.f_code.co_filename.startswith("<frozen runpy")):
        tb = tb.tb_next
    return tb
