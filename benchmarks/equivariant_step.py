# /// script
# requires-python = ">=3.11"
# dependencies = ["tcemu[mlip,triton]"]
# ///
"""Energy+forces step of an equivariant potential (MACE) with emulated FP32: FP32 against TF32x3 and BF16x6.

One step is what an MD engine does between neighbour-list rebuilds: MACE's own forward with
``compute_force=True`` on a prepared batch (edge vectors from the positions, pairs fixed; energy; forces by
autograd inside the model). No ASE in the timed loop. The model: MACE (mace-torch, random weights from
``tcemu.mlip.calculators.build_mace``) with 128 channels (hidden irreps 128x0e + 128x1o), spherical harmonics to
L = 3, correlation 3, 2 interactions, 5 A cutoff, e3nn's default TorchScript code (``emulate_`` rebuilds it in
eager form). The system: the 192-atom water box replicated 2 x 2 x 3 (2,304 atoms, about 50 neighbours each), so
that the radial MLPs' and the tensor products' GEMMs are large.

Per configuration (method x mode):

* ``step_ms``: the median of ``--rounds`` timed steps, the configurations interleaved (one step of each in
  turn, in a rotated order each round; ``step_p20_ms``, ``step_p80_ms`` too);
* ``force_max_err``, ``force_mean_err`` (eV/A) and ``energy_err`` (eV) against an FP64 copy of the model;
* the coverage of one untimed eager step (``tcemu.coverage()``): ``coverage`` (share of the float32 contraction
  FLOPs emulated), ``fallback_share`` (cuBLAS SGEMM for GEMMs below the small-shape threshold), ``fp32_share``
  (plain FP32), ``flops`` (per step, forward and backward); ``--every-gemm`` switches the fallback off;
* ``peak_mem_gb``.

Modes: ``eager`` and ``compile`` (``torch.compile`` of the model as mace-torch prepares it for compiling,
``build_mace(for_compile=True)``: ``autograd.grad`` outside Dynamo's graphs, so the forces are one backward of
the compiled graph, called with ``training=False``: a kept forces' graph (``training=True``) fails with Inductor's
donated buffers;
speedups against FP32 in the same mode; a configuration that fails, or is skipped for
the time budget, records why in a ``note`` row). Output: one result file (``tcemu._results``: long rows with
their provenance: gpu, driver, torch, triton, git commit, date), benchmark ``equivariant_step``, impl ``tcemu``
(``torch`` for FP32), the case ``model, channels, max_ell, n_atoms, n_edges, mode, fallback, e3nn, mace``, at
``--out`` (default ``$OUT/results.csv``), rewritten as the configurations finish; a table on stdout.
``--budget-s`` (150) keeps the run under 4 minutes: no configuration starts after it, no timing round 60 s after.

    python benchmarks/equivariant_step.py                                   # H200, under 4 minutes
    python benchmarks/equivariant_step.py --every-gemm --methods fp32,tf32x3   # every product emulated
    python benchmarks/equivariant_step.py --device cpu --channels 8 --max-ell 1 --replicate 1,1,1 \\
        --methods fp32,tf32x3 --rounds 2 --out /tmp/eq.csv                   # CPU smoke test

Needs mace-torch (0.3.16), e3nn 0.4.4 (which mace-torch pins), ase and torch-ema besides tcemu's own
dependencies (docs/emulation.md lists the wheels for the GPU machine).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import math
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import torch

UNITS = {"coverage": "fraction", "fallback_share": "fraction", "fp32_share": "fraction", "flops": "FLOP",
         "force_max_err": "eV/A", "force_mean_err": "eV/A", "energy_err": "eV", "peak_mem_gb": "GB", "step_ms": "ms",
         "step_p20_ms": "ms", "step_p80_ms": "ms", "rounds": "count", "speedup_vs_fp32": "x", "note": "text"}


def prepare_batch(atoms, r_max: float, elements: tuple[int, ...], device: torch.device, dtype: torch.dtype) -> dict:
    """MACE's input dictionary for one periodic structure (ASE's neighbour list, MACE's conventions)."""
    from ase.neighborlist import neighbor_list

    i, j, shift = neighbor_list("ijS", atoms, r_max)
    cell = torch.tensor(atoms.cell.array, dtype=dtype, device=device)
    unit_shifts = torch.tensor(shift, dtype=dtype, device=device)
    index = torch.tensor([elements.index(int(z)) for z in atoms.numbers], device=device)
    n = len(atoms)
    return {
        "positions": torch.tensor(atoms.positions, dtype=dtype, device=device),
        "node_attrs": torch.nn.functional.one_hot(index, len(elements)).to(dtype),
        "edge_index": torch.tensor(np.stack([i, j]), dtype=torch.long, device=device),
        "unit_shifts": unit_shifts,
        "shifts": unit_shifts @ cell,
        "cell": cell,
        "batch": torch.zeros(n, dtype=torch.long, device=device),
        "ptr": torch.tensor([0, n], dtype=torch.long, device=device),
        "head": torch.zeros(1, dtype=torch.long, device=device),
    }


