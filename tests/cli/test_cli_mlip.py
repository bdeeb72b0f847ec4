"""`tcemu mlip ...`: subcommands write CSV and PNG; bad input is one clear line and exit code 2."""

import csv

import pytest

for _mod in ("ase", "metatrain", "matplotlib"):
    pytest.importorskip(_mod, reason=f"tcemu mlip needs the mlip extra ({_mod} missing)")

from tcemu.cli.main import main  # noqa: E402


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
            "pet-tiny",
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
    assert rc == 2  # no subcommand: a bad argument
    err = capsys.readouterr().err
    for sub in ("sp", "curve", "nve", "relax", "second-order", "report"):
        assert f"  {sub}" in err
    assert err.strip().endswith("give a subcommand: sp, curve, nve, relax, second-order or report")


def test_second_order_subcommand(tmp_path, capsys):
    rc = main(["mlip", "second-order", "--potential", "pet-tiny", "--properties", "elastic", "--size", "quick",
               "--methods", "tf32x3", "--out", str(tmp_path), "--no-progress"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "elastic (pt_fcc_4, threshold" in out and "tf32x3   largest error" in out
    rows = list(csv.DictReader((tmp_path / "mlip_second_order_pet-tiny.csv").open()))
    assert {r["x_value"] for r in rows if r["metric"] == "value"} >= {"C11", "C12", "C44"}
    assert (tmp_path / "elastic_pet-tiny_pt_fcc_4.png").stat().st_size > 0
    rc = main(["mlip", "second-order", "--potential", "pet-tiny", "--properties", "phonon", "--out", str(tmp_path)])
    assert rc == 2 and "--properties: unknown 'phonon'" in capsys.readouterr().err
    rc = main(["mlip", "second-order", "--potential", "ani1x", "--out", str(tmp_path)])
    assert rc == 2 and "ani1x does not know element(s) Pt" in capsys.readouterr().err


def _one_error_line(capsys, command: str) -> str:
    """Exactly one line on stderr, the error; nothing computed (nothing on stdout)."""
    out, err = capsys.readouterr()
    lines = [line for line in err.strip().splitlines() if "Warning" not in line and "warnings.warn" not in line]
    assert out == "" and len(lines) == 1 and lines[0].startswith(f"tcemu mlip {command}: error: "), (out, err)
    return lines[0]


SP = ["mlip", "sp", "--potential", "pet-tiny", "--system", "water_cluster_6", "--methods", "tf32x3", "--no-progress"]


@pytest.mark.parametrize(("argv", "message"), [
    (SP + ["--methods", ""], "argument --methods: is empty"),  # ran FP32 alone and exited 0
    (SP + ["--threads", "0"], "argument --threads: must be at least 1"),
    (SP + ["--device", "xpu"], "tcemu runs on cpu or cuda"),
    (["mlip", "curve", "--points", "2"], "argument --points: must be at least 3"),  # IndexError at 0
    (["mlip", "nve", "--ps", "0"], "argument --ps: must be positive"),  # ran nothing and exited 0
    (["mlip", "nve", "--timestep-fs", "0"], "argument --timestep-fs: must be positive"),  # ZeroDivisionError
    (["mlip", "nve", "--temperature", "-5"], "argument --temperature: must not be negative"),  # NaN velocities
    (["mlip", "relax", "--repeats", "0"], "argument --repeats: must be at least 1"),  # min() of nothing
    (["mlip", "relax", "--fmax", "0"], "argument --fmax: must be positive"),
    (["mlip", "relax", "--max-steps", "0"], "argument --max-steps: must be at least 1"),
    (["mlip", "report", "--checks", ""], "argument --checks: is empty"),
    (["mlip", "report", "--checks", "nosuch"], "--checks: unknown 'nosuch'; choose from single_point"),  # ran nothing, exit 0
    (["mlip", "report", "--curve-points", "1"], "argument --curve-points: must be at least 3"),
    (SP[:-3] + ["--compile", "--potential", "ani1x"], "--compile runs PET models under torch.compile"),
    (SP[:2] + ["--system", "water_cluster_0"], "--system water_cluster_0: the system has no atoms"),
])
def test_bad_arguments_exit_2_before_any_computation(tmp_path, capsys, argv, message):
    assert main(argv + ["--out", str(tmp_path / "out")]) == 2
    assert message in _one_error_line(capsys, argv[1])
    assert not (tmp_path / "out").exists()


def test_structure_files_that_cannot_be_read_are_bad_arguments(tmp_path, capsys):
    """An unknown element gave 'error: KeyError: 'Xx'', a binary file a UnicodeDecodeError."""
    unknown = tmp_path / "xx.xyz"
    unknown.write_text("2\n\nH 0 0 0\nXx 1 0 0\n")
    binary = tmp_path / "bin.xyz"
    binary.write_bytes(bytes(range(128, 256)) * 3)
    for path, message in ((unknown, "unknown chemical element 'Xx' in the file"),
                          (binary, "not a text structure file")):
        assert main(SP + ["--system", str(path), "--out", str(tmp_path)]) == 2
        assert f"--system {path}: {message}" in _one_error_line(capsys, "sp")
    assert main(SP + ["--potential", str(binary), "--out", str(tmp_path)]) == 2
    assert "cannot load it as a PET checkpoint" in _one_error_line(capsys, "sp")


def test_unwritable_out_is_refused_before_the_computation(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(SP + ["--out", str(blocker / "out")]) == 2
    assert "argument --out: cannot write to the folder" in _one_error_line(capsys, "sp")


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a CUDA device is present")
def test_cuda_without_a_device_is_a_bad_argument(tmp_path, capsys):
    """--device cuda without CUDA raised AssertionError ('Torch not compiled with CUDA enabled')."""
    assert main(SP + ["--device", "cuda", "--out", str(tmp_path)]) == 2
    assert "argument --device: device 'cuda': no CUDA device here" in _one_error_line(capsys, "sp")


def test_curve_grid_study_is_the_published_grid():
    import argparse

    import numpy as np

    from tcemu.cli.mlip import _heights
    from tcemu.mlip.tasks.energy_curve import STUDY_HEIGHTS_A

    h = _heights(argparse.Namespace(grid="study", points=5))
    assert h == STUDY_HEIGHTS_A and len(h) == 60 and (h[0], h[-1]) == (1.2, 6.0)
    assert np.diff(h) == pytest.approx(np.full(59, 0.0814), abs=1e-4)  # the study's "0.081 A steps"
    assert len(_heights(argparse.Namespace(grid=None, points=5))) == 5
