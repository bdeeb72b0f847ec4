"""The tcemu command: info and accuracy on the CPU."""

import csv

import pytest

from tcemu.cli.main import main


def test_info_lists_every_method_and_says_why_triton_is_not_used(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    for name in ("fp32", "tf32", "tf32x3", "bf16x3", "bf16x6", "bf16x9"):
        assert f"\n{name} " in out
    assert "torch" in out and "device" in out


def test_accuracy_writes_csv_with_measured_errors(tmp_path, capsys):
    rc = main(["accuracy", "--shapes", "16x64x8,16x512x8", "--distributions", "normal,wide",
               "--methods", "tf32,tf32x3,bf16x6", "--out", str(tmp_path), "--markdown"])
    assert rc == 0
    rows = list(csv.DictReader(open(tmp_path / "accuracy.csv")))
    assert len(rows) == 2 * 2 * 4  # fp32 is always added as the baseline
    by = {(r["method"], r["K"], r["distribution"]): float(r["err_norm"]) for r in rows}
    assert by[("tf32", "512", "normal")] > 100 * by[("tf32x3", "512", "normal")]
    for r in rows:
        if r["method"] != "tf32":
            assert float(r["err_norm"]) <= float(r["bound_norm"])
    assert "| tf32x3 |" in capsys.readouterr().out


def test_bad_arguments_give_a_one_line_error(capsys):
    assert main(["accuracy", "--shapes", "16by8"]) == 2
    assert "MxKxN" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["no-such-command"])