def step(model, batch: dict, training: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """One energy+forces evaluation: (energy, forces). ``training=True`` keeps the forces' graph."""
    data = dict(batch)
    data["positions"] = batch["positions"].detach().clone().requires_grad_(True)
    out = model(data, compute_force=True, training=training)
    return out["energy"].detach(), out["forces"].detach()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def versions() -> dict[str, str]:
    """The equivariant stack's versions (a case field: the GPU machine carries its own)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg, key in (("e3nn", "e3nn"), ("mace-torch", "mace")):
        try:
            out[key] = version(pkg)
        except PackageNotFoundError:
            out[key] = ""
    return out


@contextlib.contextmanager
def _every_gemm(on: bool):
    if not on:
        yield
        return
    from tcemu.mlip.report import every_gemm_emulated

    with every_gemm_emulated():
        yield


def build_config(bases: dict, method: str, mode: str):
    """The model of one configuration: FP32 or emulated, eager or compiled (from the MACE mace-torch prepares
    for ``torch.compile``)."""
    import tcemu

    model = copy.deepcopy(bases[mode])
    if method != "fp32":
        tcemu.emulate_(model, method, warn_unreachable=False)
    if mode == "compile":
        model = torch.compile(model)
    return model


def run(args: argparse.Namespace) -> list[dict]:
    import tcemu  # noqa: F401
    from tcemu.mlip import calculators, systems

    from tcemu._results import Provenance, case, measurement, write_results

    device = torch.device(args.device)
    t_start = time.time()
    prov = Provenance.current(args.device)
    vers = versions()
    rep = tuple(int(x) for x in args.replicate.split(","))
    atoms = systems.water_box().repeat(rep)
    elements = (1, 8)
    shape = (args.channels, args.max_ell, args.interactions, args.correlation, elements, args.r_max, args.seed)
    base = calculators.build_mace(*shape).to(device)
    bases = {"eager": base}
    if "compile" in args.modes.split(","):
        bases["compile"] = calculators.build_mace(*shape, for_compile=True).to(device)
    for b in bases.values():
        for p in b.parameters():
            p.requires_grad_(False)
    batch = prepare_batch(atoms, args.r_max, elements, device, torch.float32)
    n_edges = int(batch["edge_index"].shape[1])
    print(f"MACE {args.channels} channels, L={args.max_ell}, {len(atoms)} atoms, {n_edges} edges on {prov.gpu} "
          f"(torch {prov.torch}, triton {prov.triton}, e3nn {vers['e3nn']}, mace {vers['mace']})", flush=True)
    ref = copy.deepcopy(base).double()
    e64, f64 = step(ref, prepare_batch(atoms, args.r_max, elements, device, torch.float64))
    del ref
    rows: list = []

    def emit(method: str, mode: str, metric: str, value) -> None:
        where = case(model="mace", channels=args.channels, max_ell=args.max_ell, n_atoms=len(atoms), n_edges=n_edges,
                     mode=mode, fallback="off" if args.every_gemm else "on", **vers)
        rows.extend(measurement("equivariant_step", "torch" if method == "fp32" else "tcemu", method, where,
                                {metric: value}, UNITS))
        write_results(args.out, rows, prov)

    configs = [(m, mode) for mode in args.modes.split(",") for m in args.methods.split(",")]
    models, notes = {}, {}
    with _every_gemm(args.every_gemm):
        for method, mode in configs:
            name = f"{method}:{mode}"
            if time.time() - t_start > args.budget_s:
                notes[name] = f"skipped: past the {args.budget_s:.0f} s budget"
                continue
            try:
                model = build_config(bases, method, mode)
                run_step = step
                if mode == "eager":
                    with tcemu.coverage(model) as cov:
                        step(model, batch)
                    total = cov.flops()
                    emit(method, mode, "coverage", cov.fraction)
                    emit(method, mode, "fallback_share", cov.flops("fallback") / total if total else math.nan)
                    emit(method, mode, "fp32_share", cov.flops("fp32") / total if total else math.nan)
                    emit(method, mode, "flops", total)
                    if args.coverage_table:
                        print(f"--- {name}\n{cov.table(args.coverage_table)}", flush=True)
                e, f = run_step(model, batch)  # the first call also compiles
                for _ in range(args.warmup):
                    run_step(model, batch)
                _sync(device)
                dF = (f.double() - f64).norm(dim=-1)
                emit(method, mode, "force_max_err", dF.max().item())
                emit(method, mode, "force_mean_err", dF.mean().item())
                emit(method, mode, "energy_err", abs(e.double() - e64).max().item())
                models[name] = (model, run_step)
            except Exception as exc:  # noqa: BLE001 - one failing configuration must not lose the others
                notes[name] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
                traceback.print_exc()
        times: dict[str, list[float]] = {name: [] for name in models}
        names = list(models)
        for rnd in range(args.rounds if names else 0):
            if rnd and time.time() - t_start > args.budget_s + 60:
                print(f"stopping after {rnd} rounds: past the {args.budget_s + 60:.0f} s budget", flush=True)
                break
            for name in names[rnd % len(names):] + names[:rnd % len(names)]:
                if device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(device)
                _sync(device)
                t0 = time.perf_counter()
                model, run_step = models[name]
                run_step(model, batch)
                _sync(device)
                times[name].append((time.perf_counter() - t0) * 1e3)
                if device.type == "cuda" and rnd == 0:
                    emit(*name.split(":"), "peak_mem_gb", torch.cuda.max_memory_allocated(device) / 2**30)
    for name, ts in times.items():
        if not ts:
            continue
        q = statistics.quantiles(ts, n=10) if len(ts) >= 2 else [ts[0]] * 9
        for metric, v in (("step_ms", statistics.median(ts)), ("step_p20_ms", q[1]), ("step_p80_ms", q[7]),
                          ("rounds", len(ts))):
            emit(*name.split(":"), metric, v)
    for name, note in notes.items():
        emit(*name.split(":"), "note", note)
    for name, ts in times.items():  # against FP32 in the same mode (eager against eager, compiled against compiled)
        fp32 = times.get("fp32:" + name.split(":")[1])
        if ts and fp32:
            emit(*name.split(":"), "speedup_vs_fp32", statistics.median(fp32) / statistics.median(ts))
    return rows


def print_table(path: str) -> None:
    from tcemu._results import read_wide

    cols = ("step_ms", "speedup_vs_fp32", "force_max_err", "energy_err", "coverage", "fallback_share", "fp32_share")
    print(f"{'config':18s} " + " ".join(f"{c:>15s}" for c in cols) + "  note")
    for r in read_wide(path):
        cells = []
        for c in cols:
            try:
                cells.append(f"{float(r[c]):15.4g}")
            except (KeyError, TypeError, ValueError):
                cells.append(f"{'-':>15s}")
        print(f"{r['method'] + ':' + r['mode']:18s} " + " ".join(cells) + f"  {r.get('note', '')}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--channels", type=int, default=128)
    p.add_argument("--max-ell", type=int, default=3)
    p.add_argument("--correlation", type=int, default=3)
    p.add_argument("--interactions", type=int, default=2)
    p.add_argument("--r-max", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--replicate", default="2,2,3", help="copies of the 192-atom water box along a, b, c")
    p.add_argument("--methods", default="fp32,tf32x3,bf16x6")
    p.add_argument("--modes", default="eager,compile")
    p.add_argument("--rounds", type=int, default=7, help="interleaved timed steps per configuration")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps after the first")
    p.add_argument("--every-gemm", action="store_true", help="switch the small-shape SGEMM fallback off")
    p.add_argument("--budget-s", type=float, default=150.0,
                   help="no configuration starts after this many seconds, no timing round after 60 s more")
    p.add_argument("--coverage-table", type=int, default=0, help="print the coverage table's top N rows")
    p.add_argument("--out", default=str(Path(os.environ.get("OUT", ".")) / "results.csv"))
    args = p.parse_args(argv)
    if args.device == "cpu":
        torch.set_num_threads(min(torch.get_num_threads(), 4))
    run(args)
    print_table(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
