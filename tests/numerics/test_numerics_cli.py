"""`tcemu numerics`: explain, presets, data."""

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
