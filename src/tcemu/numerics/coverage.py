"""The coverage table: architecture x instruction x format, each preset's source and how it is validated.

Generated from the presets (:func:`tcemu.numerics.presets.list_presets`), so it cannot drift from them. Validation
status, strongest first:

- ``measured here``: an sm_90 case the probe and the 1e7-sample validation ran on an H100/H200
  (:data:`tcemu.numerics.hardware.cases.ALL_CASES`, docs/hardware/);
- ``public data``: the bundled hardware data of Khattak & Mikaitis (:mod:`tcemu.numerics.public_data`, re-fit
  bit for bit; ``tcemu numerics data``);
- ``literature``: the sources' models only (MMA-Sim, the toolbox, PTX), no hardware data.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CoverageRow", "coverage_table", "format_coverage"]

_STATUS_ORDER = ("measured here", "public data", "literature")


@dataclass(frozen=True)
class CoverageRow:
    """One (arch, instruction, input -> output) with its source tags and validation status."""

    arch: str
    instruction: str
    input_format: str
    output_format: str
    source: str
    status: str


def _measured_keys() -> set[tuple[str, str, str, str]]:
    from .hardware.cases import ALL_CASES

    probed = {(a, c.instruction, c.input_format, c.output_format) for c in ALL_CASES for a in ("h100", "h200")}
    # FP64 DMMA m8n8k4: python -m tcemu.numerics.hardware.dmma_check on the H100 (docs/hardware/h100-dmma.json)
    return probed | {(a, "mma.m8n8k4", "fp64", "fp64") for a in ("h100", "h200")}


def _public_keys() -> set[tuple[str, str, str, str]]:
    from .public_data import load_cases

    return {(c.arch, "mma.sync", c.input_format, c.output_format) for c in load_cases()}


def _source_tags(sources: str) -> str:
    """Short tags of a preset's own sources (its first citation; the shared F and rounding notes left out)."""
    own = sources.split(";")[0]
    tags = [t for t in ("MMA-Sim", "toolbox", "Fasi", "HPEC", "PTX", "cutlass#1986", "DeepGEMM") if t in own]
    if "refit" in own or "re-fit" in own:
        tags.append("refit")
    if "extrapolated" in sources:
        tags.append("extrapolated")
    if "wmma lowering" in sources:
        tags.append("nvcc SASS (wmma lowering)")
    return ", ".join(tags) or own.strip()[:40]


def coverage_table() -> list[CoverageRow]:
    """Every preset as a :class:`CoverageRow` (h200 folded into h100: the same preset)."""
    from .presets import get_preset, list_presets

    measured, public = _measured_keys(), _public_keys()
    rows = []
    for key in list_presets():
        if key[0] == "h200":
            continue
        p = get_preset(*key)
        if key in measured:
            status = "measured here"
        elif key in public or (key[0] == "h100" and ("h200",) + key[1:] in public):
            status = "public data"
        else:
            status = "literature"
        rows.append(CoverageRow(key[0], key[1], key[2], key[3], _source_tags(p.sources), status))
    return rows


def format_coverage(rows: list[CoverageRow] | None = None) -> str:
    """The table as aligned text, one line per preset, with a count per status."""
    rows = coverage_table() if rows is None else rows
    head = f"{'arch':6s} {'instruction':18s} {'input':20s} {'out':5s} {'validation':14s} source"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r.arch:6s} {r.instruction:18s} {r.input_format:20s} {r.output_format:5s} {r.status:14s} "
                     f"{r.source}")
    counts = ", ".join(f"{s}: {sum(r.status == s for r in rows)}" for s in _STATUS_ORDER)
    lines.append(f"\n{len(rows)} presets ({counts}); h200 = h100. measured here: the H100/H200 probe and "
                 "validation (docs/hardware/); public data: Khattak & Mikaitis's published measurements, re-fit "
                 "bit for bit; literature: no hardware data.")
    return "\n".join(lines)
