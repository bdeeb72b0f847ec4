"""Small-M emulated GEMMs (PET's edge layers of small systems), GPU time and host time apart.

At a 192-atom system's edge products (M = 7,680) cuBLAS SGEMM takes 40-100 us, so an emulated call's launches
and host work weigh as much as its kernel. ``triton.testing.do_bench`` then times the host as well (the GPU
waits for launches), which hides what the kernels cost. This benchmark measures each implementation three ways,
in interleaved rounds (median, and the spread over rounds):

* ``graph_us``: GPU time per call, from a CUDA graph of ``--calls`` back-to-back calls replayed between CUDA
  events (no host work at all: what a CUDA-graphed MD step pays);
* ``bench_us``: ``do_bench`` median (L2 flushed; host-bound calls show their host time here);
* ``host_us``: host time to issue one call (the Python wall time of ``--calls`` calls, no synchronisation in
  between: what a host-bound step pays per product).

Implementations: cuBLAS SGEMM and TF32; Triton's built-in ``tl.dot`` modes (tf32x3, bf16x3, bf16x6: no range
handling, the speed reference); tcemu's kernels by configuration (``emu_mm`` on weights split beforehand; the
library's own choice is ``default``), the default without its range fix-up (``nofix``: what the fix-up costs),
and the whole library path (``linear``: ``TritonBackend.linear``/``linear_input_grad``, small-shape fallback
off, every launch through Triton's launch path: ``direct_launch=False``), and the same with direct launches of
the compiled kernels (``linear direct``: the default, what :mod:`tcemu.emulation.gemm.direct` saves). With ``--profile`` the CUDA kernels of one library call are listed with their GPU times, and the top of a
cProfile of its host path is printed.

Output: a result file (``tcemu._results``), benchmark ``gemm_small_m``, one case per (direction, M, K, N,
configuration) and implementation, with the three times, their ratios to SGEMM, the spread of the GPU time over
the rounds and the error against FP64 (``UNITS``). Stored run: ``benchmarks/results/h100/gemm_small_m/``.

    PYTHONPATH=src python benchmarks/gemm_small_m.py --out out/gemm_small_m.csv
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _gemm_compile import builtin_mm, precompile  # noqa: E402

from tcemu._results import Provenance, from_wide, write_results  # noqa: E402

#: PET S's edge layers (K contraction, N outputs) of the forward; the input gradient swaps them
SHAPES_KN = [(256, 1024), (256, 768), (512, 256), (768, 256), (256, 256), (512, 512), (1024, 256)]
#: edge rows: 192 atoms (40 pairs each), 1,536 atoms
ROWS = [7680, 61440]
CONFIGS = {
    "tf32x3": ["128x128x32w8s3m1", "128x64x32w4s4m1", "64x128x32w4s4m1", "64x64x32w4s4m1", "128x64x32w8s4m1",
               "128x128x32w8s3m1p", "128x128x32w8s3m1g", "64x128x32w4s4m1g", "128x64x32w4s4m1g",
               "128x128x32w8s3m1gw", "128x128x32w8s3m1tgw", "128x128x32w8s3m1pg", "128x128x32w8s3m1gr"],
    "bf16x3": ["128x128x64w8s3m1", "128x64x64w8s3m1", "64x128x64w4s3m1", "64x64x64w4s3m1",
               "128x128x64w8s3m1g", "64x128x64w4s3m1g", "128x128x64w8s3m1tgw", "128x128x64w8s3m1ptgw"],
    "bf16x6": ["128x64x64w8s3m1", "128x64x64w8s3m1po", "64x64x64w4s3m1", "64x128x64w4s3m1",
               "128x64x64w4s3m1", "128x64x64w8s3m1g", "64x128x64w4s3m1g", "128x64x64w8s3m1ptgw",
               "128x64x64w8s3m1pg"],
}
BUILTIN = ["tf32x3", "bf16x3", "bf16x6"]
CASE_FIELDS = ("direction", "M", "K", "N", "config")
UNITS = {"graph_us": "us", "graph_min_us": "us", "graph_max_us": "us", "bench_us": "us", "host_us": "us",
         "graph_x_sgemm": "x", "bench_x_sgemm": "x", "host_x_sgemm": "x", "rounds": "n", "err_norm": "rel"}


def graph_us(fn, calls: int, replays: int = 5) -> float:
    """GPU time per call (us): a CUDA graph of ``calls`` calls, replayed ``replays`` times between events."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1) * 1e3 / calls)
    del g
    return statistics.median(times)


