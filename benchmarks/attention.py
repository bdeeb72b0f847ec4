"""Attention benchmark: tcemu's emulated attention against torch's float32 SDPA, on PET's shapes (issue 7).

PET runs attention over each atom's neighbours: batch = atoms, 8 heads, L = neighbours + 1 tokens, head
dimension 32 (PET S: L = 41 for the water box; S-nn32: 47; M: 8 heads of 48, L = 48), with an additive mask
(log cutoff weights) shared by the heads that needs a gradient for the forces. One run measures, on the same
inputs (Q, K, V permuted views of one (B, L, 3, H, D) projection, as PET makes them):

* ``torch`` / ``fp32``: ``F.scaled_dot_product_attention`` in float32, torch's own choice of kernel (on an
  H200 the memory-efficient CUTLASS kernel; what PET runs in the MD step);
* ``torch-math`` / ``fp32``: the same with the math backend (cuBLAS batched GEMMs and a softmax);
* ``tcemu`` / method: the fused Triton kernels (``backend="triton"``), TF32x3, BF16x3, BF16x6;
* ``tcemu-reference`` / ``tf32x3``: ``sdpa_reference`` (both products by ``tcemu.matmul``, its GEMM kernels).

Directions: ``fwd`` (output only, no graph) and ``fwd_bwd`` (output, then the gradients of the projection and
the mask). Timing with ``triton.testing.do_bench`` (CUDA events, L2 flushed), median and 20th/80th percentiles
over ``--rep`` ms of repeats. Errors against FP64 (torch's math SDPA in float64 on the same inputs), normwise:
``err_out`` of the output, ``err_dqkv`` of the projection's gradient, ``err_dmask`` of the mask's.

``--variants "FW,BW[,FR,BR[,HPP[,NS]]];..."`` sweeps the fused kernels' launch: warps of the forward and
backward kernels, optionally a register cap per thread (``maxnreg``; 0 = the library's choice, -1 = none), heads
per forward program (``attention.HEADS_PER_PROGRAM``; 0 = the library's) and the forward's pipeline stages
(``num_stages``; 0 = Triton's default); the ``config`` column records them.

Output: a result file (``tcemu._results``: long rows with their provenance), one measured case per (impl,
method, direction, B, H, L, D, config), metrics ``UNITS``; a case that fails records its ``error`` and the run
goes on.
Stored runs: ``benchmarks/results/h200/attention/``.

Usage: ``PYTHONPATH=src python3 benchmarks/attention.py --out out/attention.csv``; on a machine without a GPU
``--device cpu --shapes tiny --impls torch,torch-math,tcemu-reference`` times with the host clock (the fused
kernels need CUDA, or ``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from tcemu._results import Provenance, from_wide, write_results

#: what identifies a measured case, and every metric's unit
CASE_FIELDS = ("direction", "B", "H", "L", "D", "config")
UNITS = {"median_ms": "ms", "p20_ms": "ms", "p80_ms": "ms", "speedup_vs_torch_fp32": "x", "err_out": "rel",
         "err_dqkv": "rel", "err_dmask": "rel", "error": "text"}
#: (name, B, H, L, D): PET's attention at 17,280 atoms
SHAPES = {"pet-s": (17280, 8, 41, 32), "pet-s-nn32": (17280, 8, 47, 32), "pet-m": (17280, 8, 48, 48),
          "tiny": (3, 2, 9, 8)}  # tiny: the CPU smoke test
IMPLS = ("torch", "torch-math", "tcemu", "tcemu-reference")


def make_inputs(B: int, H: int, L: int, D: int, device: str = "cuda",
                seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PET-like float64 projection (B, L, 3, H, D), log-cutoff mask (B, 1, L, L) and output cotangent."""
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(B, L, 3, H, D, dtype=torch.float64, device=device, generator=gen)
    mask = torch.log(torch.rand(B, 1, L, L, dtype=torch.float64, device=device, generator=gen) * 0.9 + 0.05)
    g = torch.randn(B, H, L, D, dtype=torch.float64, device=device, generator=gen)
    return x, mask, g


def time_ms(fn, device: str, rep_ms: int) -> tuple[float, float, float]:
    """Median, 20th and 80th percentile in ms: CUDA events (``triton.testing.do_bench``, L2 flushed) on CUDA,
    the host clock elsewhere."""
    if device == "cuda":
        import triton

        return tuple(triton.testing.do_bench(fn, rep=rep_ms, quantiles=[0.5, 0.2, 0.8]))
    fn()
    times = []
    while not times or (sum(times) < rep_ms and len(times) < 100):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    q = statistics.quantiles(times, n=10) if len(times) > 1 else times * 9
    return statistics.median(times), q[1], q[7]


def attention_fn(impl: str, method: str):
    import tcemu
    from tcemu.emulation.attention import sdpa_reference

    if impl == "torch":
        return lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    if impl == "torch-math":
        def math_sdpa(q, k, v, m):
            with sdpa_kernel(SDPBackend.MATH):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=m)
        return math_sdpa
    if impl == "tcemu":
        return lambda q, k, v, m: tcemu.scaled_dot_product_attention(q, k, v, m, method=method, backend="triton")
    return lambda q, k, v, m: sdpa_reference(q, k, v, m, method=method, backend="auto")


def run_once(fn, x: torch.Tensor, mask: torch.Tensor, g: torch.Tensor, backward: bool):
    """Output (and with ``backward`` the gradients of x and mask) of fn on PET's permuted views of x."""
    q, k, v = x.permute(2, 0, 3, 1, 4)
    if not backward:
        with torch.no_grad():
            return (fn(q, k, v, mask),)
    o = fn(q, k, v, mask)
    return (o, *torch.autograd.grad(o, (x, mask), g))


