"""benchmarks/mmasim_diff.py without MMA-Sim: the case-to-preset map, the explanation rules and the consolidated
summary (outputs compared apart from dot products generated, seeds added, unexplained classes counted)."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT / "benchmarks"))

md = pytest.importorskip("mmasim_diff")
from _mmasim_report import explain  # noqa: E402
from _mmasim_summary import summarize  # noqa: E402


def test_m8n8k4_maps_to_each_architectures_shape():
    turing = md.Case("mma", "Turing", "m8n8k4.f32.f16.f16.f32", 8, 8, 4, "f16", "f16", "f32", "f32")
    volta = md.Case("mma", "Volta", "m8n8k4.f32.f16.f16.f32", 8, 8, 4, "f16", "f16", "f32", "f32")
    assert md.tcemu_key(turing) == ("turing", "mma.sync.m8n8k4", "fp16", "fp32")
    assert md.tcemu_key(volta) == ("v100", "mma.sync.m8n8k4", "fp16", "fp32")
    assert md.resolve(turing, "mmasim")[0].k_instr == 4


def test_explanations():
    assert explain("CDNA3/mfma.f32_16x16x16_f16", "measured", "special: NaN bits: NaN bits differ")[0] == "NaN bits"
    assert explain("Hopper/mma.m16n8k8.f64.f64.f64.f64", "measured", "special: NaN order: NaN bits differ")
    assert explain("Hopper/mma.m16n8k8.f64.f64.f64.f64", "mmasim", "special: NaN bits differ") is None
    assert explain("CDNA3/mfma.f32_16x16x16_f16", "mmasim", "special: NaN bits differ") is None
    e2m1 = "RTX Blackwell/mma.m16n8k32.f32.e2m1.e5m2.f32"
    assert explain(e2m1, "mmasim", "random: sign differs")[0] == "n8k32. and e2m1"
    k64 = "Blackwell/tcgen05mma_block_scale.m128n8k64.block32.f32.e2m1.e2m1.ue8m0"  # block32 is not K = 32
    assert explain(k64, "measured", "cancel: zero-factor rule: 1 ulp")[0] == "zero-factor rule"
    assert explain(k64, "mmasim", "random: sign differs") is None


def _csv(path: Path, rows: list[tuple[str, str, str, str]], date: str) -> str:
    head = "benchmark,impl,method,case,metric,value,unit,gpu,driver,torch,triton,commit,date\n"
    body = "".join(f"mmasim_diff,tcemu,{m},{c},{k},{v},x,CPU: test,,2,3,abc,{date}\n" for m, c, k, v in rows)
    path.write_text(head + body)
    return str(path)


def test_summary_adds_seeds_and_counts_unexplained(tmp_path):
    case = "mmasim=Hopper/mma.m8n8k4.f64.f64.f64.f64;preset=h100 mma.sync fp64 fp64"
    old = [(f"variant={v}", case, k, n) for v in ("mmasim", "measured") for k, n in
           (("samples", 64), ("agree", 60 if v == "measured" else 63), ("mmasim_errors", 1),
            ("classes", "special: NaN order: NaN bits differ: 4" if v == "measured" else "special: NaN bits differ: 1"))]
    new = [(f"variant={v}", case + ";seed=1", k, n) for v in ("mmasim", "measured") for k, n in
           (("generated", 128), ("compared", 128), ("agree", 128), ("mmasim_errors", 0), ("classes", ""))]
    paths = [_csv(tmp_path / "a.csv", old, "2026-01-01T00:00:00+00:00"),
             _csv(tmp_path / "b.csv", new, "2026-01-02T00:00:00+00:00")]
    counts = summarize(paths, str(tmp_path / "s.md"))
    text = (tmp_path / "s.md").read_text()
    assert counts["unexplained"] == 1 and counts["explained"] == 4  # mmasim's NaN class has no rule
    assert "| Hopper/mma.m8n8k4.f64.f64.f64.f64 | a + b (seed 1) | 256 | 192 | 191 | 188 | 1 |" in text
