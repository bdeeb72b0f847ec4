"""``emulation_mode``: emulate the products a module swap cannot reach.

Inside ``with tcemu.emulation_mode("tf32x3"):`` every float32 ``torch.matmul`` / ``@`` /
``torch.mm`` / ``torch.bmm`` / ``torch.addmm`` / ``F.linear`` call goes through
:func:`tcemu.matmul` / :func:`tcemu.linear` (with autograd). Other dtypes pass through
untouched. ``F.scaled_dot_product_attention`` is a single fused op: with ``attention=True`` its float32
calls without dropout or causal masking run :func:`tcemu.scaled_dot_product_attention` (fused emulated
kernels where they apply); otherwise it is not intercepted. ``matmuls=False`` leaves the matrix products
alone (attention only).

The mode sees every torch call made while it is active, so it costs host time on each op of eager code.
To emulate inside a few modules only (PET's attention blocks, say), :func:`tcemu.emulate_functional_` runs
just those modules' ``forward`` inside the mode.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from .attention import scaled_dot_product_attention
from .methods import MethodSpec, get_method
from .ops import linear, matmul

__all__ = ["emulation_mode"]

_MATMULS = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.mm, torch.Tensor.mm,
            torch.bmm, torch.Tensor.bmm}
_ADDMM = {torch.addmm, torch.Tensor.addmm}
_LINEAR = {F.linear, torch._C._nn.linear}
_SDPA = {F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention}
_SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


def _all_fp32(*tensors) -> bool:
    return all(isinstance(t, torch.Tensor) and t.dtype == torch.float32 for t in tensors)


class emulation_mode(TorchFunctionMode):  # noqa: N801 - used like a function: `with emulation_mode(...)`
    """Context manager routing float32 matrix products through the emulation.

    Args:
        method: emulation method (name or spec).
        backend: ``"auto"``, ``"torch"`` or ``"triton"``.
        attention: also route float32 ``F.scaled_dot_product_attention`` (no dropout, not causal, no
            grouped-query heads) through :func:`tcemu.scaled_dot_product_attention`.
        matmuls: route the matrix products listed above (default); ``False`` with ``attention=True``
            emulates attention only.
    """

    def __init__(self, method: str | MethodSpec = "tf32x3", *, backend: str = "auto", attention: bool = False,
                 matmuls: bool = True) -> None:
        super().__init__()
        if not (attention or matmuls):
            raise ValueError("emulation_mode(attention=False, matmuls=False) would emulate nothing: "
                             "set attention=True, matmuls=True or both")
        self.method = get_method(method)
        self.backend = backend
        self.attention = attention
        self.matmuls = matmuls

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.attention and func in _SDPA:
            a = dict(zip(_SDPA_ARGS, args)) | kwargs
            if (_all_fp32(a["query"], a["key"], a["value"]) and not a.get("dropout_p", 0.0)
                    and not a.get("is_causal", False) and not a.get("enable_gqa", False)):
                return scaled_dot_product_attention(a["query"], a["key"], a["value"], a.get("attn_mask"),
                                                    scale=a.get("scale"), method=self.method, backend=self.backend)
        if not self.matmuls:
            return func(*args, **kwargs)
        if func in _MATMULS and len(args) == 2 and not kwargs and _all_fp32(*args):
            return matmul(args[0], args[1], self.method, backend=self.backend)
        if func in _LINEAR and _all_fp32(*args[:2]) and (len(args) < 3 or args[2] is None or _all_fp32(args[2])):
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            return linear(args[0], args[1], bias, self.method, backend=self.backend)
        if func in _ADDMM and len(args) == 3 and _all_fp32(*args):
            beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
            if not set(kwargs) - {"beta", "alpha"}:
                prod = matmul(args[1], args[2], self.method, backend=self.backend)
                if alpha != 1:
                    prod = prod * alpha
                return prod + (args[0] if beta == 1 else beta * args[0])
        return func(*args, **kwargs)
