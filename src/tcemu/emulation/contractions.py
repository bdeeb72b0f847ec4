"""Emulated-FP32 contractions lowered to :func:`tcemu.matmul`: einsum, tensordot, bilinear, multi_dot, addmm's kin.

Each function has the signature and the FP32 semantics of its torch namesake (shapes, broadcasting, implicit
output of einsum, repeated subscripts, ellipsis, sublist format) plus ``method`` and ``backend``. Every product
that accumulates (a summed index shared by two operands) is one batched GEMM through :func:`tcemu.matmul`, so the
Triton kernels and the reference both serve it and autograd (double backward too) works; the rest is what torch
itself does around its GEMMs: diagonals for repeated subscripts, sums over indices of one operand, permutes and
reshapes, and elementwise products where two operands share no summed index (an outer product has no
accumulation: one FP32 rounding per element, as in torch). Operands are contracted pairwise in torch's order: the
``opt_einsum`` path when torch uses one (three or more operands), else left to right.

``add_scaled`` gives addmm / baddbmm / addbmm / addmv their torch semantics around an emulated product:
``beta * input + alpha * product``; at ``beta == 0`` the input is ignored (NaN and Inf in it do not propagate)
and at ``alpha == 0`` the product is not formed (as BLAS, so NaN in the matrices does not propagate).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from .methods import MethodSpec
from .ops import check_operands, matmul

__all__ = ["einsum", "tensordot", "bilinear", "multi_dot", "add_scaled", "einsum_contracts", "einsum_shape",
           "tensordot_contracts", "parse_einsum_args"]

_ELLIPSIS = "..."


# --------------------------------------------------------------------------- einsum


def parse_einsum_args(args: Sequence) -> tuple[str, list[Tensor]]:
    """``(equation, operands)`` from torch.einsum's argument forms: ``(eq, *ops)``, ``(eq, [ops])`` or the
    sublist format ``(op, sub, op, sub, ..., [out])``."""
    if not args:
        raise ValueError("einsum(): must specify the equation string and at least one operand")
    if isinstance(args[0], Tensor):
        def letter(n) -> str:
            if n is Ellipsis:
                return _ELLIPSIS
            if 0 <= n < 26:
                return chr(ord("A") + n)
            if 26 <= n < 52:
                return chr(ord("a") + n - 26)
            raise ValueError("einsum(): subscript in subscript list is not within the valid range [0, 52)")

        eq = ",".join("".join(letter(s) for s in sub) for sub in args[1::2])
        if len(args) % 2 == 1:
            return eq + "->" + "".join(letter(s) for s in args[-1]), list(args[:-1:2])
        return eq, list(args[::2])
    ops = args[1:]
    if len(ops) == 1 and isinstance(ops[0], (list, tuple)):
        ops = ops[0]
    return str(args[0]), list(ops)


def _split_term(term: str) -> list[str]:
    """``"a...b"`` -> ``["a", "...", "b"]``."""
    out, i = [], 0
    while i < len(term):
        if term.startswith(_ELLIPSIS, i):
            out.append(_ELLIPSIS)
            i += 3
        else:
            out.append(term[i])
            i += 1
    return out


def _labels(equation: str, operands: Sequence[Tensor]) -> tuple[list[list[str]], list[str]]:
    """Per-operand dimension labels and the output labels; ellipsis dimensions become ``"…k"`` labels aligned
    from the right across operands (they broadcast), in order."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = [_split_term(t) for t in lhs.split(",")]
    n_ell = [op.dim() - (len(t) - 1) if _ELLIPSIS in t else 0 for t, op in zip(terms, operands)]
    width = max(n_ell, default=0)
    per_op = []
    for t, e in zip(terms, n_ell):
        lab: list[str] = []
        for s in t:
            lab.extend(f"…{width - e + i}" for i in range(e)) if s == _ELLIPSIS else lab.append(s)
        per_op.append(lab)
    ell_out = [f"…{i}" for i in range(width)]
    if arrow:
        out: list[str] = []
        for s in _split_term(rhs):
            out.extend(ell_out) if s == _ELLIPSIS else out.append(s)
    else:
        counts: dict[str, int] = {}
        for lab in per_op:
            for s in lab:
                if not s.startswith("…"):
                    counts[s] = counts.get(s, 0) + 1
        out = ell_out + sorted(s for s, c in counts.items() if c == 1)
    return per_op, out


