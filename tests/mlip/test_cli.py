"""`tcemu mlip ...`: subcommands write CSV and PNG; bad input is one clear line and exit code 2."""

import csv

from tcemu.cli.main import main


def test_sp_subcommand(tmp_path, capsys):
    rc = main(
        [
            "mlip",
            "sp",
            "--potential",
            "pet-tiny",
            "--system",
            "water_cluster_6",
            "--methods",
            "tf32x3",
            "--out",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "tf32x3" in out
    csvs = list(tmp_path.glob("mlip_single_point_*.csv"))
    assert len(csvs) == 1 and list(tmp_path.glob("*.png"))
    with csvs[0].open() as f:
        assert any(r["metric"] == "force_mean_err" for r in csv.DictReader(f))


def test_relax_subcommand_with_ase_fire2(tmp_path, capsys):
    from ase.io import write

    from tcemu.mlip.systems import water_cluster

    path = tmp_path / "w2.xyz"
    write(path, water_cluster(2))
    rc = main(
        [
            "mlip",
            "relax",
            "--potential",
            "ani1x",
            "--system",
            str(path),
            "--methods",
            "tf32x3",
            "--repeats",
            "1",
            "--max-steps",
            "10",
            "--optimizer",
            "ase-fire2",
            "--out",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert rc == 0
    assert "steps [10]" in capsys.readouterr().out


def test_bad_inputs_are_clear(tmp_path, capsys):
    rc = main(
        [
            "mlip",
            "sp",
            "--potential",
            "ani1x",
            "--system",
            "pt111_co",
            "--out",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert rc == 2
    assert "ani1x does not know element(s) Pt" in capsys.readouterr().err
    rc = main(["mlip", "sp", "--potential", str(tmp_path / "missing.ckpt"), "--out", str(tmp_path)])
    assert rc == 2
    assert "missing.ckpt' not found" in capsys.readouterr().err
    rc = main(["mlip", "sp", "--methods", "fp16", "--out", str(tmp_path)])
    assert rc == 2 and "unknown method 'fp16'" in capsys.readouterr().err


def test_help_lists_subcommands(capsys):
    rc = main(["mlip"])
    assert rc == 1
    out = capsys.readouterr().out
    for sub in ("sp", "curve", "nve", "relax", "report"):
        assert f"  {sub}" in out
