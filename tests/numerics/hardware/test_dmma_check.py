"""The FP64 DMMA hardware check: its tile layout on CPU (a stand-in runner that applies the PTX fragment semantics
with the exact fp64 FMA), and on the GPU (skipped without one)."""

import shutil

import numpy as np
import pytest

from tcemu.numerics.hardware.dmma_check import check
from tcemu.numerics.model_fma import fma64


def _fma_h100_nans(x, y, d):
    """fma64, with the H100's NaN operand order (b, then the sum, then a; docs/hardware/h100-dmma.json)."""
    out = fma64(x, y, d)
    bits = [v.view(np.uint64) for v in (y, d, x)]
    picked = np.where(np.isnan(y), bits[0], np.where(np.isnan(d), bits[1], bits[2])) | np.uint64(1 << 51)
    some = np.isnan(x) | np.isnan(y) | np.isnan(d)
    return np.where(some, picked.view(np.float64), out)


def _ptx_semantics(lib, a, b, c):
    """d[t, i, j] = fma chain over slices s and k of a[t, s, i, k] * b[t, s, k, j], from c[t, i, j]."""
    d = c.copy()
    for s in range(a.shape[1]):
        for k in range(4):
            d = _fma_h100_nans(np.ascontiguousarray(np.broadcast_to(a[:, s, :, k][:, :, None], d.shape)).ravel(),
                               np.ascontiguousarray(np.broadcast_to(b[:, s, k, :][:, None, :], d.shape)).ravel(),
                               d.ravel()).reshape(d.shape)
    return d


def test_tile_layout_on_cpu():
    out = check(None, "h100", tiles=6, slices=2, runner=_ptx_semantics)
    assert out["agree_all"], out
    def reversed_slices(lib, a, b, c):
        return _ptx_semantics(lib, a[:, ::-1], b[:, ::-1], c)

    bad = check(None, "h100", tiles=6, slices=2, runner=reversed_slices)
    assert not bad["agree_all"]  # the slices in the other order: the check can fail


def test_nan_priority_kind_tells_which_operand_wins():
    """Another order among NaN operands (fma64's own: here b, a, then the sum) leaves every product as it is and
    changes only which NaN wins: the kind ``nan_priority`` must see it (the other kinds rarely can)."""
    def b_first(lib, a, b, c):
        d = c.copy()
        for s in range(a.shape[1]):
            for k in range(4):
                d = fma64(np.ascontiguousarray(np.broadcast_to(b[:, s, k, :][:, None, :], d.shape)).ravel(),
                          np.ascontiguousarray(np.broadcast_to(a[:, s, :, k][:, :, None], d.shape)).ravel(),
                          d.ravel()).reshape(d.shape)
        return d

    kind = check(None, "h100", tiles=6, slices=2, runner=b_first)["kinds"]["nan_priority"]
    assert kind["nan_outputs"] > kind["samples"] // 2
    assert kind["agree"] < kind["samples"] - 50, kind["agree"]


def _cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available() and shutil.which("nvcc") is not None
    except ImportError:  # pragma: no cover
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA device (sm_80+) and nvcc")
def test_dmma_on_gpu():
    import torch

    from tcemu.numerics.hardware.dmma_check import build

    major, minor = torch.cuda.get_device_capability()
    arch = "90a" if major == 9 else f"{major}{minor}"
    out = check(build(arch), "h100" if major == 9 else "a100", tiles=64, slices=4)
    assert out["agree_all"], out
