"""tcemu._hw: the one place that asks the machine what it has (capability, SM count, shared memory, Tensor Core
generation, Triton's interpreter mode)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tcemu import _hw

SRC = Path(__file__).resolve().parents[1] / "src" / "tcemu"


@pytest.mark.parametrize(("raw", "on"), [("1", True), ("true", True), ("ON", True), ("0", False), ("", False),
                                         ("off", False)])
def test_interpreting_reads_the_environment_at_each_call(monkeypatch, raw, on):
    monkeypatch.setenv("TRITON_INTERPRET", raw)
    assert _hw.interpreting() is on
    monkeypatch.delenv("TRITON_INTERPRET")
    assert _hw.interpreting() is False


def test_cpu_has_no_cuda_properties():
    for query in (_hw.capability, _hw.sm_count, _hw.shared_memory_per_block, _hw.tensor_core_generation):
        assert query("cpu") is None


@pytest.mark.parametrize(("cap", "generation"), [((7, 5), None), ((8, 0), "ampere"), ((8, 6), "ampere"),
                                                 ((8, 9), "ampere"), ((9, 0), "hopper"), ((10, 0), "blackwell"),
                                                 ((12, 0), "blackwell")])
def test_tensor_core_generation_of_a_capability(monkeypatch, cap, generation):
    monkeypatch.setattr(_hw, "capability", lambda device=None: cap)
    assert _hw.tensor_core_generation("cuda") == generation


def test_no_module_but_hw_queries_the_device():
    """Capability, SM count, shared memory and the interpreter switch are read through tcemu._hw only."""
    pattern = re.compile(r"get_device_capability|get_device_properties|multi_processor_count|"
                         r"environ\.get\(\s*[\"']TRITON_INTERPRET")
    offenders = [f"{path.relative_to(SRC)}:{n}" for path in SRC.rglob("*.py") if path.name != "_hw.py"
                 for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert offenders == []
