"""The native library's bit-equality cases: each calls one ``tcemu::`` op, then its backward and double
backward. Torch only (no tcemu import): the tests run the same cases with tcemu's Python ops in the test process
and with the native library alone in a subprocess (``_native_worker.py``)."""

from __future__ import annotations

import torch

METHODS = ("fp32", "tf32", "tf32x3", "bf16x3", "bf16x6", "bf16x9")
BIG = 2.0**100


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _special(a: torch.Tensor) -> torch.Tensor:
    """``a`` with an Inf, a NaN, values at the top of the range (the range fix-up's rows) and a subnormal."""
    a = a.clone()
    a[0, 0] = float("inf")
    a[1, 1] = float("nan")
    a[2] = a[2] * 1.8e37
    a[3, 0] = 3.3e38
    a[4, 2] = 1e-40
    return a


def _case(op: str, args: list, tail: tuple, grad: tuple[int, ...] = (), create_graph: bool = True) -> dict:
    return {"op": op, "args": args, "tail": list(tail), "grad": list(grad), "create_graph": create_graph}


def cases() -> dict[str, dict]:
    """name -> case (op, arguments, the trailing method/backend strings, the arguments to differentiate)."""
    out: dict[str, dict] = {}
    a, b = _special(_randn(9, 13, seed=1)), _randn(13, 6, seed=2)
    b[5, 3] = -float("inf")
    for m in METHODS:
        out[f"matmul-special-{m}"] = _case("matmul", [a, b], (m, "torch"))
        out[f"linear-special-{m}"] = _case("linear", [a, b.T.contiguous(), _randn(6, seed=3)], (m, m, "auto"))
    wide = _randn(7, 11, seed=4)
    wide[2] *= BIG  # rows whose levels overflow: the fix-up, forward and backward
    for m in ("tf32x3", "bf16x9"):
        out[f"matmul-grad-range-{m}"] = _case("matmul", [wide, _randn(11, 5, seed=5) * 2.0**20], (m, "torch"), (0, 1))
    out["matmul-batched"] = _case("matmul", [_randn(2, 1, 5, 7, seed=6), _randn(3, 7, 4, seed=7)], ("bf16x6", "torch"),
                                  (0, 1))
    out["matmul-vec-mat"] = _case("matmul", [_randn(7, seed=8), _randn(7, 4, seed=9)], ("bf16x3", "torch"), (0, 1))
    out["matmul-mat-vec"] = _case("matmul", [_randn(3, 5, 7, seed=10), _randn(7, seed=11)], ("tf32x3", "auto"),
                                  (0, 1))
    out["matmul-float64"] = _case("matmul", [_randn(3, 4, seed=12).double(), _randn(4, 2, seed=13).double()],
                                  ("tf32x3", "torch"), (0, 1))
    x, w, bias = _randn(2, 5, 12, seed=14), _randn(8, 12, seed=15), _randn(8, seed=16)
    out["linear-bias-gw"] = _case("linear", [x, w, bias], ("tf32x3", "bf16x6", "torch"), (0, 1, 2))
    out["linear-nobias"] = _case("linear", [x, w, None], ("bf16x9", "bf16x9", "auto"), (0, 1))
    out["linear-1d"] = _case("linear", [_randn(12, seed=17), w, bias], ("bf16x6", "bf16x6", "torch"), (0, 1, 2))
    q, k, v = (_randn(2, 3, 6, 8, seed=s) for s in (18, 19, 20))
    mask = _randn(2, 1, 6, 6, seed=21)
    out["sdpa-float-mask"] = _case("scaled_dot_product_attention", [q, k, v, mask, 0.0, False, None, False],
                                   ("tf32x3", "auto"), (0, 1, 2, 3))
    keep = _randn(6, 6, seed=22) > -0.5
    keep[2] = False  # a query row with every key masked out: torch's zeroed row
    out["sdpa-bool-mask-scale"] = _case("scaled_dot_product_attention", [q, k, v, keep, 0.0, False, 0.3, False],
                                        ("bf16x6", "torch"), (0, 1, 2))
    out["sdpa-causal-aten"] = _case("scaled_dot_product_attention", [q, k, v, None, 0.0, True, None, False],
                                    ("bf16x6", "torch"), (0, 1, 2))
    m1, m2 = _randn(5, 7, seed=23), _randn(7, 4, seed=24)
    out["mm"] = _case("mm", [m1, m2], ("bf16x3", "torch"), (0, 1))
    out["bmm"] = _case("bmm", [_randn(3, 5, 7, seed=25), _randn(3, 7, 4, seed=26)], ("tf32x3", "torch"), (0, 1))
    out["mv"] = _case("mv", [m1, _randn(7, seed=27)], ("bf16x9", "torch"), (0, 1))
    out["dot"] = _case("dot", [_randn(9, seed=28), _randn(9, seed=29)], ("tf32x3", "torch"), (0, 1))
    out["vdot"] = _case("vdot", [_randn(9, seed=30), _randn(9, seed=31)], ("bf16x6", "torch"), (0, 1))
    out["inner"] = _case("inner", [_randn(3, 2, 5, seed=32), _randn(4, 5, seed=33)], ("tf32x3", "torch"), (0, 1))
    out["vecdot"] = _case("linalg_vecdot", [_randn(4, 3, seed=34), _randn(1, 3, seed=35), 0], ("bf16x6", "torch"),
                          (0, 1))
    chain = [_randn(6, seed=36), _randn(6, 9, seed=37), _randn(9, 3, seed=38), _randn(3, 5, seed=39)]
    out["multi_dot"] = _case("linalg_multi_dot", [chain], ("tf32x3", "torch"))
    out["chain_matmul"] = _case("chain_matmul", [[_randn(4, 6, seed=40), chain[1], chain[2]]], ("bf16x9", "torch"))
    out["bilinear"] = _case("bilinear", [_randn(2, 3, 4, seed=41), _randn(2, 3, 5, seed=42), _randn(6, 4, 5, seed=43),
                                         _randn(6, seed=44)], ("tf32x3", "torch"), (0, 1, 2, 3))
    out["tensordot"] = _case("tensordot", [_randn(3, 4, 5, seed=45), _randn(4, 5, 2, seed=46), [1, 2], [0, 1]],
                             ("bf16x6", "torch"), (0, 1))
    out["einsum-pet-cells"] = _case("einsum", ["ab, abc -> ac", [_randn(7, 3, seed=47), _randn(7, 3, 3, seed=48)],
                                               None], ("tf32x3", "torch"), (1,))
    out["einsum-batched"] = _case("einsum", ["bij,bjk", [_randn(2, 3, 4, seed=49), _randn(2, 4, 5, seed=50)], None],
                                  ("bf16x6", "torch"), (1,))
    out["einsum-diagonal-ellipsis"] = _case("einsum", ["...ii,...i->...i", [_randn(2, 4, 4, seed=51),
                                                                             _randn(2, 4, seed=52)], None],
                                            ("bf16x9", "torch"), (1,))
    out["einsum-outer-aten"] = _case("einsum", ["i,j->ij", [_randn(3, seed=53), _randn(4, seed=54)], None],
                                     ("tf32x3", "torch"), (1,))
    nan_input = torch.full((5, 4), float("nan"))
    out["addmm"] = _case("addmm", [_randn(5, 4, seed=55), m1, m2, 0.5, 2], ("tf32x3", "torch"), (0, 1, 2))
    out["addmm-beta0"] = _case("addmm", [nan_input, m1, m2, 0, 1.5], ("bf16x3", "torch"), (1, 2))
    out["addmm-alpha0"] = _case("addmm", [_randn(4, seed=56), m1 * float("nan"), m2, 1, 0], ("bf16x3", "torch"))
    out["addmv"] = _case("addmv", [_randn(5, seed=57), m1, _randn(7, seed=58), 1, 1], ("bf16x6", "torch"), (0, 1, 2))
    b1, b2 = _randn(3, 5, 7, seed=59), _randn(3, 7, 4, seed=60)
    out["baddbmm"] = _case("baddbmm", [_randn(1, 5, 4, seed=61), b1, b2, 1, -1], ("tf32x3", "torch"), (0, 1, 2))
    out["addbmm"] = _case("addbmm", [_randn(5, 4, seed=62), b1, b2, 2, 1], ("bf16x9", "torch"), (0, 1, 2))
    return out


