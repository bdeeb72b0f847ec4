"""``EmulatedLinear``: an ``nn.Linear`` whose products are emulated FP32 on Tensor Cores.

A module is emulated in place by changing its class (:func:`emulate_module_`), not by building a new module:
aliases (one layer under two names), hooks, the state dict, optimizer references and parametrizations all
stay as they are, and :func:`restore_module_` puts the class back. The class an ``nn.Linear`` of class ``C``
takes is ``EmulatedLinear`` for ``nn.Linear`` itself and a cached subclass ``(EmulatedLinear, C)`` for a
subclass ``C`` that does not override ``forward``, so that ``isinstance(layer, C)`` and ``C``'s methods stay.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.utils import parametrize

from .methods import MethodSpec
from .ops import GemmConfig, OperandError, check_operands, compiled_fp32_linear, emulable, linear_2d

__all__ = ["EmulatedLinear", "emulate_module_", "restore_module_", "overrides_forward"]


class EmulatedLinear(nn.Linear):
    """Drop-in ``nn.Linear`` computing ``x @ W^T + b`` with an emulation method.

    The parameters are the layer's own (``weight``, ``bias``): state-dict keys, optimizers and hooks see no
    difference. The weight is split into its pieces at every use, in the layout the GEMM needs (the forward's
    in the forward; the input gradient's in the backward, from the weight autograd saved), and not at all where
    a small GEMM falls back to SGEMM: nothing derived from the weight is kept between calls, so no in-place
    change (``.data`` edits, fused optimizers, numpy views, parametrizations) can leave a layer computing with
    an older weight.

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
        """A new module sharing ``linear``'s parameters, buffers and hooks (nothing is copied).

        Its class is the emulated class of ``linear``'s (a subclass of both); to emulate ``linear`` itself,
        keeping its identity, use :func:`tcemu.emulate_`.
        """
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"from_linear expects an nn.Linear, got {type(linear).__name__}")
        cfg = GemmConfig.make(method, grad_weight_method=grad_weight_method, backend=backend)
        new = _shallow_copy(linear, _emulated_class_of(linear))
        _finish_emulation(new, cfg)
        return new

    def to_linear(self) -> nn.Linear:
        """A new plain layer with the same parameters (the inverse of :meth:`from_linear`)."""
        old = _shallow_copy(self, _plain_class_of(self))
        _finish_restore(old)
        return old

    def set_method(
        self,
        method: str | MethodSpec,
        *,
        grad_weight_method: str | MethodSpec | None = None,
        backend: str = "auto",
    ) -> None:
        """Change the method, the weight gradient's method or the backend."""
        self.gemm_config = GemmConfig.make(method, grad_weight_method=grad_weight_method, backend=backend)
        self._tcemu_sgemm_key = self.gemm_config.sgemm_key  # kept with gemm_config (a constant under compile)

    @property
    def method(self) -> MethodSpec:
        return self.gemm_config.forward

    # ------------------------------------------------------------------ forward

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002 - nn.Linear's signature
        weight, bias = self.weight, self.bias  # read once: a parametrization computes the weight at each read
        if torch.compiler.is_compiling():
            # the layer's own key (a constant string), not its GemmConfig, which layers share: one guard each
            y = compiled_fp32_linear(getattr(self, "_tcemu_sgemm_key", None), input, weight, bias)
            if y is not None:
                return y
        if input.dtype == torch.float64 and weight.dtype == torch.float64:
            return F.linear(input, weight, bias)
        operands = (input, weight) if bias is None else (input, weight, bias)
        if input.dtype == weight.dtype == torch.float32 and not emulable(*operands):
            return F.linear(input, weight, bias)  # sparse or meta tensors, two devices: torch's result or error
        check_operands("EmulatedLinear", input, weight, bias)
        if input.dim() == 0:
            raise OperandError("EmulatedLinear: the input is a 0-d tensor; it needs a last dimension of "
                             f"in_features = {self.in_features} (reshape it to (..., {self.in_features}))")
        if input.shape[-1] != weight.shape[1]:
            raise OperandError(
                f"EmulatedLinear: input has {input.shape[-1]} features, layer expects {weight.shape[1]}"
            )
        lead = input.shape[:-1]
        y = linear_2d(input.reshape(lead.numel(), input.shape[-1]), weight, bias, self.gemm_config)
        return y.reshape(*lead, weight.shape[0])

    # ------------------------------------------------------------------ housekeeping

    def extra_repr(self) -> str:
        cfg = self.gemm_config
        text = f"{super().extra_repr()}, method={cfg.forward.name}"
        if cfg.grad_weight is not cfg.forward:
            text += f", grad_weight_method={cfg.grad_weight.name}"
        return text + f", backend={cfg.backend}"

    def __reduce_ex__(self, protocol: Any) -> Any:
        """Pickling (and ``copy.deepcopy``) of an emulated subclass made at run time: rebuilt from its base."""
        base = type(self).__dict__.get("_tcemu_base")
        if base is None:
            return super().__reduce_ex__(protocol)
        return _new_emulated, (base,), self.__getstate__()


