"""What splitting the weight at every call costs an eager emulated linear layer.

``EmulatedLinear`` splits its weight into pieces at each use (forward pieces in the forward, input-gradient
pieces in the backward), so that it can never compute with pieces of an older weight. This script times, per
layer shape (M, K, N), on one device and backend, the median wall time per call (host clock around a
synchronised batch of calls; the cases take turns, batch by batch):

* ``fp32``: ``nn.Linear`` (the baseline);
* ``emulated_fwd``: ``EmulatedLinear`` forward under ``torch.no_grad`` (an MD step's frozen-weight forward);
* ``emulated_fwd_bwd``: forward and backward, weight and input gradients (training);
* ``presplit_fwd``: the backend's ``linear`` with pieces split beforehand, the same product without the split;
  ``emulated_fwd - presplit_fwd`` is the split's share (the module's own overhead included).

Usage: ``PYTHONPATH=src python benchmarks/linear_eager.py [--device cuda] [--backend auto] [--method tf32x3]
[--shapes 64x256x256,1024x256x256] [--out results.csv]``. On CUDA the defaults are the README's speed-table
shapes and two PET-S edge shapes at 192 atoms (6,720 rows), which take the small-shape fallback (no split).
To compare two trees, run this same file with each tree's ``src`` first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time

import torch

import tcemu
from tcemu.emulation.dispatch import resolve_backend

CPU_SHAPES = "64x256x256,1024x256x256,8192x256x256,1024x1024x1024"
CUDA_SHAPES = "6720x256x256,6720x256x1024,604800x256x1024,604800x512x256,17280x1024x4096,8192x8192x8192"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def per_call_ms(cases: dict, device: torch.device, calls: int, repeats: int) -> dict[str, float]:
    """Median over ``repeats`` rounds of the wall time per call of each case; within a round the cases take
    turns (one batch of ``calls`` each), so that a drift in the machine's speed reaches all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    for name, (fn, grad) in cases.items():  # warm-up
        with grad():
            for _ in range(3):
                fn()
    _sync(device)
    for _ in range(repeats):
        for name, (fn, grad) in cases.items():
            with grad():
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                _sync(device)
            times[name].append((time.perf_counter() - t0) / calls * 1e3)
    return {name: statistics.median(t) for name, t in times.items()}


def time_shape(M: int, K: int, N: int, args: argparse.Namespace) -> list[dict]:
    device = torch.device(args.device)
    gen = torch.Generator(device="cpu").manual_seed(0)
    plain = torch.nn.Linear(K, N).to(device)
    emulated = tcemu.EmulatedLinear.from_linear(torch.nn.Linear(K, N).to(device), args.method, backend=args.backend)
    x = torch.randn(M, K, generator=gen).to(device)
    x_grad = x.clone().requires_grad_(True)
    spec = tcemu.get_method(args.method)
    be = resolve_backend(args.backend, device, spec)
    pieces = be.prepare_weight(emulated.weight, spec)

    def fwd_bwd(layer):
        layer.zero_grad(set_to_none=True)
        x_grad.grad = None
        layer(x_grad).sum().backward()

    cases = {
        "fp32": (lambda: plain(x), torch.no_grad),
        "emulated_fwd": (lambda: emulated(x), torch.no_grad),
        "presplit_fwd": (lambda: be.linear(x, emulated.weight, pieces, spec, emulated.bias), torch.no_grad),
        "fp32_fwd_bwd": (lambda: fwd_bwd(plain), torch.enable_grad),
        "emulated_fwd_bwd": (lambda: fwd_bwd(emulated), torch.enable_grad),
    }
    rows = []
    for name, ms in per_call_ms(cases, device, args.calls, args.repeats).items():
        rows.append(dict(case=name, M=M, K=K, N=N, method=args.method, backend=be.name, device=str(device),
                         ms_per_call=f"{ms:.4f}", torch=torch.__version__))
        print(f"{M}x{K}x{N} {name:18s} {ms:9.4f} ms", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--backend", default="auto", choices=["auto", "torch", "triton"])
    p.add_argument("--method", default="tf32x3")
    p.add_argument("--shapes", default=None, help="comma-separated MxKxN (default: per device)")
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default=None, help="CSV file to write")
    args = p.parse_args(argv)
    shapes = args.shapes or (CUDA_SHAPES if args.device.startswith("cuda") else CPU_SHAPES)
    rows = []
    for text in shapes.split(","):
        M, K, N = (int(v) for v in text.lower().split("x"))
        rows += time_shape(M, K, N, args)
    if args.out:
        with open(args.out, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