def host_us(fn, calls: int) -> float:
    """Host time to issue one call (us): ``calls`` calls, no synchronisation in between."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t = time.perf_counter() - t0
    torch.cuda.synchronize()
    return t * 1e6 / calls


def bench_us(fn) -> float:
    return triton.testing.do_bench(fn, warmup=5, rep=10) * 1e3


def profile_call(fn, label: str) -> str:
    """The CUDA kernels of one call with their GPU times, and the top of a cProfile of 200 calls' host path."""
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
    lines = [f"== {label}: CUDA kernels (5 calls)",
             prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=70)]
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(200):
        fn()
    pr.disable()
    torch.cuda.synchronize()
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(22)
    lines += [f"== {label}: host path, cProfile of 200 calls (tottime)", buf.getvalue()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="out/gemm_small_m.csv")
    p.add_argument("--rows", default=",".join(map(str, ROWS)))
    p.add_argument("--shapes", default=",".join(f"{k}x{n}" for k, n in SHAPES_KN), help="KxN of the forward")
    p.add_argument("--methods", default=",".join(CONFIGS))
    p.add_argument("--configs-rows", type=int, default=7680,
                   help="time every listed configuration at M up to this (larger M: the library's choice only)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--profile", default="", help="file for the kernel lists and host profiles of the library path")
    args = p.parse_args(argv)

    import tcemu  # noqa: PLC0415
    from tcemu.emulation.gemm import TritonBackend  # noqa: PLC0415
    from tcemu.emulation.gemm.launch import _WGMMA_FAILED, KernelConfig, _emu_mm, pick_config  # noqa: PLC0415
    from tcemu.emulation.methods import get_method  # noqa: PLC0415

    torch.backends.cuda.matmul.fp32_precision = "ieee"
    prov = Provenance.current()
    print(prov, flush=True)
    be = TritonBackend()
    gen = torch.Generator(device="cuda").manual_seed(0)
    methods = args.methods.split(",")
    rows: list[dict] = []
    profiles: list[str] = []
    nofallback = tcemu.config(small_shape_fallback=False)
    nofallback.__enter__()
    jobs = []  # the Triton kernels of the run, compiled in parallel processes first (the on-disk cache)
    for M in map(int, args.rows.split(",")):
        for kn in args.shapes.split(","):
            K0, N0 = map(int, kn.split("x"))
            for K, N in ((K0, N0), (N0, K0)):
                for meth in methods:
                    for c in [str(pick_config(get_method(meth), M, N, K))] + (
                            CONFIGS[meth] if M <= args.configs_rows else []):
                        if not KernelConfig.parse(c).wgmma:  # the Gluon kernels compile at their first launch
                            jobs.append(("tcemu", meth, M, N, K, c, False))
    precompile(jobs, 14)

    for M in map(int, args.rows.split(",")):
        for kn in args.shapes.split(","):
            K0, N0 = map(int, kn.split("x"))
            w = torch.randn(N0, K0, device="cuda", generator=gen)
            for direction in ("fwd", "bwd_input"):
                K, N = (K0, N0) if direction == "fwd" else (N0, K0)
                a = torch.randn(M, K, device="cuda", generator=gen)
                ref = (a.double() @ (w.double().T if direction == "fwd" else w.double()))
                bmat = w.T if direction == "fwd" else w
                impls: dict[str, tuple] = {}  # name -> (impl, method, config, fn)

                def sgemm(a=a, bmat=bmat):
                    return torch.mm(a, bmat)

                def tf32(a=a, bmat=bmat):
                    torch.backends.cuda.matmul.fp32_precision = "tf32"
                    try:
                        return torch.mm(a, bmat)
                    finally:
                        torch.backends.cuda.matmul.fp32_precision = "ieee"

                impls["cublas sgemm"] = ("cublas", "sgemm", "", sgemm)
                impls["cublas tf32"] = ("cublas", "tf32", "", tf32)
                for prec in BUILTIN:
                    impls[f"builtin {prec}"] = ("triton-builtin", prec, "128x128x32w8s3",
                                                lambda a=a, bmat=bmat, prec=prec: builtin_mm(a, bmat, prec))
                for meth in methods:
                    spec = get_method(meth)
                    pw = be.prepare_weight(w, spec)
                    pieces, b_t = (pw.fwd, w) if direction == "fwd" else (pw.bwd, w.t())
                    default = pick_config(spec, M, N, K)
                    cfgs = [default] + ([KernelConfig.parse(c) for c in CONFIGS[meth] if c != str(default)]
                                        if M <= args.configs_rows else [])
                    for cfg in cfgs:
                        name = "default" if cfg == default else str(cfg)
                        impls[f"tcemu {meth} {name}"] = (
                            "tcemu", meth, str(cfg),
                            lambda a=a, pc=pieces, s=spec, c=cfg, b=b_t: _emu_mm(a, pc, s, None, config=c, b=b))

                    def nofix(a=a, pc=pieces, s=spec, c=default, b=b_t):
                        with tcemu.config(range_fixup=False):
                            return _emu_mm(a, pc, s, None, config=c, b=b)

                    impls[f"tcemu {meth} nofix"] = ("tcemu-nofix", meth, str(default), nofix)
                    if direction == "fwd":
                        lib = lambda a=a, pw=pw, s=spec: be.linear(a, w, pw, s, None)  # noqa: E731
                    else:
                        lib = lambda a=a, pw=pw, s=spec: be.linear_input_grad(a, w, pw, s)  # noqa: E731
                    def launched(direct: bool, lib=lib):
                        def call():
                            with tcemu.config(direct_launch=direct):
                                return lib()
                        return call

                    impls[f"tcemu {meth} linear"] = ("tcemu-linear", meth, str(default), launched(False))

                    impls[f"tcemu {meth} linear direct"] = ("tcemu-linear-direct", meth, str(default), launched(True))
                    if args.profile and M == min(map(int, args.rows.split(","))) and kn == args.shapes.split(",")[0]:
                        profiles.append(profile_call(lib, f"{meth} {direction} M={M} K={K} N={N} linear"))
                        profiles.append(profile_call(sgemm, f"sgemm {direction} M={M} K={K} N={N}"))
                        Path(args.profile).write_text("\n\n".join(profiles))

                # check each once (error against FP64; a configuration whose Gluon kernel failed is marked)
                errs, failed = {}, set()
                for name, (_, meth, cfg, fn) in list(impls.items()):
                    try:
                        before = len(_WGMMA_FAILED)
                        out = fn()
                        torch.cuda.synchronize()
                        errs[name] = float((out.double() - ref).norm() / ref.norm())
                        if len(_WGMMA_FAILED) > before:
                            failed.add(name)
                    except Exception as exc:  # noqa: BLE001 - a configuration that does not fit: recorded
                        print(f"  {name}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                        del impls[name]
                times: dict[str, dict[str, list[float]]] = {n: {"graph": [], "bench": [], "host": []} for n in impls}
                for _ in range(args.rounds):  # interleaved rounds
                    for name, (_, _, _, fn) in impls.items():
                        try:
                            times[name]["graph"].append(graph_us(fn, args.calls))
                        except Exception as exc:  # noqa: BLE001
                            print(f"  {name}: graph capture failed: {type(exc).__name__}: {str(exc)[:160]}")
                            times[name]["graph"].append(float("nan"))
                        times[name]["bench"].append(bench_us(fn))
                        times[name]["host"].append(host_us(fn, args.calls))
                med = {n: {k: statistics.median(v) for k, v in t.items()} for n, t in times.items()}
                base = med["cublas sgemm"]
                print(f"--- {direction} M={M} K={K} N={N}: sgemm graph {base['graph']:.1f} us, "
                      f"bench {base['bench']:.1f} us, host {base['host']:.1f} us", flush=True)
                for name, (impl, meth, cfg, _) in impls.items():
                    m = med[name]
                    g = times[name]["graph"]
                    row = dict(impl=impl, method=meth, direction=direction, M=M, K=K, N=N,
                               config=cfg + (" (gluon failed: triton kernel)" if name in failed else ""),
                               graph_us=m["graph"], graph_min_us=min(g), graph_max_us=max(g), bench_us=m["bench"],
                               host_us=m["host"], graph_x_sgemm=base["graph"] / m["graph"],
                               bench_x_sgemm=base["bench"] / m["bench"], host_x_sgemm=base["host"] / m["host"],
                               rounds=args.rounds, err_norm=errs.get(name, float("nan")))
                    rows.append(row)
                    print(f"  {name:38s} graph {m['graph']:8.1f} us {row['graph_x_sgemm']:5.2f}x "
                          f"[{min(g):.1f}-{max(g):.1f}]  bench {m['bench']:8.1f} us {row['bench_x_sgemm']:5.2f}x  "
                          f"host {m['host']:6.1f} us  err {row['err_norm']:.1e}" + ("  GLUON FAILED" if name in failed
                                                                                    else ""), flush=True)
                write_results(args.out, from_wide("gemm_small_m", rows, CASE_FIELDS, UNITS), prov)
                del impls, a, ref
            del w
            torch.cuda.empty_cache()
    print(f"wrote {args.out} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
