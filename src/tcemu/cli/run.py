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
    from tcemu import autoload
    from tcemu.emulation.configuration import EmulationConfig

    if not args.module and not os.path.isfile(args.target):
        raise BadArgument(f"no such script: {args.target!r} (use -m for a module)")
    if args.module:
        import importlib.util

        try:
            found = importlib.util.find_spec(args.target) is not None
        except (ImportError, ValueError):  # a parent package that is missing, or an empty name
            found = False
        if not found:
            raise BadArgument(f"-m {args.target}: no such module on sys.path")
    with bad_argument("--method"):
        cfg = autoload.install(args.method, attention=args.attention, backend=args.backend, report=args.report)
    spelled = EmulationConfig(cfg.method, attention="blocks" if cfg.attention else "none")
    os.environ[autoload.ENV_VAR] = spelled.method_string
    if args.report:
        os.environ[autoload.REPORT_VAR] = "1"
    sys.argv = [args.target, *args.args]
    try:
        if args.module:
            runpy.run_module(args.target, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(args.target)))
            runpy.run_path(args.target, run_name="__main__")
    except SystemExit as exc:  # the script's own exit status
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except Exception:  # noqa: BLE001 - the script's error, with its traceback, as python shows it
        traceback.print_exc()
        return 1
    return 0
