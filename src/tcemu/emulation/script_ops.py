"""The ``tcemu::`` torch ops that rewritten TorchScript graphs call (:mod:`tcemu.emulation.script`).

One op per aten product that :func:`tcemu.emulate_` rewrites in a scripted model: the aten op's arguments in
its schema order (keyword-only ones positional, no defaults), then ``str method, str backend``::

    aten::matmul(Tensor self, Tensor other)          ->  tcemu::matmul(Tensor self, Tensor other, str method, str backend)
    aten::linear(Tensor input, Tensor weight, Tensor? bias)
        -> tcemu::linear(Tensor input, Tensor weight, Tensor? bias, str method, str grad_weight_method, str backend)

(:data:`OPS` lists them all; ``linear`` alone also names its weight gradient's method.) Each runs what
:func:`tcemu.emulation_mode` runs for the same torch call in eager code (its handlers: the same checks, the same
:func:`tcemu.matmul` / :func:`tcemu.linear` / :func:`tcemu.scaled_dot_product_attention`), so a scripted model
computes the bits of the eager emulated one; a call the emulation does not take (another dtype than float32,
``dropout_p``, a causal mask, shapes that torch refuses) runs the aten op itself, unchanged. The ops are
``CompositeImplicitAutograd``: autograd records what they run (tcemu's autograd functions), so backward and
double backward work as in eager code, and the coverage meter counts their products as emulated.

The names and schemas are the contract of the ops: tcemu's native library (:mod:`tcemu.native`) registers the
same ``tcemu::`` schemas in C++ and runs a saved rewritten model without Python. Where it was loaded before tcemu
is imported, the schemas it defined are kept and these kernels replace its own (the meter and the Triton
backend then serve the ops); loaded after, it defines nothing and these kernels stay.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from . import mode as M
from .attention import scaled_dot_product_attention
from .meter import labelled
from .methods import MethodSpec, get_method
from .ops import linear

__all__ = ["OPS", "ScriptOp"]


@dataclass(frozen=True)
class _Route:
    """What the eager mode's handlers read of the mode: the method and the backend."""

    method: MethodSpec
    backend: str


@functools.cache
def _route(method: str, backend: str) -> _Route:
    if backend not in ("auto", "torch", "triton"):
        raise ValueError(f"tcemu: unknown backend {backend!r} in a rewritten TorchScript graph; choose auto, torch "
                         "or triton")
    return _Route(get_method(method), backend)


@dataclass(frozen=True)
class ScriptOp:
    """A ``tcemu::`` op standing for one aten product in rewritten graphs.

    Attributes:
        name: the op's name (``tcemu::<name>``), the aten op's.
        aten: the aten overload it replaces (its schema is what the rewrite matches).
        schema: the ``tcemu::`` schema.
        call: ``call(route, *aten_args)``: the emulated result, or raises the eager mode's ``_Pass`` (the aten
            op runs instead).
    """

    name: str
    aten: Any
    schema: str
    call: Callable[..., torch.Tensor]

    @property
    def qualified_name(self) -> str:
        return f"tcemu::{self.name}"

    @property
    def aten_schema(self) -> str:
        return str(self.aten._schema)


def _two(handler):
    return lambda r, a, b: handler(r, (a, b), {})


def _scaled(handler):
    return lambda r, inp, x, y, beta, alpha: handler(r, (inp, x, y), {"beta": beta, "alpha": alpha})


def _sdpa(r, q, k, v, mask, dropout_p, is_causal, scale, enable_gqa):
    if not M._fp32(q, k, v) or dropout_p or is_causal or enable_gqa:
        raise M._Pass
    return scaled_dot_product_attention(q, k, v, mask, scale=scale, method=r.method, backend=r.backend)


