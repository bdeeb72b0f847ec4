"""One result format for every benchmark and for tcemu's own commands: long rows with their provenance.

A result file is a CSV with one row per measured value and these columns (:data:`HEADER`)::

    benchmark, impl, method, case, metric, value, unit, gpu, driver, torch, triton, commit, date

- ``benchmark``: what measured it (the script, e.g. ``gemm``, ``md_step``, ``attention``).
- ``impl``: whose code ran (``tcemu``, ``cublas``, ``torch``, ``triton-builtin``, ``xla``, a potential's
  name).
- ``method``: the arithmetic (``fp32``, ``tf32x3``, ``bf16x6``, ...); empty where none applies.
- ``case``: what was measured, as ``key=value`` fields joined by ``;``, e.g.
  ``direction=fwd;M=8192;K=8192;N=8192`` (:func:`case` writes it, :func:`parse_case` reads it back).
- ``metric``, ``value``, ``unit``: one measured value, a number (floats written exactly, ``repr``) or, where
  ``unit`` is ``text``, a note such as the kernel configuration an autotuner chose.
- Provenance, the same on every row of one run: ``gpu`` (the device's name, or ``CPU: <model>``), ``driver``
  (NVIDIA's, empty on the CPU), ``torch``, ``triton`` (versions), ``commit`` (git commit of the measured code,
  ``-dirty`` when the tree had changes; for results converted from earlier formats the commit that stated or
  added them) and ``date`` (UTC, ISO 8601).

A benchmark builds :class:`Result` rows with :func:`measurement` and writes them with :func:`write_results`::

    from tcemu._results import Provenance, case, measurement, write_results

    UNITS = {"median_ms": "ms", "tflops": "TFLOP/s", "config": "text"}
    rows = measurement("gemm", "cublas", "sgemm", case(direction="fwd", M=8192, K=8192, N=8192),
                       {"median_ms": 21.46, "tflops": 51.24}, UNITS)
    write_results("out/gemm.csv", rows, Provenance.current())

:func:`from_wide` makes the rows from wide dicts (one per measured case, as a benchmark collects them).
:func:`read_results` returns the rows (every value as text); :func:`read_wide` one dict per measured case
(``benchmark``, ``impl``, ``method``, the case's fields, each metric's value, the provenance), the wide view
that tables and plots want. This module is kept small and stable: the benchmarks depend on it.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
import platform
import subprocess
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path

__all__ = ["COLUMNS", "HEADER", "PROVENANCE_COLUMNS", "Provenance", "Result", "case", "from_wide",
           "measurement", "parse_case", "read_results", "read_wide", "write_results"]

COLUMNS = ("benchmark", "impl", "method", "case", "metric", "value", "unit")
PROVENANCE_COLUMNS = ("gpu", "driver", "torch", "triton", "commit", "date")
HEADER = COLUMNS + PROVENANCE_COLUMNS
_SEP = ";"
_ROOT = Path(__file__).resolve().parents[2]  # the repository root of a source checkout


@dataclasses.dataclass(frozen=True)
class Provenance:
    """Where and with what one run measured: device, driver, torch, Triton, git commit, UTC date."""

    gpu: str
    driver: str
    torch: str
    triton: str
    commit: str
    date: str

    @classmethod
    def current(cls, device: str | None = None) -> Provenance:
        """This process's provenance; ``device="cpu"`` records the CPU even where a GPU is present."""
        from tcemu import _hw  # noqa: PLC0415 - imports torch

        v = _hw.versions()
        on_gpu = bool(v["gpu"]) and (device is None or str(device).startswith("cuda"))
        return cls(gpu=v["gpu"] if on_gpu else f"CPU: {_cpu_model()}",
                   driver=(v["driver"] or "") if on_gpu else "", torch=v["torch"] or "",
                   triton=v["triton"] or "", commit=_commit(),
                   date=datetime.now(timezone.utc).isoformat(timespec="seconds"))


@dataclasses.dataclass(frozen=True)
class Result:
    """One measured value; ``provenance`` only where it differs from the file's (rows merged from runs)."""

    benchmark: str
    impl: str
    method: str
    case: str
    metric: str
    value: str
    unit: str
    provenance: Provenance | None = None


def case(**fields: object) -> str:
    """``case(direction="fwd", M=8192)`` -> ``"direction=fwd;M=8192"`` (empty and None fields left out)."""
    parts = []
    for key, value in fields.items():
        if value is None or value == "":
            continue
        text = _text(value)
        if "=" in key or _SEP in key or _SEP in text:
            raise ValueError(f"case field {key}={text!r}: keys may not hold '=' or ';', values not ';'")
        parts.append(f"{key}={text}")
    return _SEP.join(parts)


def parse_case(text: str) -> dict[str, str]:
    """The fields of a :func:`case` string, in order (values as text)."""
    if not text:
        return {}
    fields = {}
    for part in text.split(_SEP):
        key, eq, value = part.partition("=")
        if not eq:
            raise ValueError(f"bad case field {part!r} in {text!r}: expected key=value")
        fields[key] = value
    return fields


