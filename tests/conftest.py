"""Markers and skips shared by the whole suite."""

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    has_cuda = torch.cuda.is_available()
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device (sm80+ for TF32/BF16 Tensor Cores); none visible")
    markexpr = config.getoption("-m") or ""
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(skip_gpu)
        for slow_kind in ("slow", "probe", "physical"):
            if slow_kind in item.keywords and slow_kind not in markexpr:
                item.add_marker(pytest.mark.skip(reason=f"'{slow_kind}' tests run only with -m {slow_kind}"))
        if "interpret" in item.keywords and "interpret" not in markexpr:
            item.add_marker(pytest.mark.skip(reason="Triton interpreter tests run in their own pass: "
                                                    "TRITON_INTERPRET=1 pytest -m interpret"))
