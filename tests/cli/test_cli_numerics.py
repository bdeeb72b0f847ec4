"""`tcemu numerics`: explain, presets, data."""

import pytest

from tcemu.cli.main import main


def test_explain_prints_the_steps(capsys):
    rc = main(["numerics", "explain", "--arch", "a100", "--a", "2^-24,2^-24,2^-24", "--b", "1,0.5,0.5", "--c", "1"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "E_max = 0; grid 2^(E_max - F) = 2^-24" in out
    assert "rounded RZ to fp32: 0x3F800000" in out and "(agrees)" in out
    rc = main(["numerics", "explain", "--arch", "a100", "--a", "2^-24,2^-24,2^-24", "--b", "1,0.5,0.5", "--c", "1",
               "--frac-bits", "25"])
    assert "result: 0x3F800001" in capsys.readouterr().out


def test_explain_emulated_fp8_shows_groups_and_c_add(capsys):
    rc = main(["numerics", "explain", "--arch", "h200", "--input-format", "e4m3", "--a", "2^-7", "--b", "2^-7",
               "--c", "1", "--pad"])
    out = capsys.readouterr().out
    assert rc == 0 and "group (0, 1)" in out and "IEEE add of c, RNE" in out and "result: 0x3F800200" in out


def test_explain_refuses_unrepresentable(capsys):
    assert main(["numerics", "explain", "--arch", "h100", "--a", "0.1", "--b", "1"]) == 2
    assert "not exactly representable in fp16" in capsys.readouterr().err


def test_presets_and_data(capsys):
    assert main(["numerics", "presets"]) == 0
    out = capsys.readouterr().out
    assert "h200  wgmma" in out and "-126/-133" in out and "measured" in out
    assert main(["numerics", "data", "--gpu", "V100"]) == 0
    assert "worst match over the consistent cases: 100.00%" in capsys.readouterr().out


def _one_error_line(capsys) -> str:
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and lines[0].startswith("tcemu numerics "), (out, err)
    return lines[0]


def test_data_for_an_unknown_gpu_is_refused(capsys):
    """--gpu XYZ checked nothing, printed 'worst match 100.00%' and exited 0."""
    assert main(["numerics", "data", "--gpu", "XYZ"]) == 2
    assert "--gpu XYZ: the bundled data has no such GPU; choose one of A100, A2" in _one_error_line(capsys)


@pytest.mark.parametrize(("extra", "message"), [
    (["--a", "1", "--b", "1", "--n-fma", "0"], "argument --n-fma: must be at least 1, got 0"),  # ZeroDivisionError
    (["--a", "1", "--b", "1", "--frac-bits", "-1"], "argument --frac-bits: must be at least 0"),
    (["--a", "1", "--b", "1", "--czero-floor", "abc"], "argument --czero-floor: expected an exponent"),
    (["--a", "2^99999", "--b", "1"], "exponent 99999 is beyond every format's range"),  # OverflowError
    (["--a", "2^-99999", "--b", "1"], "exponent -99999 is beyond every format's range"),  # read as 0
    (["--a", "1e400", "--b", "1"], "1e400 is not exactly representable in fp16"),  # read as inf
    (["--a", "1e-400", "--b", "1"], "1e-400 is not exactly representable in fp16"),  # read as 0
    (["--a", "1.0000000000000000001", "--b", "1", "--input-format", "bf16"], "not exactly representable in bf16"),
    (["--a", "0.1", "--b", "1", "--input-format", "tf32"], "0.1 is not exactly representable in tf32"),
    (["--a", "bits:0xFFFFF", "--b", "1"], "do not fit fp16's 16-bit container"),  # numpy OverflowError
    (["--a", "", "--b", ""], "--a is empty"),  # explained an empty dot product, exit 0
    (["--a", "abc", "--b", "1"], "cannot read 'abc' as a value"),
    (["--a", "1", "--b", "1", "--arch", "xx"], "unknown arch 'xx'"),
])
def test_explain_refuses_bad_values_in_one_line(capsys, extra, message):
    argv = ["numerics", "explain", "--arch", "a100"] + extra
    assert main(argv) == 2
    assert message in _one_error_line(capsys)


def test_explain_reads_exact_values_and_signed_zeros(capsys):
    from tcemu.numerics.explain import parse_values

    assert parse_values("1.5,-2^-24,1.5*2^-3,0x1.8p-3,65504,0x3C00,bits:0x7E00", "fp16") == [
        0x3E00, 0x8001, 0x3200, 0x3200, 0x7BFF, 0x3C00, 0x7E00]
    assert parse_values("-0,-0x0p0,-0*2^3,0", "fp16") == [0x8000, 0x8000, 0x8000, 0]
    assert parse_values("inf,-inf", "fp32") == [0x7F800000, 0xFF800000]
    assert parse_values("2^-149,0.5", "tf32") == [0x1, 0x3F000000]


def test_a_missing_subcommand_is_a_bad_argument(capsys):
    assert main(["numerics"]) == 2
    assert capsys.readouterr().err.strip().endswith("give a subcommand: explain, emulation, presets, coverage or data")


@pytest.mark.parametrize(("argv", "message"), [
    (["emulation", "--method", "bogus"], "--method: unknown 'bogus'; choose from tf32x3"),
    (["emulation", "--k", "0"], "argument --k: must be at least 1"),
    (["emulation", "--k", "abc"], "argument --k: expected an integer"),
    (["emulation", "--families", "bogus"], "--families: unknown 'bogus'"),
    (["emulation", "--size", "0"], "argument --size: must be at least 1"),
    (["emulation", "--arch", "bogus", "--method", "tf32x3"], "unknown arch 'bogus'"),
    (["emulation", "--json", "/proc/no/x.json"], "argument --json: cannot write to the folder"),
    (["explain", "--method", "bogus", "--arch", "h200", "--a", "1", "--b", "1"], "--method: unknown 'bogus'"),
    (["explain", "--method", "tf32x3", "--arch", "h200", "--a", "1", "--b", "1", "--shape", "0x5"],
     "--shape '0x5': write M x N"),
    (["explain", "--method", "tf32x3", "--arch", "h200", "--a", "2^99999", "--b", "1"],
     "--a: a value is beyond every float's range"),  # OverflowError (34, 'Numerical result out of range')
    (["explain", "--method", "tf32x3", "--arch", "h200", "--a", "", "--b", ""], "--a is empty"),  # exit 0
])
def test_emulation_and_explain_method_refuse_bad_arguments(capsys, argv, message):
    assert main(["numerics"] + argv) == 2
    assert message in _one_error_line(capsys)


def test_coverage_lists_every_preset_with_its_validation(capsys):
    """One line per preset (h200 folded into h100), each with a status; the statuses follow the data that exist."""
    from tcemu.numerics import list_presets

    assert main(["numerics", "coverage"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {tuple(line.split()[:4]): line for line in lines[2:] if line and not line[0].isspace()
            and len(line.split()) > 5 and line.split()[0] in {k[0] for k in list_presets()}}
    assert set(rows) == {k for k in list_presets() if k[0] != "h200"}
    assert "measured here" in rows["h100", "wgmma", "tf32", "fp32"]
    assert "public data" in rows["a100", "mma.sync", "tf32", "fp32"]
    assert "literature" in rows["b200", "tcgen05.mxf4nvf4", "e2m1:ue4m3x16", "fp32"]
    assert "MMA-Sim" in rows["sm120", "mma.sync.mxf8f6f4", "e4m3:ue8m0x32", "fp32"]
    measured = sum("measured here" in line for line in rows.values())
    assert lines[-1].startswith(f"{len(rows)} presets (measured here: {measured},") and measured >= 16


def test_coverage_columns_align_and_sources_are_tags(capsys):
    """Every line's columns start where the header's do (long AMD names and block-scaled inputs included), and
    the source column holds tags only (no cut-off prose)."""
    from tcemu.numerics.coverage import SOURCE_TAGS

    assert main(["numerics", "coverage"]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = lines[0]
    starts = [head.index(name) for name in ("instruction", "input", "out ", "validation", "source")]
    tags = set(SOURCE_TAGS) | {"refit", "extrapolated", "nvcc SASS (wmma lowering)"}
    body = [line for line in lines[2:] if line and not line.startswith(" ") and "presets (" not in line]
    assert len(body) > 300
    for line in body:
        assert all(line[s - 1] == " " and line[s] != " " for s in starts), line
        assert set(line[starts[-1]:].split(", ")) <= tags, line
    assert any(line.startswith("mi300  v_mfma_f32_16x16x32_bf8_fp8 ") for line in body)


def test_explain_takes_c_in_fp16_for_fp32_fp16(capsys):
    """output fp32.fp16 (c fp16, d fp32): --c is read as fp16 and converted exactly (Turing keeps -2^-24 at F=24)."""
    assert main(["numerics", "explain", "--arch", "turing", "--instruction", "mma.m8n8k4", "--output-format",
                 "fp32.fp16", "--a", "1,0,0,0", "--b", "1,0,0,0", "--c=-2^-24"]) == 0
    out = capsys.readouterr().out
    assert "c in = 0xB3800000" in out and "result: 0x3F7FFFFF" in out