def measurement(benchmark: str, impl: str, method: str, case: str, values: Mapping[str, object],
                units: Mapping[str, str]) -> list[Result]:
    """One :class:`Result` per metric of ``values`` that has a value (None and "" are left out)."""
    rows = []
    for metric, value in values.items():
        if value is None or value == "":
            continue
        if metric not in units:
            raise ValueError(f"no unit for metric {metric!r} of {benchmark}: add it to the benchmark's units")
        rows.append(Result(benchmark, impl, method or "", case, metric, _text(value), units[metric]))
    return rows


def from_wide(benchmark: str, rows: Iterable[Mapping[str, object]], case_fields: Iterable[str],
              units: Mapping[str, str], impl: str | None = None) -> list[Result]:
    """:class:`Result` rows from wide dicts, one per measured case (the inverse of :func:`read_wide`):
    ``impl`` and ``method`` from the dict (``impl`` may be given instead), the case from ``case_fields``, a
    metric from every key of ``units``. A key that is none of these is an error (a column would be lost)."""
    case_fields = tuple(case_fields)
    known = {"impl", "method", *case_fields, *units}
    out = []
    for row in rows:
        unknown = [k for k in row if k not in known]
        if unknown:
            raise ValueError(f"{benchmark}: no unit or case field for {', '.join(map(repr, unknown))}")
        who = row.get("impl") or impl
        if not who:
            raise ValueError(f"{benchmark}: a row without impl: {dict(row)}")
        out += measurement(benchmark, str(who), str(row.get("method") or ""),
                           case(**{k: row.get(k) for k in case_fields}),
                           {k: row[k] for k in units if k in row}, units)
    return out


def write_results(path: str | os.PathLike, results: Iterable[Result],
                  provenance: Provenance | None = None) -> Path:
    """Write ``results`` to the CSV ``path`` (replaced whole, atomically: a benchmark may rewrite it after
    every measurement); each row gets its own provenance or ``provenance``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(HEADER)
        for r in results:
            prov = r.provenance or provenance
            if prov is None:
                raise ValueError(f"no provenance for {r.benchmark} {r.metric}: "
                                 "pass provenance=Provenance.current()")
            writer.writerow([r.benchmark, r.impl, r.method, r.case, r.metric, r.value, r.unit,
                             *dataclasses.astuple(prov)])
    tmp.replace(path)
    return path


def read_results(path: str | os.PathLike) -> list[dict[str, str]]:
    """The rows of a result file, every column as text."""
    with Path(path).open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in HEADER if c not in (reader.fieldnames or ())]
        if missing:
            raise ValueError(f"{path} is not a result file (no {', '.join(missing)} column): write it with "
                             "tcemu._results.write_results")
        return list(reader)


def read_wide(source: str | os.PathLike | Iterable[Mapping[str, str]]) -> list[dict[str, str]]:
    """One dict per measured case, in file order: ``benchmark``, ``impl``, ``method``, the case's fields, each
    metric's value and the provenance columns (all text)."""
    rows = read_results(source) if isinstance(source, (str, os.PathLike)) else list(source)
    grouped: dict[tuple, dict[str, str]] = {}
    for r in rows:
        key = (r["benchmark"], r["impl"], r["method"], r["case"], *(r[c] for c in PROVENANCE_COLUMNS))
        out = grouped.get(key)
        if out is None:
            out = {"benchmark": r["benchmark"], "impl": r["impl"], "method": r["method"]}
            for field, value in (*parse_case(r["case"]).items(), *((c, r[c]) for c in PROVENANCE_COLUMNS)):
                if field in out:
                    raise ValueError(f"case field {field!r} of {r['case']!r} shadows a column")
                out[field] = value
            grouped[key] = out
        if r["metric"] in out:
            raise ValueError(f"metric {r['metric']!r} twice, or shadowing a case field, in {r['case']!r}")
        out[r["metric"]] = r["value"]
    return list(grouped.values())


def _text(value: object) -> str:
    """Numbers exactly (floats by ``repr``: they read back to the same bits), everything else by ``str``."""
    if hasattr(value, "item") and callable(value.item):  # numpy and torch scalars
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, float):
        return str(value)
    return "nan" if math.isnan(value) else repr(value)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _commit() -> str:
    """The measured code's commit: ``TCEMU_COMMIT``, else the ``COMMIT`` file a source snapshot carries (it
    names the snapshot's code even where the copy's git metadata is another commit's), else git (``-dirty``
    with local changes), else ``unknown``."""
    if os.environ.get("TCEMU_COMMIT"):
        return os.environ["TCEMU_COMMIT"]
    snapshot = _ROOT / "COMMIT"
    if snapshot.is_file() and snapshot.read_text().strip():
        return snapshot.read_text().strip()
    try:
        out = subprocess.run(["git", "-C", str(_ROOT), "describe", "--always", "--dirty", "--abbrev=7"],
                             capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        return out or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"
