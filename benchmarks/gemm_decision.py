# /// script
# requires-python = ">=3.11"
# dependencies = ["tcemu[triton]"]
# ///
"""Measure the small-shape decision table of this GPU: emulated GEMM vs cuBLAS SGEMM by row count, per product.

For each product (role, N, K) of PET S's and PET M's linear layers (``_pet_gemms.py``: forward ``x @ W^T`` and
input gradient ``dy @ W``) and each method (TF32x3, BF16x6, BF16x3), at the row counts M of the 192-, 1,536-,
5,184- and 17,280-atom water systems and on a log grid between them, this times side by side, interleaved:

* ``sgemm``: what the fallback runs (``tcemu.emulation.gemm.triton_backend._sgemm_impl``: ``addmm`` with the bias
  in the forward, TF32 off);
* ``tf32``: the same call with cuBLAS TF32 on, the single-pass ceiling of every split method (issue 42: a method
  of n products fits in SGEMM's time where TF32 runs the shape more than n times faster);
* the emulated call the backend makes with the fallback off (``TritonBackend.linear`` / ``linear_input_grad``,
  weight split in the call as ``EmulatedLinear`` does, static kernel table).

GPU time: CUDA events around each call, the host having queued a whole round behind a ``torch.cuda._sleep`` so that
launch gaps do not count; rounds interleave the implementations (rotated), 5-15 rounds per point; p20, p50, p80.
L2 is not flushed (a model's layer reads what the previous one just wrote). Host time: wall time per call of
20 calls (3 where a round takes over 5 ms) queued behind a sleep (the launch cost alone). The log grid of a
product stops rising once every method has won twice in a row (the margin below), so the budget goes to the small
row counts where the decision is made.

Output, written after every product (a killed run keeps what it measured): ``decision_<gpu>.json``, the table
``tcemu.emulation.gemm.decision`` reads (``TCEMU_SMALL_SHAPE_TABLE=...`` uses it at once; committed under
``src/tcemu/emulation/gemm/data/`` it ships for this GPU model), and ``gemm_decision.csv`` (``tcemu._results``,
benchmark ``gemm_decision``, one case per (role, M, N, K, label) and method, metrics ``UNITS``).

    python benchmarks/gemm_decision.py --out-dir $OUT/decision [--table src/tcemu/emulation/gemm/data/h100.json]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from tcemu._results import Provenance, from_wide, write_results

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the private helpers beside this script
from _gemm_compile import precompile  # noqa: E402
from _pet_gemms import products  # noqa: E402

METHODS = ("tf32x3", "bf16x6", "bf16x3")
CASE_FIELDS = ("role", "M", "N", "K", "label")
UNITS = {"p20_ms": "ms", "p50_ms": "ms", "p80_ms": "ms", "host_us": "us", "x_sgemm": "x",
         "x_sgemm_conservative": "x", "sgemm_over_tf32": "x", "rounds": "count"}
#: the margin the grid's stopping rule and the printed thresholds use (the library's default)
MARGIN = 0.05
#: no grid point above this many FLOPs (the system sizes' points are always measured)
GRID_MAX_FLOPS = 4e11


def row_grid(ms: list[int]) -> list[int]:
    """Powers of 2 from a quarter of the smallest system's rows (at least 64) to the largest system's."""
    lo, hi = max(64, min(ms) // 4), max(ms)
    out, m = [], 64
    while m <= hi:
        if m >= lo:
            out.append(m)
        m *= 2
    return out


def quantiles(xs: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(xs, n=10, method="inclusive")
    return q[1], statistics.median(xs), q[7]


class Product:
    """The operands and the calls of one (role, N, K) at up to ``max_m`` rows (views for smaller M)."""

    def __init__(self, role: str, N: int, K: int, max_m: int, gen: torch.Generator, device: str = "cuda"):
        self.role, self.N, self.K = role, N, K
        # the layer's weight W (out, in): fwd x (M, K) @ W^T with W (N, K); bwd_input dy (M, K) @ W with W (K, N)
        self.w = torch.randn(N, K, device=device, generator=gen) if role == "fwd" else \
            torch.randn(K, N, device=device, generator=gen)
        self.bias = torch.randn(N, device=device, generator=gen) if role == "fwd" else None
        self.a = torch.randn(max_m, K, device=device, generator=gen)

    def calls(self, M: int, methods: tuple[str, ...]) -> dict[str, callable]:
        from tcemu.emulation.gemm import TritonBackend
        from tcemu.emulation.gemm.triton_backend import _sgemm_impl
        from tcemu.emulation.methods import get_method
        from tcemu.emulation.reference import cuda_fp32_precision

        a, w, bias, be = self.a[:M], self.w, self.bias, TritonBackend()
        b = w.t() if self.role == "fwd" else w

        def tf32():
            with cuda_fp32_precision("tf32"):
                return torch.addmm(bias, a, b) if bias is not None else torch.mm(a, b)

        out = {"sgemm": lambda: _sgemm_impl(a, b, bias), "tf32": tf32}
        for m in methods:
            spec = get_method(m)
            out[m] = (lambda spec=spec: be.linear(a, w, None, spec, bias)) if self.role == "fwd" else \
                (lambda spec=spec: be.linear_input_grad(a, w, None, spec))
        return out


def time_point(calls: dict, rounds_max: int = 15) -> tuple[dict[str, list[float]], dict[str, float]]:
    """GPU ms of every call over interleaved rounds, and host us per call (module docstring)."""
    names = list(calls)
    for f in calls.values():  # warm-up: compiles, caches, allocator
        f()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for f in calls.values():
        f()
    torch.cuda.synchronize()
    round_s = time.perf_counter() - t0
    rounds = int(min(rounds_max, max(5, 0.03 / max(round_s, 1e-6))))
    # host time per call (queued behind a sleep: the launch cost alone), and so the sleep that hides a round's
    n_host = 20 if round_s < 0.005 else 3
    host = {}
    for n, f in calls.items():
        torch.cuda._sleep(int(4e6))  # ~2 ms: the calls below queue behind it
        t0 = time.perf_counter()
        for _ in range(n_host):
            f()
        host[n] = (time.perf_counter() - t0) / n_host * 1e6
        torch.cuda.synchronize()
    round_host_s = sum(host.values()) * 1e-6
    sleep_cycles = int(max(2e5, 4 * round_host_s * 2e9))
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        ev = []
        torch.cuda._sleep(sleep_cycles)
        for n in order:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            calls[n]()
            e.record()
            ev.append((n, s, e))
        torch.cuda.synchronize()
        for n, s, e in ev:
            times[n].append(s.elapsed_time(e))
    return times, host


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out-dir", default=os.path.join(os.environ.get("OUT", "out"), "decision"))
    p.add_argument("--table", default="", help="also write the table JSON here (e.g. under src/tcemu/.../data/)")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--models", default="pet-s,pet-m")
    p.add_argument("--budget-s", type=float, default=330.0, help="stop starting products after this many seconds")
    p.add_argument("--quick", action="store_true", help="two products, three row counts (pipeline check)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("gemm_decision.py needs a CUDA GPU")
    import tcemu
    from tcemu.emulation.gemm.decision import FORMAT, DecisionTable

    t_start = time.perf_counter()
    methods = tuple(args.methods.split(","))
    prov = Provenance.current()
    gpu = torch.cuda.get_device_name()
    print(prov, flush=True)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    slug = gpu.lower().replace("nvidia ", "").replace(" ", "_")
    table_path = out_dir / f"decision_{slug}.json"
    csv_path = out_dir / "gemm_decision.csv"
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    settings = contextlib.ExitStack()  # the kernels themselves (no fallback), for the rest of the process
    settings.enter_context(tcemu.config(small_shape_fallback=False))

    prods = products(tuple(args.models.split(",")))
    # PET S's products first, the smaller N K first within a model: the budget keeps what matters most
    order = sorted(prods, key=lambda k: (not any(lbl.startswith("pet-s") for lbl, _ in prods[k]), k[1] * k[2], k))
    if args.quick:
        order = order[:2]
    plan = {}
    for role, N, K in order:
        sys_ms: dict[int, str] = {}
        for lbl, m in prods[role, N, K]:  # one of two systems' row counts within 5 % (edge and token rows)
            if not any(abs(m - o) <= 0.05 * o for o in sys_ms):
                sys_ms[m] = lbl
        grid = [m for m in row_grid(list(sys_ms)) if 2.0 * m * N * K <= GRID_MAX_FLOPS]
        if args.quick:
            grid, sys_ms = grid[:2], dict(list(sys_ms.items())[:1])
        plan[role, N, K] = (sorted(set(grid) | set(sys_ms)), sys_ms)
    # the Triton kernels of the static table, compiled in parallel (the Gluon ones compile at their first launch)
    from tcemu.emulation.gemm import pick_config
    from tcemu.emulation.methods import get_method

    jobs = []
    for (role, N, K), (points, _) in plan.items():
        for meth in methods:
            for M in points:
                cfg = pick_config(get_method(meth), M, N, K)
                if not cfg.wgmma:
                    jobs.append(("tcemu", meth, M, N, K, str(cfg), role == "fwd"))
    precompile(jobs, min(16, os.cpu_count() or 1))
    gen = torch.Generator(device="cuda").manual_seed(0)
    curves: dict[tuple, list[dict]] = {}
    rows: list[dict] = []

    def save() -> None:
        table = {"format": FORMAT, "device": gpu, "provenance": dataclasses.asdict(prov),
                 "measured_by": "benchmarks/gemm_decision.py", "margin_printed": MARGIN,
                 "curves": [{"method": m, "role": r, "N": n, "K": k, "points": pts}
                            for (m, r, n, k), pts in curves.items()]}
        DecisionTable.from_json(table)  # what the library will read
        head = json.dumps({k: v for k, v in table.items() if k != "curves"}, indent=1)
        text = (head[:-2] + ',\n "curves": [\n  ' + ",\n  ".join(json.dumps(c) for c in table["curves"])
                + "\n ]\n}\n")  # one curve a line
        table_path.write_text(text)
        if args.table:
            Path(args.table).parent.mkdir(parents=True, exist_ok=True)
            Path(args.table).write_text(text)
        write_results(csv_path, from_wide("gemm_decision", rows, CASE_FIELDS, UNITS), prov)

    for role, N, K in order:
        if time.perf_counter() - t_start > args.budget_s:
            print(f"budget: skipped {role} N={N} K={K}", flush=True)
            continue
        points, sys_ms = plan[role, N, K]
        prod = Product(role, N, K, max(points), gen)
        wins = 0
        print(f"--- {role} N={N} K={K}: {len(points)} row counts "
              f"[{time.perf_counter() - t_start:.0f} s]", flush=True)
        for M in points:
            on_grid_only = M not in sys_ms
            if on_grid_only and wins >= 2:
                continue
            try:
                times, host = time_point(prod.calls(M, methods))
            except Exception as exc:  # noqa: BLE001 - one failing product must not stop the run
                print(f"  M={M}: FAILED {type(exc).__name__}: {exc}"[:300], flush=True)
                continue
            q = {n: quantiles(t) for n, t in times.items()}
            label = sys_ms.get(M, "grid")
            line = f"  M={M:7d} {label:18s} sgemm {q['sgemm'][1]:8.4f} ms  tf32 {q['sgemm'][1] / q['tf32'][1]:5.2f}x"
            all_win = True
            for n, t in times.items():
                x = q["sgemm"][1] / q[n][1]
                cons = q["sgemm"][0] / q[n][2]
                rows.append(dict(impl="cublas" if n in ("sgemm", "tf32") else "tcemu", method=n, role=role, M=M,
                                 N=N, K=K, label=label, p20_ms=q[n][0], p50_ms=q[n][1], p80_ms=q[n][2],
                                 host_us=host[n], x_sgemm=x, x_sgemm_conservative=cons,
                                 sgemm_over_tf32=q["sgemm"][1] / q["tf32"][1], rounds=len(t)))
                if n in methods:
                    curves.setdefault((n, role, N, K), []).append(
                        {"M": M, "sgemm_ms": list(q["sgemm"]), "emu_ms": list(q[n]), "tf32_ms": list(q["tf32"]),
                         "sgemm_host_us": host["sgemm"], "emu_host_us": host[n], "label": label})
                    all_win &= cons >= 1 + MARGIN
                    line += f" | {n} {x:5.2f}x ({cons:4.2f}) {host[n]:5.1f}us"
            wins = wins + 1 if all_win else 0
            print(line + f" | host sgemm {host['sgemm']:.1f}us", flush=True)
        for key in curves:  # keep each curve's points ordered by M
            curves[key].sort(key=lambda pt: pt["M"])
        save()
        del prod
        torch.cuda.empty_cache()

    table = DecisionTable.load(table_path)
    print(f"\nrow thresholds at margin {MARGIN} (emulated from this M up; 'never' where the largest M is slower):")
    for (m, r, n, k), c in sorted(table.curves.items()):
        t = c.row_threshold(MARGIN)
        print(f"  {m:7s} {r:9s} N={n:5d} K={k:5d}: {'never' if t >= 1 << 62 else t}")
    print(f"wrote {table_path}, {csv_path} [{time.perf_counter() - t_start:.0f} s]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