def _take_diagonals(x: Tensor, labels: list[str]) -> tuple[Tensor, list[str]]:
    """Repeated labels of one operand: their diagonal (torch.einsum's ``ii->i``)."""
    labels = list(labels)
    while len(set(labels)) < len(labels):
        for i, s in enumerate(labels):
            j = labels.index(s, i + 1) if labels.count(s) > 1 else -1
            if j > 0:
                x = x.diagonal(dim1=i, dim2=j)
                labels = [t for k, t in enumerate(labels) if k not in (i, j)] + [s]
                break
    return x, labels


def _sum_out(x: Tensor, labels: list[str], keep: set[str]) -> tuple[Tensor, list[str]]:
    dims = [i for i, s in enumerate(labels) if s not in keep]
    if not dims:
        return x, labels
    return x.sum(dims), [s for s in labels if s in keep]


def _permute(x: Tensor, labels: list[str], order: list[str]) -> Tensor:
    return x.permute([labels.index(s) for s in order])


def _contract_pair(a: Tensor, la: list[str], b: Tensor, lb: list[str], keep: set[str],
                   method: str | MethodSpec, backend: str) -> tuple[Tensor, list[str]]:
    """Contract two operands over their shared labels not in ``keep``; one batched GEMM (or a product)."""
    a, la = _sum_out(a, la, keep | set(lb))
    b, lb = _sum_out(b, lb, keep | set(la))
    summed = [s for s in la if s in lb and s not in keep]
    # a summed label of size 1 on one side broadcasts against the other: sum the other side over it first (as
    # torch does: sum_k x y_k = x sum_k y_k); then it is of size 1 on both sides and nothing accumulates over it
    for s in summed:
        da, db = a.shape[la.index(s)], b.shape[lb.index(s)]
        if da == 1 and db > 1:
            b = b.sum(lb.index(s), keepdim=True)
        elif db == 1 and da > 1:
            a = a.sum(la.index(s), keepdim=True)
    ones = [s for s in summed if a.shape[la.index(s)] == 1]
    if ones:  # size 1 on both sides: a sum over one term
        a, la = a.squeeze([la.index(s) for s in ones]), [s for s in la if s not in ones]
        b, lb = b.squeeze([lb.index(s) for s in ones]), [s for s in lb if s not in ones]
        summed = [s for s in summed if s not in ones]
    batch = [s for s in la if s in lb and s in keep]
    a_only = [s for s in la if s not in lb]
    b_only = [s for s in lb if s not in la]
    size = {}
    for x, lab in ((a, la), (b, lb)):
        for s, n in zip(lab, x.shape):
            size[s] = max(size.get(s, 1), n)
    if not summed:  # no accumulation: an elementwise / outer product, exactly as torch computes it
        ap = _permute(a, la, batch + a_only)
        bp = _permute(b, lb, batch + b_only)
        nb = len(batch)
        ap = ap.reshape((*ap.shape, *([1] * len(b_only))))
        bp = bp.reshape((*bp.shape[:nb], *([1] * len(a_only)), *bp.shape[nb:]))
        return ap * bp, batch + a_only + b_only
    m = math.prod([size[s] for s in a_only])
    n = math.prod([size[s] for s in b_only])
    k = math.prod([size[s] for s in summed])
    a3 = _permute(a, la, batch + a_only + summed)
    a3 = a3.reshape(*a3.shape[:len(batch)], m, k)
    b3 = _permute(b, lb, batch + summed + b_only)
    b3 = b3.reshape(*b3.shape[:len(batch)], k, n)
    out = matmul(a3, b3, method, backend=backend)
    out = out.reshape((*out.shape[:len(batch)], *(size[s] for s in a_only), *(size[s] for s in b_only)))
    return out, batch + a_only + b_only


