"""Argument checks shared by the subcommands: bad input is refused before any computation, in one line.

Argument types (``type=`` of ``add_argument``) reject a value when the command line is parsed; what needs
the other arguments or a file is checked by the command before it computes, raising :class:`BadArgument`
(directly or through :func:`bad_argument`). :func:`tcemu.cli.main.main` turns both into
``tcemu <command>: error: <one line>`` and exit status 2; failures while running exit with 1 (a
:class:`CommandFailed` is one whose message says it all, such as "no CUDA device here").
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["BadArgument", "CommandFailed", "bad_argument", "npz_file", "output_file", "check_choices", "at_least", "positive_float", "nonnegative_float", "output_dir",
           "device", "seed", "csv_list", "require_cuda_device"]


class BadArgument(ValueError):
    """An argument the command cannot use; the message says what to give instead."""


class CommandFailed(RuntimeError):
    """The command cannot do what was asked here (exit status 1); the message says why and what to do."""


@contextlib.contextmanager
def bad_argument(option: str = "") -> Iterator[None]:
    """Report errors raised while interpreting an argument (a name, a file) as a bad ``option``."""
    try:
        yield
    except BadArgument:
        raise
    except (ValueError, LookupError, ArithmeticError, OSError) as exc:
        text = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        if isinstance(exc, OSError) and exc.strerror:
            text = f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
        raise BadArgument(f"{option}: {text}" if option else str(text)) from exc


@contextlib.contextmanager
def npz_file(option: str, path: str, what: str) -> Iterator[None]:
    """Errors while reading ``path``, an .npz of ``what``, as a bad ``option``: missing, or not such a file."""
    if not Path(path).is_file():
        raise BadArgument(f"{option} {path}: no such file")
    try:
        yield
    except (ValueError, KeyError, OSError, EOFError) as exc:
        raise BadArgument(f"{option} {path}: not {what} ({type(exc).__name__}: {exc})") from exc


def at_least(low: int) -> Callable[[str], int]:
    """An ``int`` type with a lower limit (``at_least(1)``: a positive count)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


#: the seeds every generator tcemu seeds takes (torch.manual_seed, numpy's default_rng): 0 to 2**64 - 1
SEED_LIMIT = 2**64


def seed(text: str) -> int:
    """A random seed: an integer from 0 to 2**64 - 1 (refused when the command line is parsed, exit status 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"a seed is an integer from 0 to 2**64 - 1, got {text}")
    return value


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive_float(text: str) -> float:
    value = _float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def nonnegative_float(text: str) -> float:
    value = _float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text}")
    return value


def csv_list(text: str) -> list[str]:
    """A non-empty comma-separated list (empty items dropped)."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise argparse.ArgumentTypeError("is empty: give at least one comma-separated name")
    return items


def output_dir(text: str) -> str:
    """A folder that can be written to (created if missing): checked before anything is computed."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} exists and is not a folder")
    created = []
    parent = path
    while not parent.exists():
        created.append(parent)
        parent = parent.parent
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot write to the folder {text}: {exc.strerror or exc}") from None
    finally:
        for folder in created:  # the command creates them when it writes; the check leaves nothing behind
            with contextlib.suppress(OSError):
                folder.rmdir()
    return text


def output_file(text: str) -> str:
    """A file path whose folder can be written to (checked before anything is computed)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; give a file name")
    output_dir(str(path.parent))
    return text


def check_choices(option: str, given, known) -> None:
    """Raise :class:`BadArgument` for names of ``given`` that are not in ``known``."""
    unknown = [g for g in given if g not in known]
    if unknown:
        raise BadArgument(f"{option}: unknown {', '.join(map(repr, unknown))}; choose from {', '.join(known)}")


def device(text: str) -> str:
    """A torch device that exists here: ``cpu``, ``cuda`` or ``cuda:N``."""
    import torch  # noqa: PLC0415 - only when the option is given

    try:
        dev = torch.device(text)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(f"unknown device {text!r}; use cpu, cuda or cuda:N") from None
    if dev.type not in ("cpu", "cuda"):
        raise argparse.ArgumentTypeError(f"device {text!r}: tcemu runs on cpu or cuda")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise argparse.ArgumentTypeError(f"device {text!r}: no CUDA device here (torch {torch.__version__} "
                                             "sees none); use --device cpu")
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise argparse.ArgumentTypeError(f"device {text!r}: there are {count} CUDA device(s), cuda:0 to "
                                             f"cuda:{count - 1}")
    return text


def require_cuda_device(command: str, alternative: str) -> None:
    """Raise :class:`CommandFailed` ("no CUDA device here ...") before a hardware command builds or runs anything.

    Asks the CUDA driver itself (the hardware commands use it directly, not through torch)."""
    import ctypes  # noqa: PLC0415

    hint = f"tcemu {command} runs on an NVIDIA GPU; {alternative}"
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        raise CommandFailed(f"no CUDA device here (no CUDA driver: libcuda.so.1 not found); {hint}") from None
    count = ctypes.c_int(0)
    rc = cuda.cuInit(0)
    if rc == 0:
        rc = cuda.cuDeviceGetCount(ctypes.byref(count))
    if rc != 0 or count.value == 0:
        why = f"the CUDA driver answered error {rc}" if rc else "the CUDA driver sees no device"
        raise CommandFailed(f"no CUDA device here ({why}); {hint}")
