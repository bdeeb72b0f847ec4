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

__all__ = ["SOURCE_TAGS", "CoverageRow", "coverage_table", "format_coverage", "source_tags"]

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


#: source tags, in the order shown (presets.py and presets_blackwell.py name them)
SOURCE_TAGS = ("MMA-Sim", "toolbox", "Fasi", "HPEC", "PTX", "cutlass#1986", "DeepGEMM")


def _shared_notes() -> tuple[str, ...]:
    """The notes every preset of a table carries (F, rounding, disputed floors): none is a preset's own."""
    from .presets import _F_SRC, _LOWP_FLOOR_SRC, _MEASURED_SRC, _RND_SRC
    from .presets_blackwell import _LIT, _RND

    return _F_SRC, _RND_SRC, _MEASURED_SRC, _LOWP_FLOOR_SRC, _RND, _LIT


def source_tags(sources: str) -> str:
    """Short tags of a preset's own sources (the shared F, rounding and floor notes left out): the sources
    named (:data:`SOURCE_TAGS`), ``refit`` where the public data were re-fit, ``extrapolated`` where no source
    models the case itself, and the compiler's output where WMMA's lowering was read from it."""
    own = sources
    for note in _shared_notes():
        own = own.replace(note, "")
    tags = [t for t in SOURCE_TAGS if t in own]
    if "refit" in own or "re-fit" in own:
        tags.append("refit")
    if "extrapolated" in own:
        tags.append("extrapolated")
    if "wmma lowering: nvcc" in own:
        tags.append("nvcc SASS (wmma lowering)")
    if not tags:
        raise ValueError(f"tcemu: no source tag in {sources[:80]!r}: name a source of SOURCE_TAGS")
    return ", ".join(tags)


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
        rows.append(CoverageRow(key[0], key[1], key[2], key[3], source_tags(p.sources), status))
    return rows


def format_coverage(rows: list[CoverageRow] | None = None) -> str:
    """The table as aligned text, one line per preset (columns as wide as their longest entry), with a count
    per status."""
    rows = coverage_table() if rows is None else rows
    names = ("arch", "instruction", "input", "out", "validation")
    cols = [[r.arch, r.instruction, r.input_format, r.output_format, r.status] for r in rows]
    widths = [max([len(n)] + [len(c[i]) for c in cols]) for i, n in enumerate(names)]

    def line(cells: list[str], last: str) -> str:
        return " ".join(f"{c:{w}s}" for c, w in zip(cells, widths)) + " " + last

    head = line(list(names), "source")
    lines = [head, "-" * len(head)] + [line(c, r.source) for c, r in zip(cols, rows)]
    counts = ", ".join(f"{s}: {sum(r.status == s for r in rows)}" for s in _STATUS_ORDER)
    lines.append(f"\n{len(rows)} presets ({counts}); h200 = h100. measured here: the H100/H200 probe and "
                 "validation (docs/hardware/); public data: Khattak & Mikaitis's published measurements, re-fit "
                 "bit for bit; literature: no hardware data.")
    return "\n".join(lines)
