"""tcemu._results: the long result format every benchmark writes (rows, provenance, round trip)."""

import csv
import math
import struct
from datetime import datetime

import pytest
import torch

from tcemu import _results
from tcemu._results import (HEADER, PROVENANCE_COLUMNS, Provenance, Result, case, from_wide, measurement,
                            parse_case, read_results, read_wide, write_results)

PROV = Provenance(gpu="NVIDIA H200", driver="580.159.04", torch="2.11.0+cu130", triton="3.6.0",
                  commit="c29e9ef", date="2026-12-01T10:00:00+00:00")
UNITS = {"median_ms": "ms", "tflops": "TFLOP/s", "config": "text", "same_bits": "bool", "calls": "count"}


def _gemm_rows():
    c1 = case(direction="fwd", M=8192, K=8192, N=8192)
    c2 = case(direction="bwd_input", M=604800, K=1024, N=256)
    return (measurement("gemm", "cublas", "sgemm", c1, {"median_ms": 21.46, "tflops": 51.24}, UNITS)
            + measurement("gemm", "tcemu", "tf32x3", c1, {"median_ms": 0.1 + 0.2, "tflops": float("nan"),
                                                            "config": "128x128x32w8s3m1pg first-call 1.2s",
                                                            "same_bits": True, "calls": 30}, UNITS)
            + measurement("gemm", "tcemu", "tf32x3", c2, {"median_ms": 3.5, "tflops": None, "config": ""},
                          UNITS))


def test_rows_are_long_with_the_provenance_on_every_row(tmp_path):
    path = write_results(tmp_path / "sub" / "gemm.csv", _gemm_rows(), PROV)
    with open(path, newline="") as fh:
        raw = list(csv.reader(fh))
    assert tuple(raw[0]) == HEADER
    assert HEADER[:7] == ("benchmark", "impl", "method", "case", "metric", "value", "unit")
    assert PROVENANCE_COLUMNS == ("gpu", "driver", "torch", "triton", "commit", "date")
    rows = read_results(path)
    assert len(rows) == 2 + 5 + 1  # None and "" are not values: left out
    assert all(r[c] == getattr(PROV, c) for r in rows for c in PROVENANCE_COLUMNS)
    assert [(r["impl"], r["method"], r["metric"], r["unit"]) for r in rows[:3]] == [
        ("cublas", "sgemm", "median_ms", "ms"), ("cublas", "sgemm", "tflops", "TFLOP/s"),
        ("tcemu", "tf32x3", "median_ms", "ms")]
    assert not list(tmp_path.rglob("*.tmp"))  # written through a temporary file, then replaced


def test_round_trip_keeps_every_value_exactly(tmp_path):
    path = write_results(tmp_path / "gemm.csv", _gemm_rows(), PROV)
    wide = read_wide(path)
    assert [(m["impl"], m["method"], m["direction"], m["M"]) for m in wide] == [
        ("cublas", "sgemm", "fwd", "8192"), ("tcemu", "tf32x3", "fwd", "8192"),
        ("tcemu", "tf32x3", "bwd_input", "604800")]
    tf = wide[1]
    bits = struct.pack("<d", float(tf["median_ms"]))
    assert bits == struct.pack("<d", 0.1 + 0.2)  # repr: the same double back
    assert math.isnan(float(tf["tflops"])) and tf["same_bits"] == "True" and tf["calls"] == "30"
    assert tf["config"] == "128x128x32w8s3m1pg first-call 1.2s" and tf["commit"] == "c29e9ef"
    assert "tflops" not in wide[2] and wide[2]["median_ms"] == "3.5"
    assert read_wide(read_results(path)) == wide  # rows or a path


