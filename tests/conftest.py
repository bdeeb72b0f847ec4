"""The suite's one skip mechanism, for the three markers declared in pyproject.toml:

- ``gpu``: needs a CUDA device of compute capability 8.0 or newer (TF32/BF16 Tensor Cores) and no
  ``TRITON_INTERPRET=1`` (the interpreter runs Triton kernels on the CPU);
- ``interpret``: runs Triton kernels on the CPU, only under ``TRITON_INTERPRET=1`` (``make test``'s second pass:
  the variable is read when ``@triton.jit`` decorates, so it cannot be switched inside one run);
- ``slow``: runs only when ``-m`` selects it (``make test-slow``, before each release); every slow marker states
  why the test is slow, ``@pytest.mark.slow(reason="...")``.
"""

from __future__ import annotations

import os

import pytest
import torch

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def _tensor_core_gpu() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 0)


def _selects(markexpr: str, marker: str) -> bool:
    """Whether the -m expression asks for ``marker`` (``-m slow``, ``-m "slow and not gpu"``, not ``not slow``)."""
    from _pytest.mark.expression import Expression

    if not markexpr:
        return False
    expression = Expression.compile(markexpr)
    return expression.evaluate(lambda name, **_: name == marker) and not expression.evaluate(lambda name, **_: False)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    markexpr = config.getoption("-m") or ""
    run_slow = _selects(markexpr, "slow")
    gpu_skip = None
    if INTERPRET:
        gpu_skip = pytest.mark.skip(reason="a GPU test; TRITON_INTERPRET=1 runs Triton kernels on the CPU")
    elif not _tensor_core_gpu():
        gpu_skip = pytest.mark.skip(reason="needs a CUDA device (sm80+ for TF32/BF16 Tensor Cores); none visible")
    interpret_skip = pytest.mark.skip(reason="a Triton interpreter test: runs in its own pass, "
                                             "TRITON_INTERPRET=1 pytest -m interpret")
    for item in items:
        if gpu_skip is not None and item.get_closest_marker("gpu"):
            item.add_marker(gpu_skip)
        if not INTERPRET and item.get_closest_marker("interpret"):
            item.add_marker(interpret_skip)
        slow = item.get_closest_marker("slow")
        if slow is not None:
            reason = slow.kwargs.get("reason")
            if not reason:
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.slow needs a reason=\"why it is slow\"")
            if not run_slow:
                item.add_marker(pytest.mark.skip(reason=f"slow ({reason}): runs with make test-slow"))


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """One torch thread in each test process: the suite's models and matrices are small, its parallelism is
    pytest-xdist's workers (two workers on two cores, not two times two threads), and a serial run uses the
    same thread count in every folder."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