class _EinsumPlan(NamedTuple):
    """What an einsum does, from its equation and operand shapes alone (cached; a constant under torch.compile)."""

    labels: tuple[tuple[str, ...], ...]  # per operand, as given (repeated labels are diagonals)
    output: tuple[str, ...]
    path: tuple[tuple[int, int], ...]  # pairs of positions in the working list
    fold_left: bool  # the result replaces the pair at the front (torch's default order), else goes last
    shape: tuple[int, ...]  # torch.einsum's result shape
    contracts: bool  # some product accumulates (a summed label with more than one element in two operands)


@functools.lru_cache(maxsize=4096)
def _plan_tuple(equation: str, shapes: tuple[tuple[int, ...], ...]) -> tuple:
    metas = [torch.empty(s, device="meta") for s in shapes]
    shape = tuple(torch.einsum(equation, *metas).shape)  # torch's own checks of the equation and shapes
    per_op, out = _labels(equation, metas)
    seen: dict[str, int] = {}  # operands in which a label has more than one element
    for lab, sh in zip(per_op, shapes):
        for s in dict.fromkeys(lab):
            if sh[lab.index(s)] > 1:
                seen[s] = seen.get(s, 0) + 1
    contracts = len(shapes) > 1 and any(c > 1 and s not in out for s, c in seen.items())
    oe = torch.backends.opt_einsum
    if len(shapes) > 2 and oe.enabled and oe.is_available():
        path = tuple(tuple(p) for p in oe.get_opt_einsum().contract_path(
            equation, *shapes, optimize=oe.strategy, shapes=True)[0])
        fold_left = False
    else:
        path, fold_left = ((0, 1),) * (len(shapes) - 1), True
    return tuple(tuple(lab) for lab in per_op), tuple(out), path, fold_left, shape, contracts


@torch.compiler.assume_constant_result
def _plan_constant(equation: str, shapes: tuple[tuple[int, ...], ...]) -> tuple:
    return _plan_tuple(equation, shapes)


def _einsum_plan(equation: str, shapes: tuple[tuple[int, ...], ...]) -> _EinsumPlan:
    return _EinsumPlan(*(_plan_constant(equation, shapes) if torch.compiler.is_compiling()
                         else _plan_tuple(equation, shapes)))


def einsum_contracts(equation: str, operands: Sequence[Tensor]) -> bool:
    """Whether the einsum has a product that accumulates: a summed label with more than one element in two
    operands (over a label of size 1 on one side, torch sums the other side instead)."""
    return _einsum_plan(equation.replace(" ", ""), tuple(tuple(o.shape) for o in operands)).contracts


def einsum_shape(equation: str, operands: Sequence[Tensor]) -> tuple[int, ...]:
    """torch.einsum's result shape (raises torch's error for a bad equation)."""
    return _einsum_plan(equation.replace(" ", ""), tuple(tuple(o.shape) for o in operands)).shape


def einsum(*args, method: str | MethodSpec = "tf32x3", backend: str = "auto") -> Tensor:
    """Emulated-FP32 ``torch.einsum``: same arguments (equation and operands, or the sublist format),
    shapes and broadcasting; every accumulating product by :func:`tcemu.matmul`.

    Args:
        *args: as torch.einsum: ``("ij,jk->ik", a, b)``, ``("ij,jk", [a, b])`` or ``(a, [0, 1], b, [1, 2])``.
        method, backend: as :func:`tcemu.matmul`.

    Returns:
        float32 tensor of torch.einsum's result shape.
    """
    equation, operands = parse_einsum_args(args)
    check_operands("einsum", *operands)
    plan = _einsum_plan(equation.replace(" ", ""), tuple(tuple(o.shape) for o in operands))
    if any([o.numel() == 0 for o in operands]):  # nothing to emulate
        return torch.einsum(equation, *operands)
    items = [_take_diagonals(o, list(lab)) for o, lab in zip(operands, plan.labels)]
    out_labels = set(plan.output)
    for i, j in plan.path:
        keep = set(out_labels)
        for idx, (_, lab) in enumerate(items):
            if idx not in (i, j):
                keep.update(lab)
        pair = _contract_pair(*items[i], *items[j], keep, method, backend)
        rest = [it for idx, it in enumerate(items) if idx not in (i, j)]
        items = [pair, *rest] if plan.fold_left else [*rest, pair]
    x, lab = _sum_out(*items[0], out_labels)
    x = _permute(x, lab, list(plan.output))
    return x if tuple(x.shape) == plan.shape else x.expand(plan.shape)


