"""e3nn's generated code in eager form, so that the emulation sees its products.

e3nn's ``o3.Linear`` and ``o3.TensorProduct`` (and its subclasses: ``FullyConnectedTensorProduct``, ...)
generate their forward as ``torch.fx`` code (``torch.tensordot`` / ``torch.einsum`` on the irreps' blocks) and,
by default, compile it with TorchScript (``e3nn.set_optimization_defaults(jit_script_fx=True)``: always in
e3nn 0.4, the version mace-torch pins; in e3nn 0.5-0.6 for torch < 2.10, ``jit_mode="script"``). A scripted
module's ops are invisible to a torch-function mode, so :func:`tcemu.emulation_mode` cannot emulate them. e3nn
0.4 also recompiles the code with TorchScript on every ``copy.deepcopy`` and pickle.

:func:`make_eager_` rebuilds the code of a built module with e3nn's own code generators from the module's
attributes (no scripting), checks it against the scripted code on a seeded random input, and installs it as a
plain submodule (taken off e3nn's list of compiled functions, so that copies and pickles keep it eager). The
eager code computes what the scripted code does (both FP32 aten ops). A module whose code cannot be rebuilt keeps
its scripted code, whose graphs :func:`tcemu.emulate_` then rewrites (:mod:`tcemu.emulation.script`).
"""

from __future__ import annotations

import sys

import torch
from torch import nn

__all__ = ["make_eager_"]


def _o3():
    """e3nn.o3 if the process imported it (a model holding e3nn modules has)."""
    return sys.modules.get("e3nn.o3")


def _computes(scripted: torch.jit.ScriptModule) -> bool:
    """Whether a compiled function runs any aten op (e3nn's placeholder for an uncompiled ``right`` does not)."""
    return any(n.kind().startswith("aten::") for n in scripted.graph.nodes())


def _codegen_names(mod: nn.Module) -> list[str]:
    return list(getattr(mod, "__codegen__", None) or [])


def _is_e3nn_linear(mod: nn.Module) -> bool:
    o3 = _o3()
    return o3 is not None and isinstance(mod, o3.Linear)


def _is_e3nn_tensor_product(mod: nn.Module) -> bool:
    o3 = _o3()
    return o3 is not None and isinstance(mod, o3.TensorProduct)


def _like(mod: nn.Module) -> tuple[torch.device, torch.dtype]:
    t = mod.output_mask if isinstance(getattr(mod, "output_mask", None), torch.Tensor) else next(mod.buffers())
    dtype = t.dtype if t.is_floating_point() else torch.get_default_dtype()
    return t.device, dtype


def _linear_code(mod: nn.Module) -> dict[str, nn.Module]:
    from e3nn.o3._linear import _codegen_linear  # noqa: PLC0415

    f_in = f_out = None
    if mod.internal_weights and mod.weight.dim() == 3:  # f_in, f_out channels: weight (f_in, f_out, numel)
        f_in, f_out = mod.weight.shape[:2]
    graphmod, _, _ = _codegen_linear(mod.irreps_in, mod.irreps_out, mod.instructions, f_in, f_out,
                                     shared_weights=mod.shared_weights, optimize_einsums=mod._optimize_einsums)
    return {"_compiled_main": graphmod}


def _tensor_product_code(mod: nn.Module, names: list[str]) -> dict[str, nn.Module]:
    from e3nn.o3._tensor_product import _tensor_product as tp  # noqa: PLC0415

    args = (mod.irreps_in1, mod.irreps_in2, mod.irreps_out, mod.instructions, mod.shared_weights,
            mod._specialized_code, mod._optimize_einsums)
    generators = {  # e3nn >= 0.5.2 keeps a list of code providers; the first that gives code wins
        "_compiled_main_left_right": getattr(tp, "_CODEGEN_PROVIDERS_LEFT_RIGHT",
                                             [tp.codegen_tensor_product_left_right]),
        "_compiled_main_right": getattr(tp, "_CODEGEN_PROVIDERS_RIGHT", [tp.codegen_tensor_product_right]),
    }
    out: dict[str, nn.Module] = {}
    for name in names:
        for make in generators[name]:
            graphmod = make(*args)
            if graphmod is not None:
                out[name] = graphmod
                break
    return out


