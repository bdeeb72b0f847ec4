"""tests/conftest.py's one skip mechanism, run on a small suite of its own (pytester)."""

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

SUITE = '''
import pytest

@pytest.mark.gpu
def test_gpu(): pass

@pytest.mark.interpret
def test_interpret(): pass

@pytest.mark.slow(reason="a long loop")
def test_slow(): pass

def test_plain(): pass
'''
MARKERS = '[pytest]\nmarkers =\n    gpu: g\n    interpret: i\n    slow(reason): s\naddopts = --strict-markers -p no:cacheprovider\n'


@pytest.fixture
def suite(pytester, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    pytester.makeconftest((Path(__file__).with_name("conftest.py")).read_text())
    pytester.makeini(MARKERS)
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def _outcomes(result) -> dict[str, str]:
    return {r.nodeid.rsplit("::", 1)[1]: r.outcome for r in result.getreports("pytest_runtest_logreport")
            if r.when == "call" or r.outcome == "skipped"}


def test_plain_pass_skips_gpu_interpret_and_slow(suite):
    out = _outcomes(suite.inline_run())
    gpu = "passed" if _has_tensor_core_gpu() else "skipped"
    assert out == {"test_gpu": gpu, "test_interpret": "skipped", "test_slow": "skipped", "test_plain": "passed"}


def test_interpreter_pass_runs_interpret_tests_and_skips_gpu_ones(suite, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    out = _outcomes(suite.inline_run("-m", "interpret"))
    assert out == {"test_interpret": "passed"}
    out = _outcomes(suite.inline_run())
    assert out["test_gpu"] == "skipped" and out["test_interpret"] == "passed"


@pytest.mark.parametrize("markexpr, runs", [("slow", True), ("slow and not gpu", True), ("not slow", False),
                                            ("not gpu", False)])
def test_slow_runs_only_when_m_asks_for_it(suite, markexpr, runs):
    out = _outcomes(suite.inline_run("-m", markexpr))
    assert out.get("test_slow", "deselected") == ("passed" if runs else "deselected" if "not slow" in markexpr
                                                  else "skipped")


def test_a_slow_marker_without_a_reason_is_a_usage_error(suite):
    suite.makepyfile(test_bare="import pytest\n\n@pytest.mark.slow\ndef test_bare(): pass\n")
    result = suite.runpytest_inprocess("test_bare.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_bare.py::test_bare: @pytest.mark.slow needs a reason=*"])


def _has_tensor_core_gpu() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 0)
