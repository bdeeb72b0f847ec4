# /// script
# requires-python = ">=3.11"
# dependencies = ["torch>=2.4", "triton>=3.2", "numpy", "matplotlib", "jax[cuda13]"]
# ///
"""FP32-emulation GEMM benchmark: tcemu's Triton kernels against cuBLAS, Triton's built-in modes and XLA.

One run on one GPU measures, side by side and on the same inputs, for each shape (M, K, N) of a linear
layer y = x @ W^T (x (M, K), W (N, K)) in two directions,

    fwd        y  = x  @ W^T   (contraction K, output (M, N))
    bwd_input  dx = dy @ W     (contraction N, output (M, K)),

these implementations (``impl``, ``method``):

* ``cublas``: ``sgemm`` (torch.matmul, TF32 off), ``tf32`` (TF32 on), ``bf16`` (inputs converted to bf16
  beforehand; conversion not timed). The last two are the single-pass rates that bound the emulations.
* ``triton-builtin``: one plain Triton matmul kernel (128x128x32 tiles, 8 warps, 3 stages) with
  ``tl.dot(input_precision=...)`` in ``ieee``, ``tf32``, ``tf32x3``, ``bf16x3``, ``bf16x6``.
* ``xla``: ``jax.lax.dot_general`` with ``precision=DotAlgorithmPreset.<method>`` (jit, XLA's autotuner on),
  presets TF32_TF32_F32_X3, BF16_BF16_F32_X3, BF16_BF16_F32_X6, on the goal shapes only (8192^3 and the
  17,280-atom edge shapes; ``--xla-all`` for all): each compile takes seconds. BF16_BF16_F32_X9 and
  F32_F32_F32 are left out (X9 gave single-pass TF32 accuracy on the H200, a check not stored; F32 is SGEMM).
* ``cutlass`` (with ``--cutlass WHEEL``): ``3xtf32``, CUTLASS's 3xTF32 GEMM (``OpMultiplyAddFastF32``) in CUTLASS
  example 27's configuration, the kernel of the published NVIDIA study, built for sm_90a with nvcc from the
  ``nvidia-cutlass`` wheel's headers at the start of the run (``cutlass_3xtf32/``; about a minute);
* ``tcemu``: ``tf32x3``, ``bf16x3``, ``bf16x6``, ``bf16x9`` through ``TritonBackend.linear`` /
  ``linear_input_grad`` (the torch custom op, small-shape fallback OFF: the kernel is what is timed), with
  autotuning on (``--no-autotune``: the static table); the ``config`` column gives the configuration and
  the first call's time (compile from the cache plus autotuning). The weight is split once beforehand (an eager
  ``EmulatedLinear`` splits it at each call: ``benchmarks/linear_eager.py``); that split's time is printed.

Timing: torch and Triton with ``triton.testing.do_bench`` (CUDA events, L2 flushed between repeats), median
and the 20th/80th percentiles; XLA with a host clock around batches of calls ended by
``block_until_ready`` (median of 7 batches). TFLOP/s = 2 M N K / median. Errors vs an FP64 product of the
same FP32 inputs: ``err_norm`` = ||C - C64||_F / ||C64||_F, ``err_max`` = max|C - C64| / max|C64|.

Output: a result file (``tcemu._results``: long rows with their provenance), benchmark ``gemm``, one measured
case per (impl, method, direction, M, K, N) with the metrics ``UNITS`` (``config``: the configuration and the
first call's time), and the figure beside it (same name, ``.png``). ``--sweep`` instead times tile
configurations of the tcemu kernels (and checks their PTX for ``wgmma.mma_async``): benchmark ``gemm_sweep``,
one case per (config, M, K, N), metrics ``SWEEP_UNITS``. Stored runs: ``benchmarks/results/h200/gemm/``.

Usage: ``PYTHONPATH=src python3 benchmarks/gemm.py --out out/gemm.csv [--quick] [--sweep]``; ``--shapes MxKxN,...``
times those shapes (any, listed above or not); ``--xla-presets`` picks XLA's presets (also ``jax.lax.Precision``'s
HIGHEST, HIGH, DEFAULT);
``--plot-only out/gemm.csv`` redraws the figure (and the summary) from the result file alone.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU with torch

import torch  # noqa: E402
import triton  # noqa: E402

from tcemu._results import Provenance, from_wide, read_wide, write_results  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the private helpers beside this script
from _gemm_compile import builtin_mm, precompile  # noqa: E402
from _gemm_report import plot, summarize  # noqa: E402

# ------------------------------------------------------------------------------------------------------
# shapes (label, M, K, N): square, then the PET-S linear layers (docs/md_step.md) at 192 and 17,280 atoms
# ------------------------------------------------------------------------------------------------------
EDGE_KN = [(256, 1024), (256, 768), (512, 256), (768, 256), (256, 256), (512, 512)]
NODE_KN = [(1024, 4096), (2048, 1024)]
SHAPES: list[tuple[str, int, int, int]] = [("square", 8192, 8192, 8192)]  # goal shapes first
SHAPES += [("edge-17280", 604800, k, n) for k, n in EDGE_KN]
SHAPES += [("square", 4096, 4096, 4096)]
SHAPES += [("edge-192", 6720, k, n) for k, n in EDGE_KN]
for _m, _tag in ((17280, "node-17280"), (192, "node-192")):
    SHAPES += [(_tag, _m, k, n) for k, n in NODE_KN]
#: shapes XLA is measured on (its compile costs seconds per shape and preset): the goal shapes
XLA_SHAPES = {(8192, 8192, 8192)} | {(604800, k, n) for k, n in EDGE_KN}

TCEMU_METHODS = ["tf32x3", "bf16x3", "bf16x6", "bf16x9"]
BUILTIN_MODES = ["ieee", "tf32", "tf32x3", "bf16x3", "bf16x6"]
# BF16_BF16_F32_X9 is left out: on this H200 it returned single-pass TF32 accuracy (see the docstring)
XLA_PRESETS = ["TF32_TF32_F32_X3", "BF16_BF16_F32_X3", "BF16_BF16_F32_X6"]
#: a measured case of the comparison, and every metric's unit (err_*: relative to the FP64 product)
CASE_FIELDS = ("direction", "M", "K", "N")
UNITS = {"median_ms": "ms", "tflops": "TFLOP/s", "err_norm": "rel", "err_max": "rel", "p20_ms": "ms",
         "p80_ms": "ms", "config": "text"}
#: the same for ``--sweep`` (regs, spills: per thread; wgmma: PTX counts of wgmma.mma_async /
#: wgmma.wait_group / mma.sync / st.local / bar.sync; same_bits: equal to the one-tile-per-program kernel's)
SWEEP_CASE_FIELDS = ("config", "M", "K", "N")
SWEEP_UNITS = {"ms": "ms", "p20": "ms", "p80": "ms", "tflops": "TFLOP/s", "x_sgemm": "x", "err": "rel",
               "regs": "count", "spills": "count", "wgmma": "text", "compile_s": "s", "same_bits": "bool"}


# ------------------------------------------------------------------------------------------------------
# timing and errors
# ------------------------------------------------------------------------------------------------------
def bench_torch(fn, rep_ms: int) -> tuple[float, float, float]:
    p50, p20, p80 = triton.testing.do_bench(fn, warmup=25, rep=rep_ms, quantiles=[0.5, 0.2, 0.8])
    return p50, p20, p80


def bench_host(fn, rep_ms: int) -> tuple[float, float, float]:
    """Median of 7 batches of calls, each batch ended by block_until_ready (for XLA)."""
    fn().block_until_ready()
    t0 = time.perf_counter()
    fn().block_until_ready()
    one = max(time.perf_counter() - t0, 1e-6)
    n = max(1, min(200, int(rep_ms / 7 / 1e3 / one)))
    per = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(n - 1):
            fn()
        fn().block_until_ready()
        per.append((time.perf_counter() - t0) / n * 1e3)
    per.sort()
    return statistics.median(per), per[1], per[5]


def errors(out: torch.Tensor, ref64: torch.Tensor) -> tuple[float, float]:
    d = out.double() - ref64
    return (d.norm() / ref64.norm()).item(), (d.abs().max() / ref64.abs().max()).item()


class Xla:
    """jax.lax.dot_general with a DotAlgorithmPreset; inputs shared with torch through DLPack."""

    def __init__(self):
        import jax  # noqa: PLC0415
        import jax.numpy as jnp  # noqa: PLC0415

        self.jax, self.jnp = jax, jnp
        self.version = jax.__version__
        self._fns = {}

    def fn(self, preset: str, direction: str):
        key = (preset, direction)
        if key not in self._fns:
            jax, jnp = self.jax, self.jnp
            # a DotAlgorithmPreset name, or one of jax.lax.Precision's HIGHEST / HIGH / DEFAULT
            prec = getattr(jax.lax.Precision, preset) if preset in ("HIGHEST", "HIGH", "DEFAULT") else \
                getattr(jax.lax.DotAlgorithmPreset, preset)
            dims = (((1,), (1,)), ((), ())) if direction == "fwd" else (((1,), (0,)), ((), ()))
            self._fns[key] = jax.jit(lambda a, w: jax.lax.dot_general(
                a, w, dims, precision=prec, preferred_element_type=jnp.float32))
        return self._fns[key]

    def wrap(self, t: torch.Tensor):
        return self.jax.dlpack.from_dlpack(t.contiguous())


# ------------------------------------------------------------------------------------------------------
# the full comparison
# ------------------------------------------------------------------------------------------------------
#: the emulation settings of this run (entered for the rest of the process)
_SETTINGS = contextlib.ExitStack()


def run_full(args) -> None:
    import logging

    import tcemu
    from tcemu.emulation.gemm import TritonBackend, config_candidates, pick_config
    from tcemu.emulation.methods import get_method

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("tcemu.emulation.gemm").setLevel(logging.INFO)  # every autotune candidate's time
    # the kernels themselves (no small-shape fallback); each shape's first call picks among a few configurations
    settings = _SETTINGS.enter_context(tcemu.config(small_shape_fallback=False, autotune=not args.no_autotune))
    prov = Provenance.current()
    print(prov, f"autotune: {settings.autotune}", flush=True)
    shapes = SHAPES
    if args.quick:
        shapes = [s for s in SHAPES if (s[1], s[2], s[3]) in ((4096, 4096, 4096), (6720, 256, 1024))]
    if args.shapes:  # those of the list, in its order, then any others as given
        keep = args.shapes.split(",")
        shapes = [s for s in SHAPES if f"{s[1]}x{s[2]}x{s[3]}" in keep]
        listed = {f"{s[1]}x{s[2]}x{s[3]}" for s in shapes}
        shapes += [("custom", *map(int, k.split("x"))) for k in keep if k not in listed]
    methods = [m for m in TCEMU_METHODS if not args.methods or m in args.methods.split(",")]
    xla_presets = args.xla_presets.split(",") if args.xla_presets else XLA_PRESETS
    cutlass = None
    if args.cutlass:
        import importlib.util  # noqa: PLC0415 - its own name: PyPA's "build" may be installed too

        spec = importlib.util.spec_from_file_location(
            "tcemu_cutlass_3xtf32_build", Path(__file__).resolve().parent / "cutlass_3xtf32" / "build.py")
        cutlass_build = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(cutlass_build)
        Cutlass3xTF32, build = cutlass_build.Cutlass3xTF32, cutlass_build.build

        try:
            cutlass = Cutlass3xTF32(build(args.cutlass, Path(args.out).parent / "cutlass_3xtf32"))
        except Exception as exc:  # noqa: BLE001 - the other anchors still run
            print(f"CUTLASS 3xTF32 unavailable: {type(exc).__name__}: {exc}"[:2000], flush=True)

    # precompile every Triton kernel of the run in parallel
    jobs = []
    for _, M, K, N in shapes:
        for direction, (m_, k_, n_) in (("fwd", (M, K, N)), ("bwd_input", (M, N, K))):
            for meth in methods:
                for cfg in config_candidates(get_method(meth), m_, n_, k_):
                    if not cfg.wgmma:  # the Gluon kernel compiles at its first launch
                        jobs.append(("tcemu", meth, m_, n_, k_, str(cfg), False))
            if not args.no_builtin:
                # fwd: B = W^T (strides 1, K); bwd: B = W (strides K, 1)
                sb = (1, K) if direction == "fwd" else (K, 1)
                for prec in BUILTIN_MODES:
                    jobs.append(("builtin", prec, m_, n_, k_, (k_, 1), sb))
    precompile(jobs, args.workers)

    xla = None
    if not args.no_xla:
        try:
            xla = Xla()
            print(f"jax {xla.version}", flush=True)
        except Exception as exc:  # noqa: BLE001
            print(f"XLA unavailable: {exc}", flush=True)

    rows = []
    be = TritonBackend()
    gen = torch.Generator(device="cuda").manual_seed(0)
    split_times = []

    def add(impl, method, direction, M, K, N, t, e, config=""):
        p50, p20, p80 = t
        row = dict(impl=impl, method=method, direction=direction, M=M, K=K, N=N, median_ms=p50,
                   tflops=2.0 * M * N * K / p50 / 1e9, err_norm=e[0], err_max=e[1], p20_ms=p20, p80_ms=p80,
                   config=config)
        rows.append(row)
        print(f"{impl:15s} {method:17s} {direction:9s} {M:7d} {K:5d} {N:5d}  {p50:9.4f} ms "
              f"{2.0 * M * N * K / p50 / 1e9:7.1f} TF/s  [{p20:.4f}, {p80:.4f}]  err {e[0]:.2e} / {e[1]:.2e}",
              flush=True)
        write_results(args.out, from_wide("gemm", rows, CASE_FIELDS, UNITS), prov)  # a killed run keeps them

    for tag, M, K, N in shapes:
        print(f"--- {tag} M={M} K={K} N={N}", flush=True)
        x = torch.randn(M, K, device="cuda", generator=gen)
        w = torch.randn(N, K, device="cuda", generator=gen)
        dy = torch.randn(M, N, device="cuda", generator=gen)
        refs = {"fwd": x.double() @ w.double().T, "bwd_input": dy.double() @ w.double()}
        torch.cuda.synchronize()
        wb = w.bfloat16()
        for direction in ("fwd", "bwd_input"):
            ref = refs[direction]
            a, bmat = (x, w.T) if direction == "fwd" else (dy, w)
            ab = a.bfloat16()
            bb = wb.T if direction == "fwd" else wb

            mm = lambda a=a, bmat=bmat: torch.matmul(a, bmat)  # noqa: E731
            mmb = lambda ab=ab, bb=bb: torch.matmul(ab, bb)  # noqa: E731
            for name, tf32, fn in (("sgemm", False, mm), ("tf32", True, mm), ("bf16", False, mmb)):
                torch.backends.cuda.matmul.allow_tf32 = tf32
                try:
                    out = fn()
                    e = errors(out.float(), ref)
                    del out
                    t = bench_torch(fn, args.rep)
                finally:
                    torch.backends.cuda.matmul.allow_tf32 = False
                add("cublas", name, direction, M, K, N, t, e)
            del ab
            if not args.no_builtin:
                for prec in BUILTIN_MODES:
                    fn = lambda a=a, bmat=bmat, prec=prec: builtin_mm(a, bmat, prec)  # noqa: E731
                    out = fn()
                    e = errors(out, ref)
                    del out
                    add("triton-builtin", prec, direction, M, K, N, bench_torch(fn, args.rep), e,
                        "128x128x32w8s3")
            if xla is not None and (args.xla_all or (M, K, N) in XLA_SHAPES):
                xa, xw = xla.wrap(a), xla.wrap(w)
                for preset in xla_presets:
                    try:
                        f = xla.fn(preset, direction)
                        t0 = time.perf_counter()
                        out = f(xa, xw)
                        out.block_until_ready()
                        compile_s = time.perf_counter() - t0
                        e = errors(torch.from_dlpack(out), ref)
                        del out
                        t = bench_host(lambda f=f: f(xa, xw), args.rep)
                        add("xla", preset, direction, M, K, N, t, e, f"compile {compile_s:.1f}s")
                    except Exception as exc:  # noqa: BLE001
                        print(f"xla {preset} {direction} failed: {type(exc).__name__}: {exc}"[:400], flush=True)
                del xa, xw
            if cutlass is not None and M % 4 == 0 and K % 4 == 0 and N % 4 == 0:
                # fwd: x @ W^T with W (N, K) row-major; bwd_input: dy @ W, W (N, K) row-major as (K', N') = (N, K)
                fn = (lambda: cutlass.nt(x, w)) if direction == "fwd" else (lambda: cutlass.nn(dy, w))
                try:
                    out = fn()
                    e = errors(out, ref)
                    del out
                    add("cutlass", "3xtf32", direction, M, K, N, bench_torch(fn, args.rep), e,
                        "128x64x16 warp 64x32x16 mma 16x8x8 s3 (example 27)")
                except Exception as exc:  # noqa: BLE001
                    print(f"cutlass 3xtf32 {direction} failed: {exc}"[:400], flush=True)
            for meth in methods:
                spec = get_method(meth)
                t0 = time.perf_counter()
                pw = be.prepare_weight(w, spec)
                torch.cuda.synchronize()
                if direction == "fwd":
                    split_times.append((meth, N, K, time.perf_counter() - t0))
                    fn = lambda pw=pw, spec=spec: be.linear(x, w, pw, spec, None)  # noqa: E731
                else:
                    fn = lambda pw=pw, spec=spec: be.linear_input_grad(dy, w, pw, spec)  # noqa: E731
                t0 = time.perf_counter()
                out = fn()  # compiles (cache) and, with autotuning, picks the configuration
                torch.cuda.synchronize()
                first_s = time.perf_counter() - t0
                cfg = pick_config(spec, M, N, K) if direction == "fwd" else pick_config(spec, M, K, N)
                cfg = f"{cfg} first-call {first_s:.2f}s"
                e = errors(out, ref)
                del out
                add("tcemu", meth, direction, M, K, N, bench_torch(fn, args.rep), e, str(cfg))
                del pw
        del x, w, dy, refs, wb
        torch.cuda.empty_cache()

    for meth, N, K, s in split_times[:8]:
        print(f"weight split {meth} ({N}x{K}): {s * 1e3:.2f} ms (first call, incl. launch)")
    summarize(rows)
    if not args.no_plot:
        plot(read_wide(args.out), os.path.splitext(args.out)[0] + ".png")


# ------------------------------------------------------------------------------------------------------
# tile-configuration sweep of the tcemu kernels
# ------------------------------------------------------------------------------------------------------
SWEEP = {  # the library's first candidates ("wide" with A split beforehand, "narrow"), each also persistent ("t")
    "tf32x3": ["128x128x32w8s3m1p", "128x128x32w8s2m1pt", "128x128x32w8s3m1", "128x128x32w8s2m1t",
               "128x128x32w8s3m1t"],
    "bf16x6": ["128x64x64w8s3m1po", "128x64x64w8s2m1pot"],
    "bf16x3": ["128x128x64w8s3m1p", "128x128x64w8s2m1pt"],
    "bf16x9": ["128x64x64w8s3m0p", "128x64x64w8s2m0pt"],
}
# (M, K contraction, N output): 8192^3 and the PET-S edge layers at 17,280 atoms, forward (K, N) and input
# gradient (N, K) (the kernel sees B's pieces (N, K) either way)
SWEEP_SHAPES = [(8192, 8192, 8192)] + [
    (604800, k, n) for k, n in ((256, 1024), (256, 768), (512, 256), (768, 256), (256, 256), (512, 512),
                                (1024, 256), (256, 512))]


def run_sweep(args) -> None:
    import tcemu.emulation.gemm  # noqa: F401 - registers the custom ops
    from tcemu.emulation.gemm import KernelConfig, emu_mm, split_t
    from tcemu.emulation.reference import ieee_fp32_matmul

    prov = Provenance.current()
    print(prov, flush=True)
    table = SWEEP
    if args.configs:  # "tf32x3=cfg+cfg,bf16x6=cfg"
        table = {m: v.split("+") for m, v in (item.split("=") for item in args.configs.split(","))}
    sweep = {m: v for m, v in table.items() if not args.methods or m in args.methods.split(",")}
    shapes = SWEEP_SHAPES
    if args.shapes:  # any MxKxN, listed or not
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    jobs = [("tcemu", m, M, N, K, c, False) for m, cfgs in sweep.items() for c in cfgs for (M, K, N) in shapes
            if not KernelConfig.parse(c).wgmma]  # the Gluon kernel compiles at its first launch
    comp = precompile(jobs, args.workers)
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(0)
    for M, K, N in shapes:
        a = torch.randn(M, K, device="cuda", generator=gen)
        b = torch.randn(K, N, device="cuda", generator=gen)
        ref = a.double() @ b.double()
        torch.backends.cuda.matmul.allow_tf32 = False
        out = ieee_fp32_matmul(a, b)
        e = errors(out, ref)
        t = bench_torch(lambda: torch.matmul(a, b), args.rep)
        sg = 2.0 * M * N * K / t[0] / 1e9
        print(f"--- M={M} K={K} N={N}: cuBLAS SGEMM {sg:.1f} TF/s err {e[0]:.2e}", flush=True)
        rows.append(dict(method="sgemm", config="cublas", M=M, K=K, N=N, ms=t[0], p20=t[1], p80=t[2],
                         tflops=sg, x_sgemm=1.0, err=e[0], regs="", spills="", wgmma="", compile_s="", same_bits=""))
        for meth, cfgs in sweep.items():
            pieces = split_t(b, meth)
            outs = {}
            for c in cfgs:
                cfg = KernelConfig.parse(c)
                ci = comp.get(("tcemu", meth, M, N, K, c, False), {})
                if ci.get("error"):
                    continue
                try:
                    out = emu_mm(a, pieces, meth, config=cfg)
                    e = errors(out, ref)
                    # the persistent loop and the Gluon kernel: same bits as the plain Triton kernel's
                    twin = str(dataclasses.replace(cfg, persistent=False, wgmma=False, warp_specialized=False,
                                                   tma_store=False, presplit=cfg.presplit or cfg.wgmma))
                    variant = cfg.persistent or cfg.wgmma
                    same = torch.equal(out, outs[twin]) if variant and twin in outs else ""
                    if not variant:
                        outs[c] = out
                    del out
                    t = bench_torch(lambda: emu_mm(a, pieces, meth, config=cfg), args.rep)
                except Exception as exc:  # noqa: BLE001
                    print(f"{meth} {c} failed: {exc}"[:300], flush=True)
                    continue
                tf = 2.0 * M * N * K / t[0] / 1e9
                print(f"{meth:7s} {c:18s} {t[0]:9.4f} ms {tf:7.1f} TF/s {tf / sg:5.2f}x sgemm "
                      f"[{t[1]:.4f},{t[2]:.4f}] err {e[0]:.2e}  regs {ci.get('regs')} spills {ci.get('spills')} "
                      f"ptx wgmma/wait/mma.sync/st.local/bar {ci.get('wgmma')} compile {ci.get('compile_s', 0):.1f}s"
                      f" same bits as one tile per program: {same}", flush=True)
                rows.append(dict(method=meth, config=c, M=M, K=K, N=N, ms=t[0], p20=t[1], p80=t[2], tflops=tf,
                                 x_sgemm=tf / sg, err=e[0], regs=ci.get("regs"), spills=ci.get("spills"),
                                 wgmma=ci.get("wgmma"), compile_s=ci.get("compile_s"), same_bits=same))
            del pieces, outs
        del a, b, ref
        torch.cuda.empty_cache()
    # dispatch overhead on a small shape: the launcher alone vs the torch custom op around it
    M, K, N = 6720, 256, 1024
    a = torch.randn(M, K, device="cuda", generator=gen)
    b = torch.randn(K, N, device="cuda", generator=gen)
    for meth in sweep:
        pieces = split_t(b, meth)
        p3 = tuple(pieces) + (None,) * (3 - len(pieces))
        t_direct = bench_torch(lambda: emu_mm(a, pieces, meth), args.rep)[0]
        t_op = bench_torch(lambda: torch.ops.tcemu.emu_mm(a, *p3, None, meth), args.rep)[0]
        print(f"overhead {meth} {M}x{K}x{N}: launcher {t_direct * 1e3:.1f} us, custom op {t_op * 1e3:.1f} us")
    impl = {"sgemm": "cublas"}
    write_results(args.out, from_wide("gemm_sweep", ({"impl": impl.get(r["method"], "tcemu"), **r} for r in rows),
                                      SWEEP_CASE_FIELDS, SWEEP_UNITS), prov)
    print("\nbest per method and shape:")
    for M, K, N in shapes:
        for meth in sweep:
            cand = [r for r in rows if r["method"] == meth and (r["M"], r["K"], r["N"]) == (M, K, N)]
            if cand:
                r = max(cand, key=lambda r: r["tflops"])
                print(f"  {M}x{K}x{N} {meth}: {r['config']} {r['tflops']:.1f} TF/s {r['x_sgemm']:.2f}x err {r['err']:.2e}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="", help="result file (out/gemm.csv; with --sweep out/gemm_sweep.csv)")
    p.add_argument("--quick", action="store_true", help="two shapes only (pipeline check)")
    p.add_argument("--sweep", action="store_true", help="time tile configurations of the tcemu kernels")
    p.add_argument("--shapes", default="", help="comma list MxKxN to keep (--sweep: to time, any)")
    p.add_argument("--methods", default="", help="comma list of tcemu methods")
    p.add_argument("--configs", default="", help="sweep these instead: method=cfg+cfg,method=cfg")
    p.add_argument("--no-xla", action="store_true")
    p.add_argument("--no-builtin", action="store_true")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--no-autotune", action="store_true", help="use the static configuration table")
    p.add_argument("--xla-all", action="store_true", help="XLA on every shape (default: the goal shapes)")
    p.add_argument("--xla-presets", default="", help=f"comma list of DotAlgorithmPreset names or of "
                                                      f"jax.lax.Precision's HIGHEST, HIGH, DEFAULT (default "
                                                      f"{','.join(XLA_PRESETS)})")
    p.add_argument("--cutlass", default="", help="nvidia-cutlass wheel (or its unpacked folder, or a CUTLASS "
                                                 "checkout): also time CUTLASS's 3xTF32 GEMM, built with nvcc")
    p.add_argument("--plot-only", default="", help="redraw the plot (and summary) from this result file")
    p.add_argument("--rep", type=int, default=100, help="do_bench repetition time per measurement, ms")
    p.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1), help="compile processes")
    args = p.parse_args(argv)
    args.out = args.out or ("out/gemm_sweep.csv" if args.sweep else "out/gemm.csv")
    if args.plot_only:
        rows = read_wide(args.plot_only)
        summarize(rows)
        plot(rows, os.path.splitext(args.plot_only)[0] + ".png")
        return
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    run_sweep(args) if args.sweep else run_full(args)


if __name__ == "__main__":
    main()
