"""``python -m tcemu.native build [--host] [--dir DIR]``: build the native library (prints its path)."""

from __future__ import annotations

import argparse

from . import build


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tcemu.native", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build libtcemu_native.so (and the host demo with --host)")
    b.add_argument("--dir", default=None, help="build directory (default: $TCEMU_NATIVE_BUILD or ./build/native)")
    b.add_argument("--host", action="store_true", help="also build the C++ host demo (needs metatomic-torch)")
    b.add_argument("--verbose", action="store_true", help="show the compiler's output")
    args = parser.parse_args()
    print(build(args.dir, host=args.host, quiet=not args.verbose))


if __name__ == "__main__":
    main()
