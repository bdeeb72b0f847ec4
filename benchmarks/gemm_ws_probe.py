"""GPU probe (H200, Triton 3.6) of the warp-specialised Gluon kernel ("gw" configurations).

Run: ``PYTHONPATH=src OUT=<dir> python3 benchmarks/gemm_ws_probe.py`` (about 3-5 minutes; stops starting work at ~320 s).

1. Bits: per method, in subprocesses (two per method, all in parallel, with a timeout, so that a deadlocked
   kernel cannot hang the probe): every "gw" configuration and tunable variant against the "pg" configuration
   (A split beforehand) on ragged, batched products with bias and Inf/NaN in A (and an Inf in B), plus K-major
   A (not TMA-readable: "gw" runs "pg"). PASS/FAIL per case; exceptions printed with their traceback. A
   configuration that does not PASS every case is not timed.
2. Timing: CUDA events, median (and 20th/80th percentiles) of 20 calls after 3 warm-up calls, of
   ``emu_mm(a, pieces, method, bias, config=...)`` (the "pg" time includes its split pass of A) for
   gw (warp-specialised), pg (A split beforehand), g (the non-specialised in-kernel split, SPLIT_A),
   m1 (Triton kernel, in-register split) and, for BF16x6, po (its current default), against torch.addmm
   SGEMM (TF32 off), on M = 604800 with (K, N) in (256,1024) (256,768) (512,256) (768,256) (256,256)
   (512,512) and on 8192^3; two rounds; then the tunable variants (one round). Each timed gw output is also
   compared bit for bit with the pg output of the same round.
Output: tables on stdout, ``$OUT/ws_probe.csv`` (written row by row).

Recorded: ``benchmarks/results/ws_probe_h200.csv`` (session 6). There, "gw" for TF32x3 ran with two slots
for A's pieces, the library's choice then; the variant "gw:p3" (three slots) ran 1.11-1.20x faster and
became the library's choice (``emu_mm._ws_stages``), so "gw" now runs what "gw:p3" measured.
"""

from __future__ import annotations

import csv
import importlib
import logging
import os
import statistics
import subprocess
import sys
import threading
import time
import traceback

T0 = time.time()
BUDGET_S = 320.0  # no new measurement after this (the whole probe must end within 6 minutes)
HARD_S = 345.0  # the watchdog ends the process here, whatever it is doing
OUT = os.environ.get("OUT", ".")

METHODS = ["tf32x3", "bf16x3", "bf16x6"]
CONFIGS = {  # "pg" first: the timed "gw" outputs are compared with its output, and the ratios are against it
    "tf32x3": {"pg": "128x128x32w8s3m1pg", "gw": "128x128x32w8s3m1gw", "g": "128x128x32w8s3m1g",
               "m1": "128x128x32w8s3m1"},
    "bf16x3": {"pg": "128x128x64w8s3m1pg", "gw": "128x128x64w8s3m1gw", "g": "128x128x64w8s2m1g",
               "m1": "128x128x64w8s3m1"},
    "bf16x6": {"pg": "128x64x64w8s3m1pg", "gw": "128x64x64w8s3m1gw", "g": "128x64x64w8s2m1g",
               "m1": "128x64x64w8s3m1", "po": "128x64x64w8s3m1po"},
}
# tunable variants of the warp-specialised kernel: label -> (config, (B, A, A-piece stages) or None, splitter
# warps, splitter registers); None stages = the library's choice (_ws_stages)
VARIANTS = {
    "tf32x3": {"gw:a2": ("128x128x32w8s3m1gw", (3, 2, 2), 4, 72),
               "gw:sw2r88": ("128x128x32w8s3m1gw", None, 2, 88),
               "gw:r56": ("128x128x32w8s3m1gw", None, 4, 56),
               "gw:p3": ("128x128x32w8s3m1gw", (3, 2, 3), 4, 72)},
    "bf16x3": {"gw:b2a3": ("128x128x64w8s3m1gw", (2, 3, 2), 4, 72),
               "gw:r56": ("128x128x64w8s3m1gw", None, 4, 56),
               "gw:k32s4": ("128x128x32w8s4m1gw", None, 4, 72),
               "gw:a1p3": ("128x128x64w8s3m1gw", (3, 1, 3), 4, 72)},
    "bf16x6": {"gw:k32s4": ("128x64x32w8s4m1gw", None, 4, 72),
               "gw:k32s6": ("128x64x32w8s6m1gw", None, 4, 72),
               "gw:r56": ("128x64x64w8s3m1gw", None, 4, 56)},
}
# (2 splitter warps run on 2 of the SM's 4 schedulers: half the split's issue rate; tried for TF32x3 only,
# whose split is the cheapest, ~23 PTX instructions per element against ~27 (BF16x3) and ~40 (BF16x6))
M_BIG = 604800
SHAPES = [(M_BIG, 256, 1024), (M_BIG, 256, 768), (M_BIG, 512, 256), (M_BIG, 768, 256), (M_BIG, 256, 256),
          (M_BIG, 512, 512), (8192, 8192, 8192)]