def _leaf(x, need: bool, device: str):
    if isinstance(x, torch.Tensor):
        x = x.detach().to(device).clone()
        return x.requires_grad_(need) if x.is_floating_point() else x
    if isinstance(x, list) and x and isinstance(x[0], torch.Tensor):
        return [_leaf(t, need, device) for t in x]
    return x


def run(case: dict, device: str = "cpu") -> list[torch.Tensor | None]:
    """The op's output, its gradients (a seeded random output gradient; create_graph) and the gradients of the
    gradients' squared sum (double backward), on ``device``; returned on the CPU. A case made with
    ``create_graph=False``: the output and first-order gradients only."""
    args = [_leaf(x, i in case["grad"], device) for i, x in enumerate(case["args"])]
    out = getattr(torch.ops.tcemu, case["op"])(*args, *case["tail"])
    results: list[torch.Tensor | None] = [out.detach().cpu()]
    leaves = [t for i in case["grad"] for t in (args[i] if isinstance(args[i], list) else [args[i]])]
    if not leaves:
        return results
    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(99), dtype=out.dtype).to(device)
    create_graph = case.get("create_graph", True)
    grads = torch.autograd.grad(out, leaves, grad_out, create_graph=create_graph, allow_unused=True)
    results += [None if g is None else g.detach().cpu() for g in grads]
    if not create_graph:
        return results
    second = [(g * g).sum() for g in grads if g is not None and g.requires_grad]
    if second:
        gg = torch.autograd.grad(sum(second), leaves, allow_unused=True)
        results += [None if g is None else g.detach().cpu() for g in gg]
    return results


def run_all(all_cases: dict[str, dict], device: str = "cpu") -> dict[str, list]:
    out = {}
    for name, case in all_cases.items():
        try:
            out[name] = run(case, device)
        except Exception as exc:  # noqa: BLE001 - reported, compared by the test
            out[name] = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return out
