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


def _one_error_line(capsys, start: str) -> str:
    """stderr holds exactly one line, the error, and stdout nothing (nothing was computed)."""
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and lines[0].startswith(start + ": error: "), (out, err)
    return lines[0]


def test_bad_arguments_give_a_one_line_error(capsys):
    assert main(["accuracy", "--shapes", "16by8"]) == 2
    assert "MxKxN" in _one_error_line(capsys, "tcemu accuracy")
    assert main(["no-such-command"]) == 2
    assert "invalid choice: 'no-such-command'" in _one_error_line(capsys, "tcemu")
    assert main([]) == 2  # no command: the help, on stderr
    assert "COMMAND" in capsys.readouterr().err
    assert main(["--help"]) == 0


@pytest.mark.parametrize(("argv", "message"), [
    (["accuracy", "--methods", ""], "argument --methods: is empty"),  # ran every method and exited 0
    (["accuracy", "--distributions", ""], "argument --distributions: is empty"),
    (["accuracy", "--shapes", "8x8x8", "--distributions", "bogus"], "unknown distribution 'bogus'"),
    (["accuracy", "--shapes", "8x8x8", "--methods", "tf33x3"], "unknown method 'tf33x3'"),
    (["accuracy", "--shapes", "8x8x8", "--device", "bogus"], "unknown device 'bogus'"),
    (["accuracy", "--shapes", "8x8x8", "--device", "xpu"], "tcemu runs on cpu or cuda"),
    (["info", "--device", "bogus"], "unknown device 'bogus'"),
    (["validate", "--samples", "0"], "argument --samples: must be at least 1"),
    (["validate", "--gpus", "0"], "argument --gpus: must be at least 1"),
    (["validate", "--workers", "-1"], "argument --workers: must be at least 0"),
    (["validate", "--cases", "nosuch"], "--cases: unknown case 'nosuch'"),
    (["validate", "--families", "nosuch"], "--families: unknown 'nosuch'; choose from normal"),
    (["validate", "--replay", "missing.npz"], "--replay missing.npz: no such file"),
    (["probe", "--cases", "nosuch"], "--cases: unknown case 'nosuch'"),
    (["probe", "--from-raw", "missing.npz"], "--from-raw missing.npz: no such file"),
])
def test_bad_arguments_exit_2_with_one_line(capsys, tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert message in _one_error_line(capsys, "tcemu " + argv[0])


def test_a_file_that_is_not_an_npz_is_a_bad_argument(capsys, tmp_path):
    junk = tmp_path / "junk.npz"
    junk.write_bytes(bytes(range(256)) * 4)
    for argv in (["validate", "--replay", str(junk)], ["probe", "--from-raw", str(junk), "--out", str(tmp_path)]):
        assert main(argv) == 2
        assert f"{junk}: not " in _one_error_line(capsys, "tcemu " + argv[0])


def test_no_cuda_device_is_said_so_before_anything_is_built(capsys, tmp_path):
    """Without a GPU, probe and validate said 'CUDA driver version is insufficient' after building their CUDA
    library (about 12 s); now one line says there is no device, before anything runs (exit status 1)."""
    from tcemu.cli.args import CommandFailed, require_cuda_device

    try:
        require_cuda_device("probe", "")
    except CommandFailed:
        pass
    else:
        pytest.skip("a CUDA device is present")
    for argv in (["probe", "--out", str(tmp_path)], ["validate", "--smoke", "--out", str(tmp_path)]):
        assert main(argv) == 1
        assert "no CUDA device here" in _one_error_line(capsys, "tcemu " + argv[0])


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a CUDA device is present")
@pytest.mark.parametrize("command", ["info", "accuracy"])
def test_cuda_without_a_device_is_a_bad_argument(capsys, command):
    """--device cuda without CUDA raised AssertionError ('Torch not compiled with CUDA enabled')."""
    assert main([command, "--device", "cuda"]) == 2
    assert "no CUDA device here" in _one_error_line(capsys, f"tcemu {command}")


def test_unwritable_out_is_refused_before_any_computation(capsys, tmp_path):
    """An --out that cannot be written failed only after the whole computation."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["accuracy", "--shapes", "8x8x8", "--out", str(blocker)]) == 2
    assert "exists and is not a folder" in _one_error_line(capsys, "tcemu accuracy")
    assert main(["accuracy", "--shapes", "8x8x8", "--out", str(blocker / "sub")]) == 2
    assert "cannot write to the folder" in _one_error_line(capsys, "tcemu accuracy")
    assert not (blocker.parent / "sub").exists()
    fresh = tmp_path / "a" / "b"
    assert main(["probe", "--list", "--out", str(fresh)]) == 0
    assert not (tmp_path / "a").exists()  # the check leaves nothing behind


def test_accuracy_with_the_triton_backend_measures_its_baselines_with_auto(capsys, tmp_path, monkeypatch):
    """fp32 (always measured, as the baseline) and tf32 have no Triton kernel: --backend triton could never
    run; they are measured with backend auto (the CSV says so), and a method the backend cannot run here is
    refused before anything is measured."""
    import os

    import torch

    import tcemu.cli.accuracy as acc

    if os.environ.get("TRITON_INTERPRET") == "1" or torch.cuda.is_available():
        pytest.skip("the Triton backend runs here (see the GPU test)")
    assert main(["accuracy", "--shapes", "8x8x8", "--methods", "tf32x3", "--backend", "triton"]) == 2
    assert "--backend triton: backend 'triton' cannot run tf32x3" in _one_error_line(capsys, "tcemu accuracy")
    assert acc._method_backend("fp32", "triton") == "auto" and acc._method_backend("tf32", "triton") == "auto"
    assert acc._method_backend("tf32x3", "triton") == "triton" and acc._method_backend("fp32", "torch") == "torch"


def test_a_failure_while_running_exits_1_in_one_line_and_T_shows_the_traceback(capsys, monkeypatch):
    import tcemu._hw

    def broken():
        raise RuntimeError("driver query failed\nsecond line of detail")

    monkeypatch.setattr(tcemu._hw, "versions", broken)
    assert main(["info", "--device", "cpu"]) == 1
    line = _one_error_line(capsys, "tcemu info")
    assert line == ("tcemu info: error: RuntimeError: driver query failed second line of detail "
                    "(-T shows the traceback)")
    assert main(["-T", "info", "--device", "cpu"]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "in broken" in err


@pytest.mark.gpu
def test_accuracy_on_the_gpu_measures_the_methods_not_the_sgemm_fallback(tmp_path, capsys):
    """Below 6 GFLOP the Triton backend falls back to SGEMM; tcemu accuracy measured that fallback for every
    default shape (all under 2.2 GFLOP) and reported SGEMM's error as each method's. Now the methods run, so
    bf16x3 shows its own 2^-16-level error, far above fp32's, and --backend triton runs with fp32 on auto."""
    rc = main(["accuracy", "--shapes", "64x512x64", "--distributions", "normal", "--methods", "bf16x3,tf32x3",
               "--backend", "triton", "--out", str(tmp_path)])
    assert rc == 0
    rows = {r["method"]: r for r in csv.DictReader(open(tmp_path / "accuracy.csv"))}
    assert rows["fp32"]["backend"] == "auto" and rows["bf16x3"]["backend"] == "triton"
    assert float(rows["bf16x3"]["err_norm"]) > 5 * float(rows["fp32"]["err_norm"])
    assert float(rows["tf32x3"]["err_norm"]) <= float(rows["tf32x3"]["bound_norm"])


@pytest.mark.parametrize(("argv", "message"), [
    (["validate", "--measured"], "--measured applies to --replay"),  # was ignored
    (["validate", "--smoke", "--gpus", "2"], "--smoke checks one GPU"),  # the sharded run skipped the smoke check
    (["probe", "--collect-only", "--from-raw", "x.npz"], "--collect-only runs the vectors on the GPU"),
    (["accuracy", "--shapes", "99999999999999999999x2x2"], "each from 1 to 2^31 - 1"),  # a torch overflow
])
def test_contradictory_or_impossible_arguments_are_refused(capsys, argv, message):
    assert main(argv) == 2
    assert message in _one_error_line(capsys, "tcemu " + argv[0])


@pytest.mark.parametrize(("argv", "message"), [
    (["validate", "--emulation", "--methods", "bogus"], "--methods: unknown 'bogus'"),
    (["validate", "--emulation", "--kernels", "bogus"], "--kernels: unknown 'bogus'"),
    (["validate", "--emulation", "--families", "bogus"], "--families: unknown 'bogus'"),
    (["validate", "--emulation", "--outputs", "0"], "argument --outputs: must be at least 1"),
    (["validate", "--emulation", "--k-max", "0"], "argument --k-max: must be at least 1"),
    (["validate", "--replay-emulation", "missing.npz"], "--replay-emulation missing.npz: no such file"),
    (["run", "nosuch.py"], "no such script: 'nosuch.py'"),  # was FileNotFoundError, exit 1
    (["run", "-m", "nosuch_module_xyz"], "-m nosuch_module_xyz: no such module"),  # a traceback, exit 1
    (["run", "--method", "bogus", "script.py"], "--method: TCEMU_FP32_PRECISION='bogus': choose"),
])
def test_new_commands_refuse_bad_arguments(capsys, tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "script.py").write_text("print('ran')\n")
    assert main(argv) == 2
    assert message in _one_error_line(capsys, "tcemu " + argv[0])