# ragged, batched, K tails, one or two K-tiles (K = 48); the last one aligned as the timed shapes (M, N, K
# multiples of 16), so that the check subprocesses also compile (in parallel) the timed specialisations
CHECK_SHAPES = [(2, 2900, 336, 1100), (1, 1000, 200, 300), (3, 333, 1000, 129), (1, 300, 48, 200), (1, 1024, 256, 512)]


def elapsed() -> float:
    return time.time() - T0


# =====================================================================================================
# 1. bits (subprocess per method)
# =====================================================================================================


def _same_bits(got, want) -> tuple[bool, str]:
    import torch

    nan = torch.isnan(want)
    if not torch.equal(torch.isnan(got), nan):
        return False, f"NaN positions differ ({int(torch.isnan(got).ne(nan).sum())})"
    d = got.view(torch.int32)[~nan].ne(want.view(torch.int32)[~nan])
    if d.any():
        return False, f"{int(d.sum())} of {d.numel()} values differ"
    return True, f"{int(nan.sum())} NaN, {int(torch.isinf(want).sum())} Inf"


def ws_direct(a, pieces, method, bias, cfg, stages, split_warps, split_regs, out=None):
    """The warp-specialised kernel launched directly (exceptions propagate; emu_mm would fall back)."""
    import torch

    em = importlib.import_module("tcemu.emulation.gemm.emu_mm")  # the module (the package exports the function)
    from tcemu.emulation.methods import get_method

    a3 = a.unsqueeze(0) if a.dim() == 2 else a
    Z, M, K = a3.shape
    N = pieces[0].shape[0]
    if out is None:
        out = torch.empty((Z, M, N), device=a.device, dtype=torch.float32)
    out3 = out.unsqueeze(0) if out.dim() == 2 else out
    em._launch_wgmma_ws(get_method(method), cfg, a3, tuple(pieces), bias, out3, M, N, K,
                        stages=stages, split_warps=split_warps, split_regs=split_regs)
    return out.view(a.shape[:-1] + (N,))


