"""The stored benchmark results: every path the docs cite exists, every stored CSV is a result file with its
provenance, and benchmarks/ holds the maintained, documented scripts only."""

import ast
import itertools
import re
from pathlib import Path

import pytest

from tcemu._results import read_results

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
#: where results are cited: the README, the docs (pages and JSON) and the results' own summaries and reports
CITING = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "docs").rglob("*.json")),
          *sorted(RESULTS.rglob("*.md"))]
RESULT_PATH = re.compile(r"benchmarks/results/(?:[A-Za-z0-9_.*/+-]|\{[A-Za-z0-9_.,]+\})*")
#: a script the docs name; one of a given commit (``of commit <sha>``, ``<sha>:benchmarks/...``) may be gone
SCRIPT = re.compile(r"(?<![0-9a-f]{7}:)benchmarks/([A-Za-z0-9_]+\.py)(`? of (?:that )?commit)?")
MAINTAINED = {"attention.py", "gemm.py", "gemm_ceiling.py", "gemm_threshold.py", "md_step.py",
              "md_step_host_profile.py", "mlip_full.py", "numerics_speed.py"}


def expand_braces(path: str) -> list[str]:
    """``a.{csv,png}`` -> ``a.csv``, ``a.png`` (every brace group, in order)."""
    parts = re.split(r"\{([^}]*)\}", path)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def cited_paths() -> list[tuple[str, str]]:
    out = []
    for doc in CITING:
        for m in RESULT_PATH.finditer(doc.read_text()):
            out.append((doc.relative_to(ROOT).as_posix(), m.group(0).rstrip(".")))
    return out


def test_the_docs_cite_results():
    cited = cited_paths()
    assert len(cited) > 100 and any(doc == "README.md" for doc, _ in cited)


def test_every_cited_result_path_exists():
    missing = []
    for doc, path in cited_paths():
        for p in expand_braces(path):
            found = list(ROOT.glob(p)) if "*" in p else [ROOT / p] if (ROOT / p).exists() else []
            if not found:
                missing.append(f"{doc}: {p}")
    assert not missing, "\n".join(missing)


def test_every_cited_benchmark_script_exists():
    """A script the docs name is in benchmarks/, unless they say which commit it is from (a removed probe)."""
    missing = []
    for doc in CITING:
        for m in SCRIPT.finditer(doc.read_text()):
            if not m.group(2) and not (ROOT / "benchmarks" / m.group(1)).is_file():
                missing.append(f"{doc.relative_to(ROOT)}: benchmarks/{m.group(1)}")
    assert not missing, "\n".join(missing)


def test_braces_expand_in_order():
    assert expand_braces("r/a.{csv,png}") == ["r/a.csv", "r/a.png"]
    assert expand_braces("r/{x,y}_{1,2}.csv") == ["r/x_1.csv", "r/x_2.csv", "r/y_1.csv", "r/y_2.csv"]
    assert expand_braces("r/a.csv") == ["r/a.csv"]


@pytest.mark.parametrize("path", sorted(p.relative_to(RESULTS).as_posix() for p in RESULTS.rglob("*.csv")
                                        if not p.name.startswith("ncu_")))
def test_stored_csv_is_a_result_file_with_provenance(path):
    rows = read_results(RESULTS / path)
    assert rows, path
    assert all(r["benchmark"] and r["impl"] and r["metric"] and r["unit"] for r in rows)
    assert all(r["gpu"] and r["commit"] and r["date"] for r in rows)
    machine = path.split("/")[0]
    assert machine in ("h200", "cpu")
    assert all(("H200" in r["gpu"]) == (machine == "h200") for r in rows), path


def test_benchmarks_are_the_maintained_scripts_each_documented():
    scripts = {p.name for p in (ROOT / "benchmarks").glob("*.py")}
    assert scripts == MAINTAINED
    for name in scripts:
        doc = ast.get_docstring(ast.parse((ROOT / "benchmarks" / name).read_text())) or ""
        assert len(doc) > 200 and f"benchmarks/{name}" in doc, f"{name}: say what it measures and how to run it"
        assert "tcemu._results" in doc or "results.csv" in doc, f"{name}: say what it writes"
