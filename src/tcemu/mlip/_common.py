"""Small helpers shared by the tasks: progress bars, method lists, CSV rows, coverage."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

#: Every emulation method, in the order tables show them.
ALL_METHODS: tuple[str, ...] = ("fp32", "tf32", "tf32x3", "bf16x3", "bf16x6", "bf16x9")

#: Columns of every long-format CSV that tcemu.mlip writes (one measurement per row).
CSV_COLUMNS = (
    "check",
    "potential",
    "system",
    "n_atoms",
    "method",
    "reference",
    "metric",
    "unit",
    "value",
    "x_name",
    "x_value",
    "repeat",
)


def row(**kw) -> dict:
    """One long-format row with every column present (missing ones empty)."""
    return {c: kw.get(c, "") for c in CSV_COLUMNS}


def with_reference(methods: Sequence[str]) -> list[str]:
    """``["fp64", "fp32", *methods]`` without duplicates: the reference runs first."""
    out = ["fp64", "fp32"]
    for m in methods:
        m = str(m).lower()
        if m not in out:
            out.append(m)
    return out


def progress(iterable: Iterable, desc: str, enabled: bool, total: int | None = None):
    """A tqdm progress bar on stderr, or the bare iterable when disabled or tqdm is missing."""
    if not enabled:
        return iterable
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover
        return iterable
    return tqdm(iterable, desc=desc, total=total, leave=False, dynamic_ncols=True)


def write_csv(rows: Iterable[dict], path: str | Path) -> Path:
    """Write long-format rows to ``path`` (columns :data:`CSV_COLUMNS`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow(r)
    return path


def read_csv(path: str | Path) -> list[dict]:
    """Read rows written by :func:`write_csv`."""
    with Path(path).open(newline="") as f:
        return list(csv.DictReader(f))


def system_name(atoms) -> str:
    """A short label for a structure: its ``info['name']`` or its chemical formula."""
    return str(atoms.info.get("name") or atoms.get_chemical_formula())


def coverage_of(calc) -> float:
    """The share of float32 contraction FLOPs its method emulated in a calculator's first calculation
    (:class:`~tcemu.mlip.models.PotentialCalculator`; NaN when unmeasured or when there were none)."""
    cov = getattr(calc, "coverage", None)
    return cov.fraction if cov is not None else math.nan


def coverage_rows(base: dict, coverage: dict[str, float]) -> list[dict]:
    """Long-format rows ``metric="coverage"`` (fraction of float32 contraction FLOPs emulated) per method."""
    return [row(**base, method=m, metric="coverage", unit="fraction emulated", value=v) for m, v in coverage.items()]