# --------------------------------------------------------------------------- tensordot


def _tensordot_dims(a: Tensor, b: Tensor, dims) -> tuple[list[int], list[int]]:
    if isinstance(dims, Tensor):
        if dims.numel() == 1:
            dims = int(dims.item())
        else:
            dims = (dims[0].tolist(), dims[1].tolist())
    if isinstance(dims, int):
        return list(range(a.dim() - dims, a.dim())), list(range(dims))
    da, db = dims
    da = [da] if isinstance(da, int) else list(da)
    db = [db] if isinstance(db, int) else list(db)
    return [d % a.dim() for d in da], [d % b.dim() for d in db]


def tensordot_contracts(a: Tensor, b: Tensor, dims=2) -> bool:
    """Whether ``torch.tensordot(a, b, dims)`` sums over at least one dimension (``dims=0`` does not)."""
    return bool(_tensordot_dims(a, b, dims)[0])


def tensordot(a: Tensor, b: Tensor, dims=2, *, method: str | MethodSpec = "tf32x3", backend: str = "auto") -> Tensor:
    """Emulated-FP32 ``torch.tensordot(a, b, dims)``: one GEMM over the contracted dimensions.

    ``dims`` as torch: an int (the last ``dims`` of ``a`` with the first of ``b``), two lists, or a tensor.
    ``dims=0`` (an outer product, no accumulation) is computed as torch does.
    """
    check_operands("tensordot", a, b)
    da, db = _tensordot_dims(a, b, dims)
    if len(da) != len(db):
        raise RuntimeError(f"tensordot: both dimension lists should have the same length, got {da} and {db}")
    for x, y in zip(da, db):
        if a.shape[x] != b.shape[y]:
            raise RuntimeError(f"tensordot: contracted dimensions need to match, but first has size {a.shape[x]} "
                               f"in dim {x} and second has size {b.shape[y]} in dim {y}")
    if not da or a.numel() == 0 or b.numel() == 0:
        return torch.tensordot(a, b, dims)
    free_a = [d for d in range(a.dim()) if d not in da]
    free_b = [d for d in range(b.dim()) if d not in db]
    k = math.prod([a.shape[d] for d in da])
    a2 = a.permute(free_a + da).reshape(-1, k)
    b2 = b.permute(db + free_b).reshape(k, -1)
    return matmul(a2, b2, method, backend=backend).reshape([a.shape[d] for d in free_a] + [b.shape[d] for d in free_b])


# --------------------------------------------------------------------------- bilinear, multi_dot