def _errors(got, ref) -> list[float]:
    return [((a.double() - r).norm() / r.norm()).item() for a, r in zip(got, ref)]


def set_launch(variant: tuple[int, ...] | None) -> None:
    """Override the fused kernels' launch (forward warps, backward warps[, forward maxnreg, backward maxnreg[,
    heads per program[, forward num_stages]]]) for a sweep; None restores the library's choice."""
    from tcemu.emulation import attention

    orig = getattr(attention._launch_args, "library_choice", attention._launch_args)
    if not hasattr(set_launch, "heads_per_program"):
        set_launch.heads_per_program = attention.HEADS_PER_PROGRAM
    if variant is None:
        attention._launch_args = orig
        attention.HEADS_PER_PROGRAM = set_launch.heads_per_program
        return
    fw, bw, fr, br, hpp, ns = (tuple(variant) + (0, 0, 0, 0))[:6]
    attention.HEADS_PER_PROGRAM = hpp or set_launch.heads_per_program

    def launch_args(spec, L, D, backward=False):
        a = dict(orig(spec, L, D, backward), num_warps=bw if backward else fw)
        cap = br if backward else fr
        if cap > 0:
            a["maxnreg"] = cap
        elif cap < 0:
            a.pop("maxnreg", None)
        if ns and not backward:
            a["num_stages"] = ns
        return a

    launch_args.library_choice = orig
    attention._launch_args = launch_args


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--shapes", default="pet-s,pet-m", help="names; name:B sets the batch (atoms), e.g. pet-s:192")
    p.add_argument("--impls", default=",".join(IMPLS), help="which implementations (the first is the baseline)")
    p.add_argument("--methods", default="tf32x3,bf16x3,bf16x6")
    p.add_argument("--variants", default="", help="FW,BW[,FR,BR[,HPP[,NS]]][;...]: fused kernels' launches to sweep")
    p.add_argument("--rep", type=int, default=300, help="ms of timed repeats per measurement")
    p.add_argument("--out", default="out/attention.csv", help="result file")
    args = p.parse_args(argv)
    prov = Provenance.current(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    variants = [tuple(int(w) for w in s.split(",")) for s in args.variants.split(";")] if args.variants else [None]
    for shape in args.shapes.split(","):
        name, _, batch = shape.partition(":")  # "pet-s:192": PET S's heads at 192 atoms
        B, H, L, D = SHAPES[name]
        B = int(batch) if batch else B
        x64, m64, g64 = make_inputs(B, H, L, D, args.device)
        # FP64 reference: the output and both gradients (the forward's error is against its first entry)
        ref = run_once(attention_fn("torch-math", "fp32"), x64.requires_grad_(True), m64.requires_grad_(True), g64, True)
        x64.requires_grad_(False), m64.requires_grad_(False)
        x = x64.float().requires_grad_(True)
        m = m64.float().requires_grad_(True)
        g = g64.float()
        impls = args.impls.split(",")
        cases = [(i, "fp32", None) for i in ("torch", "torch-math") if i in impls]
        cases += [("tcemu", mth, w) for mth in args.methods.split(",") for w in variants if "tcemu" in impls]
        cases += [("tcemu-reference", "tf32x3", None)] if "tcemu-reference" in impls else []
        base = {}
        for impl, method, variant in cases:
            set_launch(variant)
            fn = attention_fn(impl, method)
            for direction in ("fwd", "fwd_bwd"):
                bwd = direction == "fwd_bwd"
                row = dict(impl=impl, method=method, direction=direction, B=B, H=H, L=L, D=D,
                           config=f"launch {','.join(map(str, variant))}" if variant else "")
                try:
                    got = run_once(fn, x, m, g, bwd)
                    errs = _errors(got, ref)
                    row.update(err_out=errs[0], **({"err_dqkv": errs[1], "err_dmask": errs[2]} if bwd else {}))
                    del got
                    ms = time_ms(lambda fn=fn, bwd=bwd, x=x, m=m, g=g: run_once(fn, x, m, g, bwd), args.device,
                                 args.rep)
                    row.update(median_ms=ms[0], p20_ms=ms[1], p80_ms=ms[2])
                    if impl == "torch":
                        base[direction] = ms[0]
                    if direction in base:
                        row["speedup_vs_torch_fp32"] = base[direction] / ms[0]
                except Exception as exc:  # noqa: BLE001 - one failing case must not stop the run
                    row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                print(f"{shape:10s} {impl:16s} {method:7s} {direction:8s} {row.get('median_ms', float('nan')):8.3f} ms"
                      f"  x{row.get('speedup_vs_torch_fp32', float('nan')):.2f}  out {row.get('err_out', float('nan')):.2e}"
                      f"  dqkv {row.get('err_dqkv', float('nan')):.2e}  dmask {row.get('err_dmask', float('nan')):.2e}"
                      f"  {row['config']} {row.get('error', '')}", flush=True)
                rows.append(row)
                # as they finish: a run cut short keeps its rows
                write_results(args.out, from_wide("attention", rows, CASE_FIELDS, UNITS), prov)
            set_launch(None)
            torch.cuda.empty_cache()
    print(f"wrote {args.out} ({len(rows)} rows)")
    failed = [r for r in rows if "error" in r]
    print("spread p20-p80 / median:", statistics.median(
        (r["p80_ms"] - r["p20_ms"]) / r["median_ms"] for r in rows if "median_ms" in r))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