_A = torch.ops.aten
_TAIL = "str method, str backend) -> Tensor"
#: (name, aten overload, arguments before the tail, call)
_TABLE: tuple[tuple[str, Any, str, Callable], ...] = (
    ("matmul", _A.matmul.default, "Tensor self, Tensor other", _two(M._h_matmul)),
    ("mm", _A.mm.default, "Tensor self, Tensor mat2", _two(M._h_mm)),
    ("bmm", _A.bmm.default, "Tensor self, Tensor mat2", _two(M._h_bmm)),
    ("mv", _A.mv.default, "Tensor self, Tensor vec", _two(M._h_mv)),
    ("dot", _A.dot.default, "Tensor self, Tensor tensor", _two(M._h_dot)),
    ("vdot", _A.vdot.default, "Tensor self, Tensor other", _two(M._h_dot)),
    ("inner", _A.inner.default, "Tensor self, Tensor other", _two(M._h_inner)),
    ("linalg_vecdot", _A.linalg_vecdot.default, "Tensor x, Tensor y, int dim",
     lambda r, x, y, dim: M._h_vecdot(r, (x, y), {"dim": dim})),
    ("linalg_multi_dot", _A.linalg_multi_dot.default, "Tensor[] tensors", lambda r, ts: M._h_multi_dot(r, (ts,), {})),
    ("chain_matmul", _A.chain_matmul.default, "Tensor[] matrices", lambda r, ts: M._h_multi_dot(r, (ts,), {})),
    ("bilinear", _A.bilinear.default, "Tensor input1, Tensor input2, Tensor weight, Tensor? bias",
     lambda r, x1, x2, w, b: M._h_bilinear(r, (x1, x2, w, b), {})),
    ("tensordot", _A.tensordot.default, "Tensor self, Tensor other, int[] dims_self, int[] dims_other",
     lambda r, a, b, da, db: M._h_tensordot(r, (a, b, (list(da), list(db))), {})),
    ("einsum", _A.einsum.default, "str equation, Tensor[] tensors, int[]? path",
     lambda r, eq, ts, path: M._h_einsum(r, (eq, list(ts)), {})),
    ("addmm", _A.addmm.default, "Tensor self, Tensor mat1, Tensor mat2, Scalar beta, Scalar alpha",
     _scaled(M._h_addmm)),
    ("addmv", _A.addmv.default, "Tensor self, Tensor mat, Tensor vec, Scalar beta, Scalar alpha", _scaled(M._h_addmv)),
    ("baddbmm", _A.baddbmm.default, "Tensor self, Tensor batch1, Tensor batch2, Scalar beta, Scalar alpha",
     _scaled(M._h_baddbmm)),
    ("addbmm", _A.addbmm.default, "Tensor self, Tensor batch1, Tensor batch2, Scalar beta, Scalar alpha",
     _scaled(M._h_addbmm)),
    ("scaled_dot_product_attention", _A.scaled_dot_product_attention.default,
     "Tensor query, Tensor key, Tensor value, Tensor? attn_mask, float dropout_p, bool is_causal, float? scale, "
     "bool enable_gqa", _sdpa),
)


def _linear_call(r: _Route, grad_weight: MethodSpec, x, w, b):
    if not M._fp32(x, w) or (b is not None and not M._fp32(b)) or w.dim() != 2 or x.dim() == 0:
        raise M._Pass
    return linear(x, w, b, r.method, grad_weight_method=grad_weight, backend=r.backend)


_LIB = torch.library.Library("tcemu", "FRAGMENT")  # noqa: TOR901 - kept alive for the process


def _kernel(op: ScriptOp, n_args: int):
    """The op's ``CompositeImplicitAutograd`` kernel: the emulated product, or the aten op."""
    label = op.aten._overloadpacket.__name__ if op.name != "scaled_dot_product_attention" else op.name
    arguments = op.aten._schema.arguments
    n_positional = sum(not a.kwarg_only for a in arguments)
    keywords = [a.name for a in arguments[n_positional:]]

    def aten(aten_args):
        return op.aten(*aten_args[:n_positional], **dict(zip(keywords, aten_args[n_positional:])))

    def kernel(*args):
        aten_args, tail = args[:n_args], args[n_args:]
        if op.name == "linear":
            method, grad_weight, backend = tail
            route, extra = _route(method, backend), (get_method(grad_weight),)
        else:
            method, backend = tail
            route, extra = _route(method, backend), ()
        try:
            with labelled(label):
                return op.call(route, *extra, *aten_args)
        except M._Pass:
            return aten(aten_args)

    return kernel


def _defined_schema(name: str) -> str | None:
    """The schema of ``tcemu::<name>`` if some library defined it already (tcemu's native library, loaded before
    tcemu was imported), else None."""
    try:
        handle = torch._C._dispatch_find_schema_or_throw(f"tcemu::{name}", "")
    except RuntimeError:
        return None
    return str(handle.schema())


def _define() -> dict[str, ScriptOp]:
    ops: dict[str, ScriptOp] = {}
    table = (*_TABLE, ("linear", _A.linear.default, "Tensor input, Tensor weight, Tensor? bias", _linear_call))
    for name, aten, args, call in table:
        tail = "str method, str grad_weight_method, str backend) -> Tensor" if name == "linear" else _TAIL
        op = ScriptOp(name, aten, f"{name}({args}, {tail}", call)
        defined = _defined_schema(name)
        if defined is None:
            _LIB.define(op.schema)
        elif defined != f"tcemu::{op.schema}":
            raise RuntimeError(f"tcemu: the op tcemu::{name} is already defined as {defined!r}, not as tcemu's "
                               f"{op.schema!r}: a tcemu native library of another version was loaded; load the one "
                               "built from this tcemu (python -m tcemu.native build)")
        with warnings.catch_warnings():  # (torch warns that the native library's kernel is overridden)
            warnings.simplefilter("ignore")
            _LIB.impl(name, _kernel(op, len(aten._schema.arguments)), "CompositeImplicitAutograd")
        ops[op.aten_schema] = op
    return ops


#: aten schema (as ``torch._C.Node.schema()`` prints it) -> the op that replaces it
OPS: dict[str, ScriptOp] = _define()
