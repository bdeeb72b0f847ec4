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
#: where results are cited: the README, the docs (pages and JSON), the results' own summaries and reports, and
#: the benchmarks' docstrings (where their stored runs are)
CITING = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
          *sorted((ROOT / "docs").rglob("*.json")), *sorted(RESULTS.rglob("*.md")),
          *sorted((ROOT / "benchmarks").glob("*.py"))]
RESULT_PATH = re.compile(r"benchmarks/results/(?:[A-Za-z0-9_.*/+-]|\{[A-Za-z0-9_.,]+\})*")
#: a script the docs name; one of a given commit (``of commit <sha>``, ``<sha>:benchmarks/...``) may be gone
SCRIPT = re.compile(r"(?<![0-9a-f]{7}:)benchmarks/([A-Za-z0-9_]+\.py)(`? of (?:that )?commit)?")
MAINTAINED = {"attention.py", "autoload_cost.py", "equivariant_step.py", "gemm.py", "gemm_ceiling.py",
              "gemm_decision.py", "gemm_range_cost.py", "gemm_register_a.py", "gemm_small_m.py", "gemm_threshold.py",
              "gemm_tma_store.py",
              "gemm_fused_split.py", "md_batched.py",
              "linear_eager.py",
              "md_guards.py", "md_run.py", "nve_long.py", "md_step.py", "md_step_host_profile.py", "mlip_full.py",
              "mmasim_diff.py", "numerics_speed.py", "mmasim_diff_schemes.py", "toolbox_diff.py",
              "pytest_report.py"}


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
    assert machine in ("h200", "h100", "cpu")
    assert all(("H200" in r["gpu"]) == (machine == "h200") for r in rows), path
    assert all(("H100" in r["gpu"]) == (machine == "h100") for r in rows), path


def test_benchmarks_are_the_maintained_scripts_each_documented():
    """A top-level name is a maintained script; a ``_name.py`` is a private helper of the scripts that import it,
    documented, and imported by at least one of them (no helper outlives its scripts)."""
    files = {p.name for p in (ROOT / "benchmarks").glob("*.py")}
    scripts = {name for name in files if not name.startswith("_")}
    assert scripts == MAINTAINED
    for name in scripts:
        doc = ast.get_docstring(ast.parse((ROOT / "benchmarks" / name).read_text())) or ""
        assert len(doc) > 200 and f"benchmarks/{name}" in doc, f"{name}: say what it measures, how to run it"
        assert "tcemu._results" in doc or "results.csv" in doc, f"{name}: say what it writes"
    imported = set()
    for name in scripts:
        for node in ast.walk(ast.parse((ROOT / "benchmarks" / name).read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
    for name in files - scripts:
        doc = ast.get_docstring(ast.parse((ROOT / "benchmarks" / name).read_text())) or ""
        assert len(doc) > 80 and "benchmarks/" in doc, f"{name}: say which scripts it serves and what it holds"
        assert name.removesuffix(".py") in imported, f"{name}: no maintained script imports it"


def _bench(name):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_mlip_full_results_keep_the_suites_columns(tmp_path):
    """mlip_full.py's results.csv (and the stored MLIP files): a suite row's potential is its impl, its check,
    system, atoms, reference, x value and repeat its case; a verdict's check splits into impl and case."""
    from tcemu._results import Provenance, read_wide, write_results

    mlip_full = _bench("mlip_full")
    rows = [dict(check="energy_curve", potential="pet-s", system="pt111_co_38", n_atoms=38, method="fp64",
                 reference="", metric="energy", unit="eV", value=66.52694585081582, x_name="height_A",
                 x_value=1.2, repeat=""),
            dict(check="relax", potential="chgnet", system="cantor_539", n_atoms=539, method="fp32",
                 reference="fire2", metric="steps", unit="steps", value=135, x_name="", x_value="", repeat=0)]
    verdicts = [dict(method="bf16x3", check="single_point:energy_abs_err[chgnet/water_192]", value="0.000376",
                     threshold="0.000183", verdict="fail")]
    res = mlip_full.harness_results(rows) + mlip_full.verdict_results(verdicts)
    assert [(r.impl, r.case, r.metric, r.unit) for r in res] == [
        ("pet-s", "check=energy_curve;system=pt111_co_38;n_atoms=38;height_A=1.2", "energy", "eV"),
        ("chgnet", "check=relax;system=cantor_539;n_atoms=539;reference=fire2;repeat=0", "steps", "steps"),
        ("chgnet", "check=single_point;system=water_192;criterion=energy_abs_err", "measured", "eV"),
        ("chgnet", "check=single_point;system=water_192;criterion=energy_abs_err", "threshold", "eV"),
        ("chgnet", "check=single_point;system=water_192;criterion=energy_abs_err", "verdict", "text")]
    prov = Provenance("NVIDIA H200", "580.159.04", "2.11.0+cu130", "3.6.0", "c29e9ef",
                      "2026-12-01T00:00:00+00:00")
    wide = read_wide(write_results(tmp_path / "r.csv", res, prov))
    assert wide[0]["energy"] == "66.52694585081582" and wide[1]["steps"] == "135"
    assert (wide[2]["measured"], wide[2]["threshold"], wide[2]["verdict"]) == ("0.000376", "0.000183", "fail")


def test_mlip_full_knows_the_unit_of_every_criterion():
    """verdicts.csv carries no unit: mlip_full.py's table gives each criterion of tcemu.mlip.criteria its unit, so
    a new criterion there must be added here too (else writing a suite's results fails)."""
    from tcemu.mlip import criteria

    text = Path(criteria.__file__).read_text()
    named = set(re.findall(r':([a-z0-9_]+)\[\{tag\}\]', text))
    assert {"energy_dev_vs_fp64", "not_emulated", "d2_rms", "steps_median"} <= named
    missing = named - set(_bench("mlip_full").CRITERION_UNITS)
    assert not missing, missing


def test_ceiling_timings_name_their_implementation():
    ceiling = _bench("gemm_ceiling")
    assert ceiling.column_impl("sgemm_ms") == ("cublas", "sgemm")
    assert ceiling.column_impl("emu_bf16x6_ms") == ("tcemu", "bf16x6")
    assert ceiling.column_impl("split_a_tf32x3_ms") == ("tcemu", "tf32x3")
    assert ceiling.column_impl("tf32_k3_tn_ms") == ("cublas", "tf32")
    assert ceiling.column_impl("bf16f32_k6_ms") == ("cublas", "bf16")
    with pytest.raises(ValueError, match="unknown timing column"):
        ceiling.column_impl("fp8_k1_ms")
    rows = ceiling.record_results({"round": 0, "direction": "fwd", "M": 8, "K": 16, "N": 4, "sgemm_ms": 1.5,
                                   "emu_tf32x3_ms": 0.75})
    assert [(r.impl, r.method, r.case, r.metric, r.value) for r in rows] == [
        ("cublas", "sgemm", "round=0;direction=fwd;M=8;K=16;N=4", "sgemm_ms", "1.5"),
        ("tcemu", "tf32x3", "round=0;direction=fwd;M=8;K=16;N=4", "emu_tf32x3_ms", "0.75")]
