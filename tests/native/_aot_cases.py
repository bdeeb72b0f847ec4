"""The CUDA cases of the native library's ahead-of-time GEMM kernels (``test_native_aot.py``): products with
backend "triton" (and "auto") of odd sizes, K not a multiple of the K-tile, transposed (strided) inputs, batches
(b 2-D, batched, broadcast), linear layers with and without bias (first-order backward: the input-gradient GEMM;
double backward), Inf/NaN and top-of-range rows (the range fix-up). Torch only, as ``_native_cases``."""

from __future__ import annotations

import torch

from _native_cases import BIG, _case, _randn, _special

METHODS = ("tf32x3", "bf16x3", "bf16x6", "bf16x9")


def products() -> dict[str, tuple[torch.Tensor, torch.Tensor, str]]:
    """name -> (a, b, method) of the plain 2-D products (also checked against FP64)."""
    out = {}
    for i, m in enumerate(METHODS):
        out[f"mm-odd-{m}"] = (_randn(67, 45, seed=100 + i), _randn(45, 33, seed=110 + i), m)
        out[f"mm-transposed-{m}"] = (_randn(45, 67, seed=120 + i).mT, _randn(33, 45, seed=130 + i).mT, m)
        out[f"mm-long-k-{m}"] = (_randn(130, 300, seed=140 + i), _randn(300, 70, seed=150 + i), m)
        special = _special(_randn(9, 13, seed=160 + i))
        b = _randn(13, 6, seed=170 + i)
        b[5, 3] = -float("inf")
        out[f"mm-special-{m}"] = (special, b, m)
        wide = _randn(7, 11, seed=180 + i)
        wide[2] *= BIG  # a row whose levels overflow: the fix-up
        out[f"mm-range-{m}"] = (wide, _randn(11, 5, seed=190 + i) * 2.0**20, m)
    return out


def cases(large: bool = False) -> dict[str, dict]:
    """name -> case (``_native_cases`` format), backend "triton"; ``large`` adds products of 7 GFLOP (above the
    small-shape FLOP rule's 6)."""
    out = {name: _case("mm", [a, b], (m, "triton"), (0, 1), create_graph=False)
           for name, (a, b, m) in products().items()}
    for i, m in enumerate(METHODS):
        s = 200 + 20 * i
        out[f"bmm-{m}"] = _case("bmm", [_randn(3, 20, 37, seed=s), _randn(3, 37, 19, seed=s + 1)], (m, "triton"),
                                (0, 1))
        out[f"matmul-b2d-{m}"] = _case("matmul", [_randn(4, 17, 29, seed=s + 2), _randn(29, 13, seed=s + 3)],
                                       (m, "triton"), (0, 1), create_graph=False)
        out[f"matmul-broadcast-{m}"] = _case("matmul", [_randn(2, 3, 9, 37, seed=s + 4), _randn(3, 37, 11, seed=s + 5)],
                                             (m, "triton"), (0, 1), create_graph=False)
        x, w, bias = _randn(2, 21, 40, seed=s + 6), _randn(24, 40, seed=s + 7), _randn(24, seed=s + 8)
        out[f"linear-bias-{m}"] = _case("linear", [x, w, bias], (m, m, "triton"), (0, 1, 2), create_graph=False)
        out[f"linear-bias-double-{m}"] = _case("linear", [x, w, bias], (m, m, "auto"), (0, 1, 2))
        out[f"linear-nobias-{m}"] = _case("linear", [_special(_randn(9, 40, seed=s + 9)), w, None], (m, m, "triton"),
                                          (0, 1), create_graph=False)
        out[f"addmm-{m}"] = _case("addmm", [_randn(33, seed=s + 10), _randn(66, 45, seed=s + 11),
                                            _randn(45, 33, seed=s + 12), 0.5, 2], (m, "triton"), (1, 2))
    out["bmm-many-batches"] = _case("bmm", [_randn(70000, 2, 3, seed=300), _randn(70000, 3, 2, seed=301)],
                                    ("tf32x3", "triton"), create_graph=False)
    if large:  # 2 M N K of 6.9-7.2 GFLOP
        for i, m in enumerate(METHODS):
            out[f"mm-large-{m}"] = _case("mm", [_randn(1500, 1537, seed=310 + i), _randn(1537, 1500, seed=320 + i)],
                                         (m, "triton"), create_graph=False)
            # K a multiple of 16: on Hopper tcemu's Python path runs its Gluon wgmma kernels here (but for bf16x9)
            out[f"mm-large-aligned-{m}"] = _case("mm", [_randn(1536, 1536, seed=330 + i),
                                                        _randn(1536, 1536, seed=340 + i)], (m, "triton"), (0, 1),
                                                 create_graph=False)
            x, w, bias = _randn(1536, 1536, seed=350 + i), _randn(1536, 1536, seed=360 + i), _randn(1536, seed=370 + i)
            out[f"linear-large-{m}"] = _case("linear", [x, w, bias], (m, m, "triton"), (0, 1, 2), create_graph=False)
    return out