def check(method: str, part: str) -> None:
    """part "main": the library's "gw" configuration through emu_mm on every check shape, K-major A, and the
    other timed configurations compiled; part "variants": the tunable variants (launched directly) on the
    first, the K = 48 and the aligned check shapes."""
    import torch

    from tcemu.emulation.gemm import KernelConfig, emu_mm, split_t
    em = importlib.import_module("tcemu.emulation.gemm.emu_mm")  # the module (the package exports the function)

    if part == "main":
        cases = {"gw": (CONFIGS[method]["gw"], "emu_mm")}
        shapes = CHECK_SHAPES
    else:
        cases = dict(VARIANTS[method])
        shapes = [CHECK_SHAPES[0], CHECK_SHAPES[3], CHECK_SHAPES[4]]
    for label in cases:
        print(f"EXPECT {method} {label} {len(shapes)}", flush=True)
    gen = torch.Generator().manual_seed(31 if part == "main" else 32)
    for Z, M, K, N in shapes:
        a = torch.randn(Z, M, K, generator=gen)
        a[Z - 1, 7, K // 3] = float("inf")
        a[0, 5, 2] = float("nan")
        a[0, M - 1, K - 1] = float("-inf")
        b = torch.randn(K, N, generator=gen)
        b[K // 2, N // 3] = float("inf")
        a, b = a.cuda(), b.cuda()
        bias = torch.randn(N, generator=gen).cuda()
        pieces = split_t(b, method)
        shape = f"Z={Z} M={M} K={K} N={N}"
        for label, spec in cases.items():
            cfg = KernelConfig.parse(spec[0])
            pg = KernelConfig.parse(spec[0].replace("gw", "pg"))
            try:
                want = emu_mm(a, pieces, method, bias, config=pg)
                if spec[1] == "emu_mm":
                    em._WGMMA_FAILED.clear()
                    got = emu_mm(a, pieces, method, bias, config=cfg)
                    torch.cuda.synchronize()
                    if em._WGMMA_FAILED:
                        print(f"FAIL {method} {label} {spec[0]} {shape}: the Gluon kernel failed, the Triton kernel "
                              f"ran ({em._WGMMA_FAILED})", flush=True)
                        continue
                else:
                    got = ws_direct(a, pieces, method, bias, cfg, *spec[1:])
                    torch.cuda.synchronize()
                ok, why = _same_bits(got, want)
                print(f"{'PASS' if ok else 'FAIL'} {method} {label} {spec[0]} {shape}: {why}", flush=True)
            except Exception:  # noqa: BLE001
                print(f"FAIL {method} {label} {spec[0]} {shape}: exception\n{traceback.format_exc()}", flush=True)
    if part != "main":
        print(f"CHECK-DONE {method} {part}", flush=True)
        return
    # K-major A (rows not TMA-readable): "gw" splits A beforehand and runs the "pg" kernel
    a = torch.randn(336, 2900, generator=gen).cuda().T
    b = torch.randn(336, 1100, generator=gen).cuda()
    pieces = split_t(b, method)
    cfg = KernelConfig.parse(CONFIGS[method]["gw"])
    try:
        em._WGMMA_FAILED.clear()
        want = emu_mm(a, pieces, method, config=KernelConfig.parse(CONFIGS[method]["pg"]))
        got = emu_mm(a, pieces, method, config=cfg)
        ok, why = _same_bits(got, want)
        ok = ok and not em._WGMMA_FAILED
        print(f"{'PASS' if ok else 'FAIL'} {method} gw-kmajorA {cfg} M=2900 K=336 N=1100: {why} "
              f"failed={em._WGMMA_FAILED}", flush=True)
    except Exception:  # noqa: BLE001
        print(f"FAIL {method} gw-kmajorA: exception\n{traceback.format_exc()}", flush=True)
    # compile the other timed configurations at the timed specialisation (M, N, K multiples of 16, bias)
    a = torch.randn(1024, 256, generator=gen).cuda()
    b = torch.randn(256, 512, generator=gen).cuda()
    bias = torch.randn(512, generator=gen).cuda()
    pieces = split_t(b, method)
    for label, text in CONFIGS[method].items():
        t0 = time.time()
        try:
            emu_mm(a, pieces, method, bias, config=KernelConfig.parse(text))
            torch.cuda.synchronize()
            print(f"WARM {method} {label} {text}: {time.time() - t0:.1f} s", flush=True)
        except Exception:  # noqa: BLE001
            print(f"WARM {method} {label} {text}: exception\n{traceback.format_exc()}", flush=True)
    print(f"CHECK-DONE {method} {part}", flush=True)


def run_checks() -> dict[str, set[str]]:
    """The bit checks in subprocesses (per method: the library's "gw" and the variants; all in parallel,
    compiling in parallel too): method -> labels that passed every case."""
    procs = {}
    for m in METHODS:
        for part in ("main", "variants"):
            procs[(m, part)] = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--check", m, part],
                                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 170
    outs = {m: "" for m in METHODS}
    for (m, part), p in procs.items():
        try:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            try:
                out, _ = p.communicate(timeout=20)
            except Exception:  # noqa: BLE001
                out = ""
            out += (f"\nTIMEOUT {m} {part}: the check did not finish in time (a deadlocked kernel?); its unfinished "
                    "cases are not timed\n")
        print(f"===== bits: {m} {part} =====\n{out.strip()}", flush=True)
        outs[m] += out + "\n"
    passed: dict[str, set[str]] = {}
    for m, out in outs.items():
        expect, good, bad = {}, {}, set()
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[0] == "EXPECT" and parts[1] == m:
                expect[parts[2]] = int(parts[3])
            elif len(parts) >= 3 and parts[0] == "PASS" and parts[1] == m:
                good[parts[2]] = good.get(parts[2], 0) + 1
            elif len(parts) >= 3 and parts[0] == "FAIL" and parts[1] == m:
                bad.add(parts[2])
        passed[m] = {lab for lab, n in expect.items() if lab not in bad and good.get(lab, 0) >= n}
        print(f"bits {m}: timed (passed every case): {sorted(passed[m])}; failed or unfinished: "
              f"{sorted((set(VARIANTS[m]) | {'gw'}) - passed[m])}", flush=True)
    return passed


# =====================================================================================================
# 2. timing
# =====================================================================================================


class Progress:
    def __init__(self):
        self.t = time.time()
        self.what = "start"
        self.rows: list[dict] = []
        self.stall_limit = 200.0  # seconds without progress before the watchdog ends the probe

    def mark(self, what: str) -> None:
        self.t = time.time()
        self.what = what


PROGRESS = Progress()
CSV_PATH = os.path.join(OUT, "ws_probe.csv")
FIELDS = ["round", "method", "label", "config", "M", "K", "N", "ms", "p20_ms", "p80_ms", "tflops", "x_sgemm",
          "vs_pg", "same_bits_as_pg", "note", "gpu", "torch", "triton"]


def write_row(row: dict) -> None:
    PROGRESS.rows.append(row)
    new = not os.path.exists(CSV_PATH)
    with open(CSV_PATH, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        if new:
            w.writeheader()
        w.writerow(row)


def watchdog() -> None:
    while True:
        time.sleep(2)
        stalled = time.time() - PROGRESS.t
        if elapsed() > HARD_S or stalled > PROGRESS.stall_limit:
            print(f"\nWATCHDOG: ending the probe at {elapsed():.0f} s (stalled {stalled:.0f} s in: {PROGRESS.what}); "
                  f"rows so far are in {CSV_PATH}", flush=True)
            os._exit(3)


def bench(fn, reps: int = 20, warm: int = 3) -> tuple[float, float, float]:
    import torch

    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for s, e in ev:
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    ts = sorted(s.elapsed_time(e) for s, e in ev)
    q = statistics.quantiles(ts, n=5)
    return statistics.median(ts), q[0], q[3]


def time_round(rnd: str, passed: dict[str, set[str]], labels_of, info: dict) -> None:
    import torch

    from tcemu.emulation.gemm import KernelConfig, emu_mm, split_t
    em = importlib.import_module("tcemu.emulation.gemm.emu_mm")  # the module (the package exports the function)

    gen = torch.Generator(device="cuda").manual_seed(0)
    for M, K, N in SHAPES:
        if elapsed() > BUDGET_S:
            print(f"[{rnd}] SKIPPED (time budget) from shape {M}x{K}x{N} on", flush=True)
            return
        PROGRESS.mark(f"{rnd} alloc {M}x{K}x{N}")
        a = torch.randn(M, K, device="cuda", generator=gen)
        b = torch.randn(K, N, device="cuda", generator=gen)
        bias = torch.randn(N, device="cuda", generator=gen)
        flop = 2.0 * M * N * K
        torch.backends.cuda.matmul.allow_tf32 = False
        PROGRESS.mark(f"{rnd} sgemm {M}x{K}x{N}")
        t = bench(lambda: torch.addmm(bias, a, b))
        sg = t[0]
        print(f"[{rnd}] M={M} K={K} N={N}: SGEMM {sg:.3f} ms {flop / sg / 1e9:.1f} TF/s", flush=True)
        write_row(dict(round=rnd, method="sgemm", label="sgemm", config="torch.addmm", M=M, K=K, N=N, ms=sg,
                       p20_ms=t[1], p80_ms=t[2], tflops=flop / sg / 1e9, x_sgemm=1.0, **info))
        for method in METHODS:
            pieces = split_t(b, method)
            ref = None
            pg_ms = None
            for label, (cfg_text, runner) in labels_of(method).items():
                if elapsed() > BUDGET_S:
                    print(f"[{rnd}] SKIPPED (time budget) {method} {label} {M}x{K}x{N}", flush=True)
                    continue
                if label.startswith("gw") and label not in passed.get(method, set()):
                    print(f"[{rnd}] not timed (bits not checked PASS): {method} {label}", flush=True)
                    continue
                PROGRESS.mark(f"{rnd} {method} {label} {cfg_text} {M}x{K}x{N}")
                cfg = KernelConfig.parse(cfg_text)
                note = ""
                try:
                    em._WGMMA_FAILED.clear()
                    fn = runner(a, pieces, method, bias, cfg)
                    out = fn()
                    torch.cuda.synchronize()
                    if em._WGMMA_FAILED:
                        note = f"GLUON FAILED, Triton kernel ran: {em._WGMMA_FAILED}"
                    same = ""
                    if label == "pg":
                        ref = out
                    elif ref is not None and label.startswith("gw"):
                        same = _same_bits(out, ref)[0]
                    del out
                    t = bench(fn)
                except Exception:  # noqa: BLE001
                    print(f"[{rnd}] {method} {label} {cfg_text} {M}x{K}x{N}: exception\n{traceback.format_exc()}",
                          flush=True)
                    continue
                if label == "pg":
                    pg_ms = t[0]
                tf = flop / t[0] / 1e9
                vs_pg = pg_ms / t[0] if pg_ms else ""
                print(f"[{rnd}] {method:7s} {label:10s} {cfg_text:20s} {t[0]:8.3f} ms [{t[1]:.3f},{t[2]:.3f}] "
                      f"{tf:7.1f} TF/s {sg / t[0]:5.2f}x sgemm"
                      + (f" {vs_pg:5.2f}x pg" if vs_pg else "") + (f" same bits as pg: {same}" if same != "" else "")
                      + (f" {note}" if note else ""), flush=True)
                write_row(dict(round=rnd, method=method, label=label, config=cfg_text, M=M, K=K, N=N, ms=t[0],
                               p20_ms=t[1], p80_ms=t[2], tflops=tf, x_sgemm=sg / t[0], vs_pg=vs_pg,
                               same_bits_as_pg=same, note=note, **info))
            del pieces, ref
        del a, b, bias
        torch.cuda.empty_cache()


def summary() -> None:
    rows = PROGRESS.rows
    rounds = sorted({r["round"] for r in rows})
    print("\n===== summary: ms, TFLOP/s, x SGEMM; rounds separated by / =====")
    for M, K, N in SHAPES:
        for method in ["sgemm"] + METHODS:
            sel = [r for r in rows if (r["M"], r["K"], r["N"]) == (M, K, N) and r["method"] == method]
            if not sel:
                continue
            labels = list(dict.fromkeys(r["label"] for r in sel))
            cells = []
            for lab in labels:
                per = [next((f"{r['ms']:.3f}ms {r['tflops']:.0f}TF/s {r['x_sgemm']:.2f}x" for r in sel
                             if r["label"] == lab and r["round"] == rd),
                            "-") for rd in rounds]
                cells.append(f"{lab}: " + " / ".join(per))
            print(f"{M}x{K}x{N} {method:7s} " + "  ".join(cells))


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--check":
        logging.basicConfig(level=logging.WARNING)
        check(sys.argv[2], sys.argv[3])
        return
    import torch
    import triton

    logging.basicConfig(level=logging.WARNING)
    os.makedirs(OUT, exist_ok=True)
    if os.path.exists(CSV_PATH):
        os.remove(CSV_PATH)
    info = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__)
    print(info, flush=True)
    threading.Thread(target=watchdog, daemon=True).start()

    PROGRESS.mark("bit checks (subprocesses)")
    passed = run_checks()
    print(f"\n[bits done at {elapsed():.0f} s]", flush=True)
    PROGRESS.stall_limit = 120.0  # a timed call (compile included) never takes this long

    from tcemu.emulation.gemm import emu_mm

    def via_emu_mm(a, pieces, method, bias, cfg):
        return lambda: emu_mm(a, pieces, method, bias, config=cfg)

    def main_labels(method):
        return {lab: (c, via_emu_mm) for lab, c in CONFIGS[method].items()}

    def variant_labels(method):
        d = {"pg": (CONFIGS[method]["pg"], via_emu_mm), "gw": (CONFIGS[method]["gw"], via_emu_mm)}
        for lab, (c, stages, sw, sr) in VARIANTS[method].items():
            def run(a, pieces, method, bias, cfg, stages=stages, sw=sw, sr=sr):
                import torch

                out = torch.empty((a.shape[0], pieces[0].shape[0]), device=a.device, dtype=torch.float32)
                return lambda: ws_direct(a, pieces, method, bias, cfg, stages, sw, sr, out=out)
            d[lab] = (c, run)
        return d

    for rnd in ("round1", "round2"):
        time_round(rnd, passed, main_labels, info)
        print(f"[{rnd} done at {elapsed():.0f} s]", flush=True)
    time_round("variants", passed, variant_labels, info)
    print(f"[variants done at {elapsed():.0f} s]", flush=True)
    summary()
    print(f"\nCSV: {CSV_PATH}; total {elapsed():.0f} s", flush=True)


if __name__ == "__main__":
    main()
