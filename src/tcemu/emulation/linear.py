"""``EmulatedLinear``: an ``nn.Linear`` whose products are emulated FP32 on Tensor Cores."""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .backends import defers_weight_split, resolve_backend
from .methods import MethodSpec
from .ops import GemmConfig, check_operands, linear_2d

__all__ = ["EmulatedLinear"]


class EmulatedLinear(nn.Linear):
    """Drop-in ``nn.Linear`` computing ``x @ W^T + b`` with an emulation method.

    The parameters are the layer's own (``weight``, ``bias``): state-dict keys, optimizers and
    hooks see no difference. The weight's pieces are split once and cached; the cache is keyed
    on the weight's storage and version counter, so it is rebuilt after any in-place change
    (optimizer step, ``load_state_dict``, ``.copy_``) and is never saved or pickled.

    FP64 layers (after ``.double()``) compute in FP64: there is nothing to emulate.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device: Any = None,
        dtype: torch.dtype | None = None,
        *,
        method: str | MethodSpec = "tf32x3",
        grad_weight_method: str | MethodSpec | None = None,
        backend: str = "auto",
    ) -> None:
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self.set_method(method, grad_weight_method=grad_weight_method, backend=backend)

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_linear(
        cls,
        linear: nn.Linear,
        method: str | MethodSpec = "tf32x3",
        *,
        grad_weight_method: str | MethodSpec | None = None,
        backend: str = "auto",
    ) -> EmulatedLinear:
        """A new module sharing ``linear``'s parameters, buffers and hooks (nothing is copied)."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"from_linear expects an nn.Linear, got {type(linear).__name__}")
        new = cls.__new__(cls)
        # Same Parameter objects; the module-level dicts are fresh so the two modules stay independent.
        new.__dict__.update({k: (copy.copy(v) if isinstance(v, dict) else v) for k, v in linear.__dict__.items()})
        new._tcemu_original_class = type(linear)
        new.set_method(method, grad_weight_method=grad_weight_method, backend=backend)
        return new

    def to_linear(self) -> nn.Linear:
        """The plain layer back, with the same parameters (the inverse of :meth:`from_linear`)."""
        cls = getattr(self, "_tcemu_original_class", nn.Linear)
        old = cls.__new__(cls)
        state = {k: (copy.copy(v) if isinstance(v, dict) else v) for k, v in self.__dict__.items()}
        for key in ("gemm_config", "_tcemu_cache", "_tcemu_original_class"):
            state.pop(key, None)
        old.__dict__.update(state)
        return old

    def set_method(
        self,
        method: str | MethodSpec,
        *,
        grad_weight_method: str | MethodSpec | None = None,
        backend: str = "auto",
    ) -> None:
        """Change the method (and drop cached weight pieces)."""
        self.gemm_config = GemmConfig.make(method, grad_weight_method=grad_weight_method, backend=backend)
        self._tcemu_cache = None

    @property
    def method(self) -> MethodSpec:
        return self.gemm_config.forward

    # ------------------------------------------------------------------ forward

    def _prepared_weight(self, cfg: GemmConfig) -> Any:
        weight = self.weight
        backend = resolve_backend(cfg.backend, weight.device, cfg.forward)
        if defers_weight_split(backend):
            return None
        if torch.compiler.is_compiling() or weight.is_inference():
            # no Python-side cache inside a compiled graph; inference tensors have no version counter
            return backend.prepare_weight(weight, cfg.forward)
        key = (weight.data_ptr(), weight._version, weight.device, weight.shape, cfg.forward.name, backend.name)
        cache = self._tcemu_cache
        if cache is None or cache[0] != key:
            cache = (key, backend.prepare_weight(weight, cfg.forward))
            self._tcemu_cache = cache
        return cache[1]

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002 - nn.Linear's signature
        if input.dtype == torch.float64 and self.weight.dtype == torch.float64:
            return F.linear(input, self.weight, self.bias)
        check_operands("EmulatedLinear", input, self.weight, self.bias)
        if input.shape[-1] != self.in_features:
            raise ValueError(
                f"EmulatedLinear: input has {input.shape[-1]} features, layer expects {self.in_features}"
            )
        cfg = self.gemm_config
        lead = input.shape[:-1]
        y = linear_2d(input.reshape(-1, self.in_features), self.weight, self.bias, cfg, self._prepared_weight(cfg))
        return y.reshape(*lead, self.out_features)

    # ------------------------------------------------------------------ housekeeping

    def extra_repr(self) -> str:
        cfg = self.gemm_config
        text = f"{super().extra_repr()}, method={cfg.forward.name}"
        if cfg.grad_weight is not cfg.forward:
            text += f", grad_weight_method={cfg.grad_weight.name}"
        return text + f", backend={cfg.backend}"

    def __getstate__(self) -> dict:
        state = super().__getstate__() if hasattr(super(), "__getstate__") else self.__dict__.copy()
        state = dict(state)
        state["_tcemu_cache"] = None  # cached pieces are derived data: never pickled or deep-copied
        return state