def _probe_inputs(mod: nn.Module, name: str, device: torch.device, dtype: torch.dtype) -> tuple:
    """Seeded random arguments of the compiled function ``name``, as the module's forward passes them."""
    gen = torch.Generator(device=device).manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=gen, device=device, dtype=dtype)

    n = 3
    if name == "_compiled_main":  # o3.Linear: (features, weight, bias)
        f_in = mod.weight.shape[0] if mod.internal_weights and mod.weight.dim() == 3 else None
        x = rand(n, mod.irreps_in.dim) if f_in is None else rand(n, f_in, mod.irreps_in.dim)
        w = mod.weight if mod.weight.numel() or not mod.weight_numel else (
            rand(mod.weight_numel) if mod.shared_weights else rand(n, mod.weight_numel))
        b = mod.bias if mod.bias.numel() or not mod.bias_numel else (
            rand(mod.bias_numel) if mod.shared_weights else rand(n, mod.bias_numel))
        return x, w, b
    w = mod.weight if mod.weight.numel() or not mod.weight_numel else (
        rand(mod.weight_numel) if mod.shared_weights else rand(n, mod.weight_numel))
    if name == "_compiled_main_right":
        return rand(n, mod.irreps_in2.dim), w
    return rand(n, mod.irreps_in1.dim), rand(n, mod.irreps_in2.dim), w


def _regenerate(mod: nn.Module, names: list[str]) -> dict[str, nn.Module] | str:
    """The eager code of ``mod``'s scripted functions ``names``, checked against them, or why it cannot be made."""
    try:
        code = _linear_code(mod) if _is_e3nn_linear(mod) else _tensor_product_code(mod, names)
    except Exception as exc:  # noqa: BLE001 - another e3nn version's internals: reported, not fatal
        return f"e3nn's code generator failed on it ({type(exc).__name__}: {exc})"
    device, dtype = _like(mod)
    checked = {}
    for name, graphmod in code.items():
        old = getattr(mod, name, None)
        if not isinstance(old, torch.jit.ScriptModule):
            continue
        graphmod = graphmod.to(device=device, dtype=dtype)
        try:
            with torch.no_grad():
                args = _probe_inputs(mod, name, device, dtype)
                torch.testing.assert_close(graphmod(*args), old(*args), rtol=1e-5, atol=1e-5)
        except Exception as exc:  # noqa: BLE001 - a mismatch or a wrong guess of the arguments
            return f"its rebuilt code does not reproduce the scripted code ({type(exc).__name__}: {exc})"
        checked[name] = graphmod
    return checked


def make_eager_(mod: nn.Module) -> list[str]:
    """Replace ``mod``'s own TorchScript-compiled e3nn code by eager code, in place (see the module docstring).

    Returns the names of the replaced functions ([] if ``mod`` is not an e3nn module with scripted code, or its
    code could not be rebuilt: the reason is kept as ``mod._tcemu_codegen_failure``)."""
    names = [n for n in _codegen_names(mod)
             if isinstance(getattr(mod, n, None), torch.jit.ScriptModule) and _computes(getattr(mod, n))]
    if not names or not (_is_e3nn_linear(mod) or _is_e3nn_tensor_product(mod)):
        return []
    code = _regenerate(mod, names)
    if isinstance(code, str):
        mod._tcemu_codegen_failure = code
        return []
    for name, graphmod in code.items():
        setattr(mod, name, graphmod)
        mod.__codegen__ = [n for n in mod.__codegen__ if n != name]  # copies and pickles keep it eager
    return list(code)
