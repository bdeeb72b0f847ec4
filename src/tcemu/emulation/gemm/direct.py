"""Direct launches of compiled Triton and Gluon kernels: the host path of small products.

``kernel[grid](...)`` binds and specializes every argument in Python on every call, and an emulated product makes two
or three launches, which on a server's host costs more than a small GEMM's GPU time
(benchmarks/results/h100/gemm_small_m/). :class:`DirectKernel` launches each *signature* of a kernel the normal way
once, keeps the compiled kernel Triton returns, and launches it afterwards through that kernel's own launcher with
the arguments in the order Triton passes them: the same binary on the same arguments, so the same bits.

A signature is everything Triton specializes a launch on: the constexprs (the caller's dict, made once per
combination; its identity names it, and the launcher keeps it alive), every integer argument's value, every tensor's
dtype and 16-byte alignment, every TMA descriptor's dtype, block and layout (and, to be safe, its shape and strides),
and the current device. Triton's own path runs instead
where the configuration turns direct launches off (``direct_launch``), a launch hook is set (profilers), Triton's
interpreter runs, or this Triton's compiled kernels lack what a direct launch uses (then once, logged).
The launch logic is tested on the CPU against a stand-in kernel, and on the GPU every kernel path gives the bits of
Triton's own launch (``tests/emulation/gemm/test_direct_launch.py``; docs/kernels.md says which ran where).

TMA descriptors are given as :class:`TmaDesc`: a direct launch hands it to the launcher as it is (the launcher
encodes the TMA map from its base, shape and strides); Triton's path gets Gluon's ``TensorDescriptor`` made from it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor

from ..._hw import interpreting
from ..configuration import setting

__all__ = ["DirectKernel", "TmaDesc", "constexprs", "direct_stats"]

log = logging.getLogger("tcemu.emulation.gemm")


class TmaDesc(NamedTuple):
    """A TMA descriptor's content: ``base`` tensor, ``shape`` and ``strides`` (elements, last stride 1),
    ``block_shape`` and shared-memory ``layout`` (Gluon's ``NVMMASharedLayout``)."""

    base: Tensor
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    block_shape: tuple[int, ...]
    layout: Any
    padding: str = "zero"

    def gluon(self):
        """Gluon's ``TensorDescriptor`` of the same content (checked by Gluon), for Triton's own launch path."""
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: PLC0415

        return TensorDescriptor(self.base, list(self.shape), list(self.strides), list(self.block_shape), self.layout,
                                self.padding)


class _Entry(NamedTuple):
    """A compiled kernel's launcher and what it is launched with besides the call's arguments."""

    launcher: Any
    function: Any
    packed_metadata: Any
    tail: tuple  # the constexpr parameters' values, after the positional arguments


_STATS = {"direct": 0, "triton": 0}

#: every launcher's constexpr dicts, one per combination (key: the kernel's kind first, then what it depends on)
_CONSTEXPRS: dict[tuple, dict] = {}


def constexprs(key: tuple, make: Callable[[], dict]) -> dict:
    """The constexpr dict (constexprs and launch options) of ``key``, made by ``make()`` the first time and kept
    unchanged: a launch reads it as it is, and a direct launch's signature names it by its identity."""
    hit = _CONSTEXPRS.get(key)
    if hit is None:
        hit = _CONSTEXPRS[key] = make()
    return hit


def direct_stats() -> dict[str, int]:
    """How many launches in this process went directly to a compiled kernel and how many through Triton's path."""
    return dict(_STATS)


#: what :func:`_tag` gives an argument whose pointer is not 16-byte aligned
_UNALIGNED = object()


def _tag(x):
    """What Triton specializes a non-integer argument on: a tensor's dtype, a descriptor's dtype, block and layout
    (and its shape and strides), :data:`_UNALIGNED` where the pointer is not 16-byte aligned; a scalar's type and
    value."""
    cls = x.__class__
    if cls is TmaDesc:
        base = x.base
        # shape and strides too: more than Triton specializes a descriptor on, to be safe (they change with M, N,
        # K, which the key holds anyway)
        return _UNALIGNED if base.data_ptr() & 15 else (base.dtype, x.block_shape, x.layout, tuple(x.shape),
                                                        tuple(x.strides))
    if x is None or cls is bool or cls is float:
        return (cls, x)
    return _UNALIGNED if x.data_ptr() & 15 else x.dtype  # a tensor


def _signature(args: tuple, constexprs: dict) -> tuple | None:
    """The specialization key of a launch (module docstring), or None where a pointer is not 16-byte aligned
    (Triton's path, which specializes on alignment, takes such launches)."""
    sig = (id(constexprs), torch.cuda.current_device(), *[x if x.__class__ is int else _tag(x) for x in args])
    return None if any(t is _UNALIGNED for t in sig) else sig


@functools.cache
def _cuda() -> bool:
    """Whether this process has CUDA (direct launches are CUDA launches)."""
    return torch.cuda.is_available()


def _hooks_set() -> bool:
    """Whether Triton's launch hooks are set (a profiler such as proton): then every launch takes Triton's path."""
    try:
        from triton import knobs  # noqa: PLC0415

        rt = knobs.runtime
        return _hook_active(rt.launch_enter_hook) or _hook_active(rt.launch_exit_hook)
    except (ImportError, AttributeError):
        return True


def _hook_active(hook) -> bool:
    """Whether a launch hook does something: set, and (Triton's ``HookChain``) with a function in its chain."""
    if hook is None:
        return False
    calls = getattr(hook, "calls", None)
    return calls is None or bool(calls)


class DirectKernel:
    """A Triton/Gluon kernel launched directly after its first launch per signature (module docstring).

    Call it as ``DirectKernel(kernel)(grid, args, constexprs)``, with ``args`` the kernel's non-constexpr parameters
    in order (TMA descriptors as :class:`TmaDesc`, for a kernel made with ``descriptors=True``) and ``constexprs`` the constexpr parameters and launch options
    (``num_warps``, ``num_stages``) as ``kernel[grid](*args, **constexprs)`` would take them; the dict must be made
    once per combination and kept unchanged (its identity is part of the signature).
    """

    def __init__(self, kernel, descriptors: bool = False) -> None:
        self.kernel = kernel
        self.descriptors = descriptors  # whether arguments may be TmaDesc (Gluon kernels)
        self._cache: dict[tuple, _Entry] = {}
        self._tails: dict[int, tuple[dict, tuple | None]] = {}
        self._unsupported = False

    def _tail(self, n_args: int, constexprs: dict) -> tuple | None:
        """The values of the parameters after the ``n_args`` positional ones, from ``constexprs`` or their
        defaults; None where one is missing (the launch then always takes Triton's path)."""
        key = id(constexprs)
        if key in self._tails:
            return self._tails[key][1]
        tail: list = []
        try:
            for p in self.kernel.params[n_args:]:
                if p.name in constexprs:
                    tail.append(constexprs[p.name])
                elif p.has_default:
                    tail.append(p.default)
                else:
                    raise KeyError(p.name)
            out: tuple | None = tuple(tail)
        except (AttributeError, KeyError) as exc:
            log.info("tcemu: %s is launched through Triton's path (parameter %s)", self.kernel, exc)
            out = None
        self._tails[key] = (constexprs, out)  # the dict kept alive: its identity is never another's
        return out

    def __call__(self, grid: tuple[int, ...], args: tuple, constexprs: dict) -> None:
        direct = (not self._unsupported and _cuda() and setting("direct_launch") and not interpreting()
                  and not _hooks_set())
        sig = _signature(args, constexprs) if direct else None
        if sig is not None:
            entry = self._cache.get(sig)
            if entry is not None:
                g = tuple(grid) + (1, 1)
                stream = torch._C._cuda_getCurrentRawStream(sig[1])
                entry.launcher(g[0], g[1], g[2], stream, entry.function, entry.packed_metadata, None, None, None,
                               *args, *entry.tail)
                _STATS["direct"] += 1
                return
        if self.descriptors:
            args = tuple(x.gluon() if x.__class__ is TmaDesc else x for x in args)
        compiled = self.kernel[grid](*args, **constexprs)
        _STATS["triton"] += 1
        if sig is not None:
            self._keep(sig, compiled, len(args), constexprs)

    def _keep(self, sig: tuple, compiled, n_args: int, constexprs: dict) -> None:
        """Keep a compiled kernel for direct launches of ``sig``, where it has what they use."""
        tail = self._tail(n_args, constexprs)
        if tail is None:
            return
        try:
            entry = _Entry(compiled.run, compiled.function, compiled.packed_metadata, tail)
        except AttributeError as exc:  # a Triton whose compiled kernels differ: its own path from now on
            self._unsupported = True
            log.info("tcemu: direct launches are off for %s (%s)", self.kernel, exc)
            return
        if entry.function is None or not callable(entry.launcher):
            return
        self._cache[sig] = entry