# --------------------------------------------------------------------------- classes

_EMULATED_CLASSES: dict[type, type] = {}


def overrides_forward(mod: nn.Module) -> bool:
    """Whether ``mod`` is an ``nn.Linear`` whose class has its own ``forward`` (a swap cannot reach its
    products: the class computes them itself)."""
    return (isinstance(mod, nn.Linear) and not isinstance(mod, EmulatedLinear)
            and type(mod).forward is not nn.Linear.forward)


def _emulated_class(cls: type) -> type:
    """The class an un-parametrized ``nn.Linear`` of class ``cls`` takes when emulated."""
    if issubclass(cls, EmulatedLinear):
        return cls
    if cls is nn.Linear:
        return EmulatedLinear
    emulated = _EMULATED_CLASSES.get(cls)
    if emulated is None:
        name = f"Emulated{cls.__name__}"
        emulated = type(name, (EmulatedLinear, cls), {
            "_tcemu_base": cls, "__module__": __name__, "__qualname__": name,
            "__doc__": f"{cls.__qualname__} with its products emulated (see EmulatedLinear)."})
        _EMULATED_CLASSES[cls] = emulated
    return emulated


def _new_emulated(base: type) -> EmulatedLinear:
    """An uninitialised instance of ``base``'s emulated class (for unpickling)."""
    cls = _emulated_class(base)
    return cls.__new__(cls)


def _plain_class(cls: type) -> type:
    """The inverse of :func:`_emulated_class` (``nn.Linear`` for ``EmulatedLinear`` and its own subclasses)."""
    base = cls.__dict__.get("_tcemu_base")
    if base is not None:
        return base
    return nn.Linear if issubclass(cls, EmulatedLinear) else cls


def _rebased(param_cls: type, base: type) -> type:
    """torch's per-module parametrization class (``Parametrized<Base>``, its properties in its own dict) on a
    new base. ``remove_parametrizations`` restores ``__bases__[0]``, so that stays the base of the module."""
    if param_cls.__bases__[0] is base:
        return param_cls
    namespace = {k: v for k, v in param_cls.__dict__.items() if k not in ("__dict__", "__weakref__")}
    return type(param_cls.__name__, (base,), namespace)


def _emulated_class_of(mod: nn.Linear) -> type:
    cls = type(mod)
    if parametrize.is_parametrized(mod):
        return _rebased(cls, _emulated_class(cls.__bases__[0]))
    return _emulated_class(cls)


def _plain_class_of(mod: nn.Module) -> type:
    cls = type(mod)
    if parametrize.is_parametrized(mod):
        return _rebased(cls, _plain_class(cls.__bases__[0]))
    return _plain_class(cls)


def _shallow_copy(mod: nn.Module, cls: type) -> nn.Module:
    """A new module of class ``cls`` with ``mod``'s attributes (the same tensors; its own dicts)."""
    new = cls.__new__(cls)
    new.__dict__.update({k: (copy.copy(v) if isinstance(v, dict) else v) for k, v in mod.__dict__.items()})
    return new


def _finish_emulation(mod: EmulatedLinear, cfg: GemmConfig) -> None:
    mod.gemm_config = cfg
    mod._tcemu_sgemm_key = cfg.sgemm_key
    if isinstance(mod, LazyModuleMixin) and mod.has_uninitialized_params():
        # materialisation turns the module into its cls_to_become: the emulated one (its first forward, which
        # runs right after, is EmulatedLinear.forward already)
        mod.cls_to_become = _emulated_class(type(mod).cls_to_become)


def _finish_restore(mod: nn.Module) -> None:
    mod.__dict__.pop("gemm_config", None)
    mod.__dict__.pop("_tcemu_sgemm_key", None)
    mod.__dict__.pop("cls_to_become", None)


def emulate_module_(mod: nn.Linear, cfg: GemmConfig) -> EmulatedLinear:
    """Emulate ``mod`` in place (its class changes; the object, its parameters and hooks stay).

    Raises:
        TypeError: ``mod`` is not an ``nn.Linear``, or its class overrides ``forward`` (its products are
            computed by its own code: emulate those with ``tcemu.emulate_functional_``).
    """
    if not isinstance(mod, nn.Linear):
        raise TypeError(f"tcemu: only nn.Linear modules can be emulated, got {type(mod).__name__}")
    if overrides_forward(mod):
        raise TypeError(f"tcemu: {type(mod).__name__} overrides nn.Linear.forward, so a class swap would replace "
                        "its own computation; emulate its products with tcemu.emulate_functional_ instead")
    mod.__class__ = _emulated_class_of(mod)
    _finish_emulation(mod, cfg)
    return mod


def restore_module_(mod: EmulatedLinear) -> nn.Linear:
    """Undo :func:`emulate_module_` in place: the original class back, the same object."""
    mod.__class__ = _plain_class_of(mod)
    _finish_restore(mod)
    return mod