def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None, *,
             method: str | MethodSpec = "tf32x3", backend: str = "auto") -> Tensor:
    """Emulated-FP32 ``F.bilinear``: ``y_k = x1^T W_k x2 + b_k`` as two GEMMs (over ``x1``'s features, then
    ``x2``'s)."""
    check_operands("bilinear", input1, input2, weight, bias)
    if weight.dim() != 3 or input1.shape[:-1] != input2.shape[:-1] or input1.dim() == 0 or \
            (input1.shape[-1], input2.shape[-1]) != tuple(weight.shape[1:]) or \
            (bias is not None and tuple(bias.shape) != (weight.shape[0],)):
        raise RuntimeError(f"bilinear: shapes input1 {tuple(input1.shape)}, input2 {tuple(input2.shape)}, weight "
                           f"{tuple(weight.shape)} and bias {None if bias is None else tuple(bias.shape)} do not fit "
                           "(input1 (..., in1), input2 (..., in2), weight (out, in1, in2), bias (out,))")
    out_f, in1, in2 = weight.shape
    x1 = input1.reshape(-1, in1)
    x2 = input2.reshape(-1, in2)
    t = matmul(x1, weight.permute(1, 0, 2).reshape(in1, out_f * in2), method, backend=backend)
    y = matmul(t.reshape(-1, out_f, in2), x2.unsqueeze(-1), method, backend=backend).squeeze(-1)
    if bias is not None:
        y = y + bias
    return y.reshape((*input1.shape[:-1], out_f))


def _chain_order(dims: list[int]) -> list[list[int]]:
    """Matrix-chain split points minimising the products' cost (the classic dynamic programme torch uses)."""
    n = len(dims) - 1
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j] = math.inf
            for k in range(i, j):
                c = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if c < cost[i][j]:
                    cost[i][j], split[i][j] = c, k
    return split


def multi_dot(tensors: Sequence[Tensor], *, method: str | MethodSpec = "tf32x3", backend: str = "auto") -> Tensor:
    """Emulated-FP32 ``torch.linalg.multi_dot``: the chain in the cheapest order (first and last may be 1-D)."""
    tensors = list(tensors)
    check_operands("multi_dot", *tensors)
    if len(tensors) < 2 or any([t.dim() != 2 for t in tensors[1:-1]]) or not 1 <= tensors[0].dim() <= 2 or \
            not 1 <= tensors[-1].dim() <= 2:
        raise RuntimeError("multi_dot: expected at least two tensors, 1-D or 2-D at the ends and 2-D between")
    mats = list(tensors)
    if mats[0].dim() == 1:
        mats[0] = mats[0].unsqueeze(0)
    if mats[-1].dim() == 1:
        mats[-1] = mats[-1].unsqueeze(-1)
    for i in range(len(mats) - 1):
        if mats[i].shape[1] != mats[i + 1].shape[0]:
            raise RuntimeError(f"multi_dot: tensors {i} and {i + 1} with shapes {tuple(tensors[i].shape)} and "
                               f"{tuple(tensors[i + 1].shape)} cannot be multiplied")
    want = [n for n, keep in ((mats[0].shape[0], tensors[0].dim() == 2), (mats[-1].shape[1], tensors[-1].dim() == 2))
            if keep]
    if any([m.numel() == 0 for m in mats]):
        return torch.linalg.multi_dot(tensors)
    dims = [mats[0].shape[0]] + [m.shape[1] for m in mats]
    split = _chain_order(dims)

    def product(i: int, j: int) -> Tensor:
        if i == j:
            return mats[i]
        k = split[i][j]
        return matmul(product(i, k), product(k + 1, j), method, backend=backend)

    return product(0, len(mats) - 1).reshape(want)


# --------------------------------------------------------------------------- addmm and its kin


def add_scaled(input: Tensor, product: Callable[[], Tensor], shape: Sequence[int], beta=1,  # noqa: A002
               alpha=1) -> Tensor:
    """``beta * input + alpha * product()`` of result shape ``shape``, with torch's addmm semantics:
    ``product`` is called only when ``alpha != 0``, and ``input`` is ignored when ``beta == 0`` (its shape
    must still broadcast to ``shape``)."""
    shape = torch.Size(shape)
    if torch.broadcast_shapes(input.shape, shape) != shape:
        raise ValueError(f"input of shape {tuple(input.shape)} does not broadcast to the product's {tuple(shape)}")
    if alpha == 0:
        base = torch.zeros(shape, dtype=input.dtype, device=input.device)
        return base if beta == 0 else torch.add(base, input, alpha=beta)
    prod = product()
    if alpha != 1:
        prod = prod * alpha
    return prod if beta == 0 else torch.add(prod, input, alpha=beta)
