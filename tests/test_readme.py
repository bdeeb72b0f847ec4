"""README.md's Python examples run as written; README, docs and source speak of the project as it is now and
cite its own pages.

The ```python blocks of README.md are executed in order, in one namespace (a later block may use what an
earlier one defined, as a reader running them one after the other would), on the CPU.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
#: development history has no place in the pages: git keeps it
HISTORY = re.compile(r"session [0-9]|\brun [0-9]+[a-z]?\b|machine [a-e]\b|\b(?:of|in) commit [0-9a-f]{7}\b",
                     re.IGNORECASE)


def python_blocks(text: str) -> list[str]:
    """The bodies of the fenced ```python blocks of a Markdown text, in order."""
    return [m.group(1) for m in PYTHON_BLOCK.finditer(text)]


def test_python_blocks_are_found():
    text = "a\n```python\nx = 1\n```\n```\nnot python\n```\n```python\ny = x\n```\n"
    assert python_blocks(text) == ["x = 1\n", "y = x\n"]


def test_readme_python_blocks_run_in_order(capsys):
    blocks = python_blocks(README.read_text())
    assert len(blocks) >= 4, "the quick start has lost its examples"
    namespace: dict = {"__name__": "__readme__"}
    for i, block in enumerate(blocks, 1):
        try:
            exec(compile(block, f"README.md python block {i}", "exec"), namespace)  # noqa: S102
        except Exception as exc:  # noqa: BLE001 (any error; the message names the block)
            pytest.fail(f"README.md python block {i} ({block.splitlines()[0]!r}) failed: "
                        f"{type(exc).__name__}: {exc}")


def test_a_broken_block_fails():
    namespace: dict = {}
    with pytest.raises(NameError):
        for block in python_blocks("```python\nmodel = tcemu_not_defined\n```\n"):
            exec(block, namespace)  # noqa: S102


PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
#: documents outside the repository that the project once cited; it cites its own pages instead
OUTSIDE_DOCS = re.compile(r"(?:NUMERICS|EMULATION|MLIP|STYLE)\.md|shared/(?:docs)")
#: a cited section: ``docs/page.md, "Heading"`` (optionally with backticks and a line break between)
SECTION_CITATION = re.compile(r"((?:docs/[\w/]+|README)\.md)`?,?\s+\"([^\"]+)\"")


@pytest.mark.parametrize("page", [p.relative_to(ROOT).as_posix() for p in PAGES])
def test_no_development_history(page):
    hits = [line for line in (ROOT / page).read_text().splitlines() if HISTORY.search(line)]
    assert not hits, f"{page}: " + "\n".join(hits)


def test_no_development_history_in_the_source():
    """The code, the benchmarks and the write-ups of stored results speak of themselves as they are."""
    files = [*sorted((ROOT / "src").rglob("*.py")), *sorted((ROOT / "benchmarks").glob("*.py")),
             *sorted((ROOT / "benchmarks" / "results").rglob("*.md"))]
    hits = [f"{p.relative_to(ROOT)}: {line.strip()}" for p in files
            for line in p.read_text().splitlines() if HISTORY.search(line)]
    assert not hits, "\n".join(hits)


def test_citations_stay_inside_the_repository():
    code = [p for d in ("src", "tests", "benchmarks") for p in sorted((ROOT / d).rglob("*.py"))]
    files = [*PAGES, *code]
    hits = [f"{p.relative_to(ROOT)}: {line.strip()}" for p in dict.fromkeys(files) if p != Path(__file__)
            for line in p.read_text().splitlines() if OUTSIDE_DOCS.search(line)]
    assert not hits, "\n".join(hits)


def test_the_guards_match_what_they_guard():
    assert HISTORY.search("as in session 11") and HISTORY.search("run 10c") and HISTORY.search("machine d")
    assert HISTORY.search("the probe script of commit c29e9ef") and not HISTORY.search("the commit of its rows")
    assert not HISTORY.search("the runs of 2 rounds") and not HISTORY.search("machine learning")
    assert OUTSIDE_DOCS.search("see NUMERICS" + ".md §3") and not OUTSIDE_DOCS.search("docs/numerics.md")
    assert not OUTSIDE_DOCS.search("the MLIP harness") and OUTSIDE_DOCS.search("../shared" + "/docs/x")
    cited = SECTION_CITATION.search('(docs/numerics.md, "What Tensor\n  Cores do", item 9)')
    assert cited and cited.groups() == ("docs/numerics.md", "What Tensor\n  Cores do")



def test_cited_sections_exist():
    """Every ``docs/page.md, "Section"`` that code, tests and pages cite names a heading of that page."""
    code = [p for d in ("src", "tests", "benchmarks") for p in sorted((ROOT / d).rglob("*.py"))]
    missing = []
    for p in [*PAGES, *code]:
        for m in SECTION_CITATION.finditer(p.read_text() if p != Path(__file__) else ""):
            page = ROOT / m.group(1)
            if not page.is_file():
                missing.append(f"{p.relative_to(ROOT)}: {m.group(1)} does not exist")
                continue
            lines = page.read_text().splitlines()
            headings = [line.lstrip("#").strip() for line in lines if line.startswith("#")]
            section = " ".join(m.group(2).split())  # a citation may wrap across lines
            if not any(section in h for h in headings):
                missing.append(f"{p.relative_to(ROOT)}: {m.group(1)}, {section!r}")
    assert not missing, "\n".join(missing)
