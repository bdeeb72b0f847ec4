"""docs/numerics.md's coverage table against the preset registry (``tcemu numerics coverage``): each row names the
presets it covers in its last column (``arch instruction input output``, each a comma-separated list of
shell-style patterns), its validation cell lists exactly their statuses, and every preset is in some row."""

from fnmatch import fnmatchcase
from pathlib import Path

import pytest

from tcemu.numerics.coverage import coverage_table

DOC = Path(__file__).resolve().parents[2] / "docs" / "numerics.md"
STATUSES = ("measured here", "public data", "literature")


def doc_rows() -> list[dict[str, str]]:
    """The rows of the table in the "Coverage" section, as {column header: cell}."""
    section = DOC.read_text().split("\n## Coverage\n", 1)[1].split("\n## ", 1)[0]
    lines = [line.strip() for line in section.splitlines() if line.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [dict(zip(head, (c.strip() for c in line.strip("|").split("|")))) for line in lines[1:]]
    assert all(len(r) == len(head) for r in rows)
    return [r for r in rows if not set(r["presets"]) <= set("-")]


def selected(selector: str):
    """The coverage rows a selector names."""
    fields = [f.split(",") for f in selector.strip("`").split()]
    assert len(fields) == 4, selector
    return [r for r in coverage_table()
            if all(any(fnmatchcase(v, p) for p in pats)
                   for v, pats in zip((r.arch, r.instruction, r.input_format, r.output_format), fields))]


ROWS = doc_rows()


def test_the_table_is_there():
    assert len(ROWS) >= 15 and {"tcemu", "MMA-Sim", "toolbox", "validation", "presets"} <= set(ROWS[0])


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["presets"].strip("`"))
def test_row_lists_the_statuses_of_its_presets(row):
    sel = selected(row["presets"])
    assert sel, f"{row['presets']} selects no preset"
    assert {r.status for r in sel} == {s for s in STATUSES if s in row["validation"]}, row["validation"]
    assert not row["tcemu"].lstrip("*").startswith("no"), "a row with presets says tcemu has none"
    assert all(row[c] not in ("", "-") for c in row), "an empty cell"


def test_every_preset_is_in_a_row():
    keys = {(r.arch, r.instruction, r.input_format, r.output_format) for row in ROWS for r in selected(row["presets"])}
    missing = [r for r in coverage_table() if (r.arch, r.instruction, r.input_format, r.output_format) not in keys]
    assert not missing, missing[:5]
