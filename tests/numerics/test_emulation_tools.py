"""The twin's tools: explain one emulated-GEMM output (tcemu numerics explain --method) and the error tables
across Tensor Core generations (tcemu numerics emulation)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("triton")

from tcemu.cli.main import main  # noqa: E402
from tcemu.numerics.emulated import emulated_matmul_bits  # noqa: E402
from tcemu.numerics.emulation_errors import adversarial, error_table, format_table  # noqa: E402
from tcemu.numerics.explain_emulated import explain_emulated, parse_fp32_values  # noqa: E402
from tcemu.testing import elementwise_bound, normwise_bound  # noqa: E402


@pytest.mark.parametrize(("method", "config"), [("tf32x3", "128x128x32w8s3m1p"), ("bf16x6", "128x64x64w8s3m1p"),
                                                ("bf16x9", "128x64x64w8s3m0p")])
def test_explain_follows_the_schedule_to_the_twins_bits(method, config):
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(70).astype(np.float32), rng.standard_normal(70).astype(np.float32)
    text = explain_emulated(a, b, method, config=config)
    want = int(emulated_matmul_bits(a[None], b[:, None], method, config=config)[0, 0])
    assert f"result: 0x{want:08X}" in text and "(agrees)" in text
    bk = int(config.split("x")[2].split("w")[0])
    assert text.count("=== K-tile") == -(-70 // bk) and "truncated away" in text  # each K-tile, the alignment
    assert "(FFMA, one rounding)" in text if method == "bf16x6" else "FFMA" not in text
    brief = explain_emulated(a, b, method, config=config, brief=True)
    assert "truncated away" not in brief and f"0x{want:08X}" in brief


@pytest.mark.parametrize("method", ["tf32x3", "bf16x6"])
def test_explain_follows_the_range_fixup_where_the_kernel_marks_the_element(method):
    """X X just below FLT_MAX: the kernel's L0 tile overflows, the range check marks the element, and the
    explanation goes on through the fix-up's steps to the twin's finite bits."""
    x = np.float32(1.8446743e19)
    a, b = np.array([x, 1.0], np.float32), np.array([x, 0.0], np.float32)
    text = explain_emulated(a, b, method, brief=True)
    want = int(emulated_matmul_bits(a[None], b[:, None], method)[0, 0])
    assert np.isfinite(np.uint32(want).view(np.float32))
    assert "range fix-up computes it again" in text and "2^l_col" in text
    assert f"result: 0x{want:08X}" in text and "(agrees)" in text


def test_parse_fp32_values():
    got = parse_fp32_values("1.5, -2^-24, 0x3F800000, 1.1, 0x1.8p1, inf")
    assert got.tolist()[:2] == [1.5, -(2.0**-24)] and got[2] == 1.0 and got[3] == np.float32(1.1)
    assert got[4] == 3.0 and np.isinf(got[5])


def test_cli_explain_method_and_emulation_table(capsys, tmp_path):
    assert main(["numerics", "explain", "--arch", "h200", "--method", "tf32x3", "--a", "1.1,-2.5", "--b",
                 "0.7,0.25", "--brief"]) == 0
    out = capsys.readouterr().out
    assert "(agrees)" in out and "pieces" in out
    path = tmp_path / "t.json"
    assert main(["numerics", "emulation", "--arch", "a100", "--method", "bf16x3", "--k", "64", "--size", "16",
                 "--no-search", "--families", "normal", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "bf16x3 on a100 mma.sync" in out and "| normal | 64 |" in out and path.exists()


@pytest.mark.parametrize("arch", ["a100", "b200"])
def test_error_table_within_the_bounds(arch):
    t = error_table("tf32x3", arch, ks=(128,), families=("normal", "wide"), size=24,
                    search={"k": 32, "population": 64, "generations": 3})
    for r in t["rows"]:
        assert r["max_u"] * 2.0**-24 <= elementwise_bound("tf32x3", r["k"])
        if r["family"] == "normal":
            assert r["normwise"] <= normwise_bound("tf32x3", r["k"])
    adv = t["adversarial"]
    assert 0 < adv["worst_u"] <= adv["bound_u"]
    assert "Adversarial search" in format_table(t)


def test_adversarial_search_improves_on_random_inputs():
    """The search's worst case is at least the worst of its first (random) population."""
    start = adversarial("bf16x3", "h200", k=32, population=128, generations=0)
    found = adversarial("bf16x3", "h200", k=32, population=128, generations=6)
    assert found["worst_u"] >= start["worst_u"]