def test_wide_rows_round_trip(tmp_path):
    """from_wide and read_wide are inverses: benchmarks collect wide dicts, tables and plots read them."""
    wide = [{"impl": "torch", "method": "fp32", "model": "pet-s", "n_atoms": 17280, "mode": "compile",
             "median_ms": 385.68561149998004, "note": "first call 5.5 s; skips 0"},
            {"method": "tf32x3", "model": "pet-s", "n_atoms": 17280, "mode": "graph", "round": 2,
             "median_ms": 265.3, "note": None}]
    units = {"median_ms": "ms", "note": "text"}
    rows = from_wide("md_step", wide, ("model", "n_atoms", "mode", "round"), units, impl="tcemu")
    back = read_wide(read_results(write_results(tmp_path / "w.csv", rows, PROV)))
    for got, want in zip(back, wide, strict=True):
        got = {k: v for k, v in got.items() if k not in ("benchmark", *PROVENANCE_COLUMNS)}
        assert got == {"impl": want.get("impl", "tcemu"),
                       **{k: str(v) for k, v in want.items() if v is not None and k != "impl"}}
    with pytest.raises(ValueError, match="no unit or case field for 'gflop'"):
        from_wide("md_step", [{"method": "fp32", "gflop": 1.0}], (), units, impl="torch")
    with pytest.raises(ValueError, match="without impl"):
        from_wide("md_step", [{"method": "fp32"}], (), units)


def test_case_fields_round_trip_in_order():
    text = case(variant="tgw exact", M=604800, split="split_a=2", skipped=None, empty="", ok=False)
    assert text == "variant=tgw exact;M=604800;split=split_a=2;ok=False"
    assert parse_case(text) == {"variant": "tgw exact", "M": "604800", "split": "split_a=2", "ok": "False"}
    assert list(parse_case(text)) == ["variant", "M", "split", "ok"]
    assert parse_case("") == {} and case() == ""
    with pytest.raises(ValueError, match="';'"):
        case(note="a;b")
    with pytest.raises(ValueError, match="key=value"):
        parse_case("M=1;oops")


def test_scalars_of_numpy_and_torch_are_written_as_numbers(tmp_path):
    import numpy as np

    rows = measurement("b", "tcemu", "", case(n=np.int64(3)), {"median_ms": np.float32(0.5),
                                                                  "tflops": torch.tensor(2.25)}, UNITS)
    path = write_results(tmp_path / "x.csv", rows, PROV)
    (m,) = read_wide(path)
    assert (m["n"], m["median_ms"], m["tflops"], m["method"]) == ("3", "0.5", "2.25", "")


def test_a_row_may_carry_its_own_provenance(tmp_path):
    other = Provenance(**{**PROV.__dict__, "commit": "13c910b"})
    rows = [Result("gemm_sweep", "tcemu", "tf32x3", "M=1", "ms", "1.0", "ms", provenance=other),
            Result("gemm_sweep", "tcemu", "tf32x3", "M=1", "ms", "2.0", "ms")]
    path = write_results(tmp_path / "s.csv", rows, PROV)
    assert [r["commit"] for r in read_results(path)] == ["13c910b", "c29e9ef"]
    assert len(read_wide(path)) == 2  # two runs: two measurements


def test_bad_input_gets_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no unit for metric 'gflop'.*add it"):
        measurement("gemm", "tcemu", "tf32x3", "", {"gflop": 1.0}, UNITS)
    with pytest.raises(ValueError, match="no provenance.*Provenance.current"):
        write_results(tmp_path / "p.csv", _gemm_rows())
    plain = tmp_path / "plain.csv"
    plain.write_text("impl,method,median_ms\ntcemu,tf32x3,1.0\n")
    with pytest.raises(ValueError, match="not a result file.*write_results"):
        read_results(plain)
    clash = [Result("b", "i", "m", "metric=1", "metric", "1", "ms")]
    with pytest.raises(ValueError, match="twice, or shadowing"):
        read_wide(read_results(write_results(tmp_path / "c.csv", clash, PROV)))


def test_current_provenance_names_this_machine(monkeypatch):
    prov = Provenance.current(device="cpu")
    assert prov.gpu.startswith("CPU: ") and prov.driver == "" and prov.torch == torch.__version__
    assert datetime.fromisoformat(prov.date).utcoffset().total_seconds() == 0
    assert prov.commit and prov.commit != "unknown"  # this is a git checkout
    monkeypatch.setenv("TCEMU_COMMIT", "abc1234")
    assert Provenance.current(device="cpu").commit == "abc1234"


def test_commit_of_a_source_snapshot(monkeypatch, tmp_path):
    """A snapshot's COMMIT file names its code (before git: a copy may carry another commit's metadata)."""
    monkeypatch.delenv("TCEMU_COMMIT", raising=False)
    monkeypatch.setattr(_results, "_ROOT", tmp_path)  # no git repository there
    assert _results._commit() == "unknown"
    (tmp_path / "COMMIT").write_text("42aea02\n")
    assert _results._commit() == "42aea02"
