"""The methods a potential runs in: ``fp64`` (the reference), ``fp32``, or an emulation method, optionally with
``"+attn"`` (its attention blocks emulated too), and how a float32 model is put into one (:func:`apply_method`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from torch import nn

if TYPE_CHECKING:
    from tcemu.emulation.configuration import EmulationConfig

__all__ = ["ATTENTION_SUFFIX", "REFERENCE_METHODS", "apply_method", "check_method", "emulation_config"]

#: Methods that are not emulation methods: the float64 reference and plain float32.
REFERENCE_METHODS = ("fp64", "fp32")
#: Suffix of an emulation method that also emulates the potential's attention blocks.
ATTENTION_SUFFIX = "+attn"

def check_method(method: str) -> str:
    """Return ``method`` lower-cased if it is ``fp64``, ``fp32``, a tcemu emulation method, or one with
    ``"+attn"`` (:meth:`tcemu.EmulationConfig.from_method_string`), else raise."""
    m = str(method).strip().lower()
    if m in REFERENCE_METHODS:
        return m
    if m.removesuffix(ATTENTION_SUFFIX) in REFERENCE_METHODS:
        raise ValueError(f"{method!r}: '{ATTENTION_SUFFIX}' applies to emulation methods only")
    try:
        cfg = emulation_config(m)
    except ValueError as exc:
        from tcemu.emulation.methods import METHODS

        raise ValueError(f"unknown method {method!r} ({exc}); choose one of fp64, {', '.join(METHODS)}, "
                         f"or an emulation method with '{ATTENTION_SUFFIX}' (e.g. tf32x3{ATTENTION_SUFFIX})") from None
    return cfg.method_string


def emulation_config(method: str | EmulationConfig) -> EmulationConfig:
    """The :class:`tcemu.EmulationConfig` of an emulation method: a configuration as it is, a name as
    :meth:`~tcemu.EmulationConfig.from_method_string` reads it (``"tf32x3+attn"``: attention in the potential's
    attention blocks). Only ``"none"`` and ``"blocks"`` attention scopes apply to a potential."""
    from tcemu.emulation.configuration import EmulationConfig as Config

    cfg = method if isinstance(method, Config) else Config.from_method_string(method)
    if cfg.attention not in ("none", "blocks"):
        raise ValueError(f"attention scope {cfg.attention!r}: a potential emulates attention in its attention "
                         "blocks ('blocks', the '+attn' suffix) or not at all ('none')")
    return cfg


def apply_method(module: nn.Module, method: str | EmulationConfig, filter_fn: Callable | None = None,
                 attention_filter: Callable | None = None) -> nn.Module:
    """Put ``module`` (a float32 model) into ``method``: ``.double()`` for fp64, as is for fp32, else emulate.

    Emulation is :func:`tcemu.emulate_` in place (same parameters) by the configuration's method, weight-gradient
    method and backend (:func:`emulation_config`): the ``nn.Linear`` swap and the functional products of the
    modules ``filter_fn`` selects. With attention in ``"blocks"`` (``"+attn"``) the modules selected by
    ``attention_filter(module, fqn)`` also run their ``F.scaled_dot_product_attention`` emulated
    (:func:`tcemu.emulate_functional_`); a model without attention blocks (``attention_filter`` None) runs the
    plain method, with a warning.
    """
    name = method.strip().lower() if isinstance(method, str) else None
    if name == "fp64":
        return module.double()
    if name == "fp32":
        return module
    cfg = emulation_config(check_method(method) if name is not None else method)
    import tcemu

    module = tcemu.emulate_(module, cfg.method, filter_fn=filter_fn, grad_weight_method=cfg.grad_weight_method,
                            backend=cfg.backend)  # a bare nn.Linear is returned swapped
    if cfg.attention == "blocks":
        if attention_filter is None:  # nothing more to emulate: the plain method, said once per call
            import warnings

            warnings.warn(f"{cfg.method_string!r}: this model has no attention blocks that tcemu.mlip knows of, so "
                          f"it runs as {cfg.method!r}", stacklevel=2)
        else:
            tcemu.emulate_functional_(module, cfg.method, attention_filter, attention=True, matmuls=False,
                                      backend=cfg.backend)
    return module
