# /// script
# requires-python = ">=3.11"
# dependencies = ["tcemu[mlip,triton]"]
# ///
"""Energy+forces step time of PET with emulated FP32 (issue 7): every method, eager and compiled.

One "step" is what an MD engine does between neighbour-list rebuilds: distance vectors recomputed
from the positions on the device (pairs fixed), the model's energy, and forces by autograd. The
neighbour-list rebuild is timed separately (``nl_build_ms``) so that the cap it puts on the step is
visible. Compared side by side in one run, per (PET shape, system):

* FP32 eager and FP32 ``torch.compile`` (the baseline the speedups refer to);
* single-pass TF32 (cuBLAS TF32, the upper bound of any split method) and TF32x3, BF16x3, BF16x6,
  BF16x9 through ``tcemu.emulate_`` (Triton kernels on CUDA), eager and compiled;
* the force error of each method against an FP64 copy of the same model, and FP32's noise floor
  (FP32 eager vs FP32 compiled: the same arithmetic in another accumulation order);
* with ``--profile``: the share of GPU time spent in GEMM kernels, so that the step time can be read as
  GEMM share x GEMM speedup; peak memory per configuration.

Modes: ``eager``; ``compile`` (``torch.compile`` of PET's backend, static shapes); ``graph`` (the same with
``mode="reduce-overhead"``: Inductor captures CUDA graphs; the note counts Inductor's cudagraph skips).
``--compile-scope full`` compiles PET's structure preprocessing too (``COMPILE_SCOPES``), for every compiled
configuration of the invocation, FP32 included (column ``compile_scope``).
``--configs fp32:eager,tf32x3:compile,...`` runs an explicit list instead of methods x modes, in that order,
a method written ``tf32x3+attn`` also emulates PET's attention for that configuration alone (as
``--emulate-attention`` does for every split method; column ``attention``: PET's attention blocks run inside
``tcemu.emulation_mode``; ``tf32x3+attn-step`` runs the whole step inside it instead), and ``--budget-s``
skips what would start after that many seconds (noted), so a run on a time-limited machine keeps its
priorities. Rows are written as they finish.

Output: one result file (``tcemu._results``: long rows with their provenance) with one measured case per
(model, n_atoms, method, mode, compile_scope, attention, round) and the metrics ``median_ms``, ``p20_ms``,
``p80_ms``, ``speedup_vs_fp32_compile``, ``force_err_vs_fp64``, ``fp32_noise_floor``, ``gemm_share``,
``gemm_ms`` (GPU time in GEMM kernels in one profiled step), ``peak_mem_gb``, ``nl_build_ms`` and ``note``
(``UNITS``), and a figure beside it; with ``--profile-top DIR`` the top kernels of each profiled step go to
``DIR/<model>_<n>_<method>_<mode>.txt``. A configuration that fails records the error in ``note`` instead of
stopping the run. Stored runs: ``benchmarks/results/h200/md_step/``.

    python benchmarks/md_step.py --out out/md_step.csv                                # GPU, full sizes
    python benchmarks/md_step.py --device cpu --shapes tiny --systems water_192 \\
        --methods fp32,tf32x3 --modes eager --repeats 2 --out /tmp/md_step_cpu.csv   # CPU smoke test
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

from tcemu._results import Provenance, from_wide, read_wide, write_results

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the private helpers beside this script
from _pet_step import (  # noqa: E402
    COMPILE_SCOPES,
    StepInputs,
    compile_backend,
    cudagraph_skips,
    energy_and_forces,
    free,
    gemm_share,
    impl_of,
    prepare_inputs,
    sync,
    time_steps,
)

#: what identifies a measured configuration (the ``case`` of a result row), and every metric's unit
CASE_FIELDS = ("model", "n_atoms", "mode", "compile_scope", "attention", "round")
UNITS = {"median_ms": "ms", "p20_ms": "ms", "p80_ms": "ms", "speedup_vs_fp32_compile": "x",
         "force_err_vs_fp64": "eV/A", "fp32_noise_floor": "eV/A", "gemm_share": "fraction", "gemm_ms": "ms",
         "peak_mem_gb": "GB", "nl_build_ms": "ms", "note": "text"}


def split_config_method(method: str, emulate_attention: bool = False) -> tuple[str, str]:
    """``"tf32x3+attn"`` -> ("tf32x3", "blocks"): the method and where PET's attention is emulated.

    ``"blocks"``: PET's attention blocks run inside ``emulation_mode`` (``tcemu.emulate_functional_``);
    ``"step"`` (``+attn-step``): the whole step does (the mode then intercepts every
    torch call of the step's eager code); ``""``: torch's FP32 attention.
    """
    from tcemu.emulation.configuration import EmulationConfig

    written = "+" in method
    cfg = EmulationConfig.from_method_string(method)  # the suffix: attention "blocks" or "step"
    scope = "" if cfg.attention == "none" else cfg.attention
    scope = scope or ("blocks" if emulate_attention else "")
    if scope and cfg.method in ("fp32", "tf32"):
        if written:
            raise ValueError(f"{method!r}: attention is emulated by split methods only")
        scope = ""
    return cfg.method, scope


#: the ``attention`` column for each scope, and the suffix that names it in plots and summaries
ATTENTION_COLUMN = {"": "fp32", "blocks": "emulated", "step": "emulated-step"}
ATTENTION_SUFFIX = {"fp32": "", "emulated": "+attn", "emulated-step": "+attn-step"}


def _plan(args: argparse.Namespace) -> list[tuple[str, str]]:
    if args.configs:
        plan = [tuple(c.split(":")) for c in args.configs.split(",")]
    else:
        plan = [(m, mode) for m in args.methods.split(",") for mode in args.modes.split(",")]
    for method, _ in plan:
        split_config_method(method)  # a bad suffix fails before any model is built
    return plan


def run(args: argparse.Namespace) -> list[dict]:
    from tcemu.mlip import systems
    from tcemu.mlip.models import build_pet

    device = torch.device(args.device)
    prov = Provenance.current(args.device)
    rows: list[dict] = []
    t_start = time.perf_counter()
    plan = _plan(args)
    for shape in args.shapes.split(","):
        for sname in args.systems.split(","):
            atoms = systems.build(sname)
            n_atoms = len(atoms)
            model_name = f"pet-{shape}"
            print(f"== PET {shape}, {sname} ({n_atoms} atoms)", flush=True)
            if args.budget_s and time.perf_counter() - t_start > args.budget_s:
                for method, mode in plan:
                    rows.append(dict(model=model_name, n_atoms=n_atoms, method=method.partition("+")[0], mode=mode,
                                     note="skipped: time budget"))
                write_rows(rows, args.out, prov)
                continue
            results: dict[tuple[str, str], dict] = {}
            forces: dict[tuple[str, str], torch.Tensor] = {}
            ref_note = ""
            try:
                base = build_pet(shape).to(device)
                forces64 = None
                if not args.no_fp64:
                    try:
                        ref = copy.deepcopy(base).double()
                        inp64 = prepare_inputs(atoms, ref.export(), device, torch.float64)
                        _, forces64 = energy_and_forces(ref.export(), inp64, torch.float64)
                    except torch.OutOfMemoryError as exc:  # the FP32 steps may still fit: time them anyway
                        ref_note = f"no FP64 reference: {type(exc).__name__}"
                        print(f"  {ref_note}", flush=True)
                    ref = inp64 = None
                    free(device)
                inp = prepare_inputs(atoms, base.export(), device, torch.float32)
            except Exception as exc:  # noqa: BLE001 - e.g. out of memory for the FP64 reference
                note = f"setup failed: {type(exc).__name__}: {exc}"[:300]
                print(f"  {note}", flush=True)
                for method, mode in plan:
                    rows.append(dict(model=model_name, n_atoms=n_atoms, method=method.partition("+")[0], mode=mode,
                                     note=note))
                write_rows(rows, args.out, prov)
                base = ref = inp64 = None
                free(device)
                continue
            for rnd in range(1, args.rounds + 1):  # rounds interleave the configurations (host-bound noise)
                results = {}
                if args.interleave_steps:
                    for method, mode in plan:
                        base_method, attn_scope = split_config_method(method, args.emulate_attention)
                        results[method, mode] = dict(
                            model=model_name, n_atoms=n_atoms, method=base_method, mode=mode, note="",
                            nl_build_ms=round(inp.nl_build_ms, 3), round=rnd,
                            compile_scope=args.compile_scope if mode != "eager" else "",
                            attention=ATTENTION_COLUMN[attn_scope])
                    measure_interleaved(args, base, inp, plan, results, forces64)
                    _finish(results, {})
                    for (method, mode), row in results.items():
                        rows.append(row)
                        print(f"  {method:7s} {mode:8s} {row.get('median_ms', math.nan):9.2f} ms  "
                              f"force err {row.get('force_err_vs_fp64', math.nan):.3e}  {row['note']}", flush=True)
                    free(device)
                    write_rows(rows, args.out, prov)
                    continue
                for method, mode in plan:
                    base_method, attn_scope = split_config_method(method, args.emulate_attention)
                    row = dict(model=model_name, n_atoms=n_atoms, method=base_method, mode=mode, note="",
                               nl_build_ms=round(inp.nl_build_ms, 3), round=rnd,
                               compile_scope=args.compile_scope if mode != "eager" else "",
                               attention=ATTENTION_COLUMN[attn_scope])
                    if args.budget_s and time.perf_counter() - t_start > args.budget_s:
                        row["note"] = "skipped: time budget"
                        results[method, mode] = row
                        rows.append(row)
                        continue
                    try:
                        f = measure_config(args, base, inp, method, mode, row, f"{model_name}_{n_atoms}")
                        forces[method, mode] = f
                        if forces64 is not None:
                            row["force_err_vs_fp64"] = (f.double() - forces64).norm(dim=1).mean().item()
                        elif ref_note:
                            row["note"] += f"; {ref_note}"
                        print(f"  {method:7s} {mode:8s} {row['median_ms']:9.2f} ms  "
                              f"force err {row.get('force_err_vs_fp64', math.nan):.3e}  "
                              f"gemm {row.get('gemm_share', math.nan):.2f}  {row['note']}  "
                              f"[{time.perf_counter() - t_start:.0f} s]", flush=True)
                        del f
                    except Exception as exc:  # noqa: BLE001 - one failing configuration must not stop the run
                        row["note"] = f"{type(exc).__name__}: {exc}"[:300]
                        print(f"  {method:7s} {mode:8s} FAILED {row['note']}", flush=True)
                        if args.traceback:
                            traceback.print_exc()
                    results[method, mode] = row
                    rows.append(row)
                    free(device)
                    _finish(results, forces)
                    write_rows(rows, args.out, prov)
            del base, inp
            free(device)
    return rows


def build_step(args: argparse.Namespace, base, inp: StepInputs, method: str, mode: str) -> Callable[[], tuple]:
    """The energy+forces step of one (method, mode) on a fresh copy of ``base``: emulated, its attention
    scoped as the method's suffix says, compiled as ``mode`` says; it sets the FP32 matmul precision itself."""
    import tcemu

    method, attn_scope = split_config_method(method, args.emulate_attention)
    pet = copy.deepcopy(base)
    if method not in ("fp32", "tf32"):  # the nn.Linear swap; PET's attention only as the suffix says
        tcemu.emulate_(pet, method, warn_unreachable=False, functional=False)
    if attn_scope == "blocks":  # PET's F.scaled_dot_product_attention calls, and nothing else of the step
        from tcemu.mlip.models import is_pet_attention_block

        tcemu.emulate_functional_(pet, method, is_pet_attention_block, attention=True, matmuls=False)
    if mode in ("compile", "graph"):
        compile_backend(pet, graphs=mode == "graph", scope=args.compile_scope)
    elif mode != "eager":
        raise ValueError(f"unknown mode {mode!r} (eager, compile, graph)")
    model = pet.export()
    precision = "tf32" if method == "tf32" else "ieee"

    def step() -> tuple[torch.Tensor, torch.Tensor]:
        old = torch.backends.cuda.matmul.fp32_precision
        torch.backends.cuda.matmul.fp32_precision = precision
        try:
            if attn_scope == "step":
                # PET's F.scaled_dot_product_attention calls (and any other float32 product outside an nn.Linear)
                with tcemu.emulation_mode(method, attention=True):
                    return energy_and_forces(model, inp, torch.float32)
            return energy_and_forces(model, inp, torch.float32)
        finally:
            torch.backends.cuda.matmul.fp32_precision = old

    return step


def measure_config(args: argparse.Namespace, base, inp: StepInputs, method: str, mode: str, row: dict,
                   case: str) -> torch.Tensor:
    """Time one (method, mode) on a fresh copy of ``base``; fills ``row`` and returns the forces."""
    device = torch.device(args.device)
    skips0 = cudagraph_skips()
    step = build_step(args, base, inp, method, mode)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    _, forces = step()
    sync(device)
    first_s = time.perf_counter() - t0
    med, p20, p80 = time_steps(step, device, args.warmup, args.repeats)
    row.update(median_ms=med, p20_ms=p20, p80_ms=p80)
    if device.type == "cuda":
        row["peak_mem_gb"] = torch.cuda.max_memory_allocated(device) / 1e9
    if args.profile:
        share, gms, table = gemm_share(step, device)
        row.update(gemm_share=share, gemm_ms=gms)
        if args.profile_top and table:
            Path(args.profile_top).mkdir(parents=True, exist_ok=True)
            base_method, attn_scope = split_config_method(method, args.emulate_attention)
            suffix = ATTENTION_SUFFIX[ATTENTION_COLUMN[attn_scope]].replace("+", "_")
            (Path(args.profile_top) / f"{case}_{base_method}{suffix}_{mode}.txt").write_text(
                f"{case.replace('_', ' ', 1)} atoms {base_method} {mode}: median step {med:.2f} ms\n{table}\n")
    notes = [f"first call {first_s:.1f} s"]
    if mode == "graph":
        notes.append(f"inductor cudagraph skips {cudagraph_skips() - skips0}")
    row["note"] = "; ".join(notes)
    return forces


def measure_interleaved(args: argparse.Namespace, base, inp: StepInputs, plan: list[tuple[str, str]],
                        rows: dict[tuple[str, str], dict], forces64: torch.Tensor | None) -> None:
    """Time every configuration of ``plan`` step by step in turn (``--interleave-steps``), so that a drift
    of the host's speed reaches each configuration alike: all are built first, then ``repeats`` cycles run
    one step of each, the order rotated each cycle. Fills ``rows`` (median, p20, p80, force error, and in
    the note the median over cycles of the per-cycle time ratio to FP32 in the same mode where the plan has it,
    else to FP32 compiled)."""
    device = torch.device(args.device)
    for name in ("recompile_limit", "cache_size_limit"):  # one compiled copy of PET per configuration, all alive
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(64, getattr(torch._dynamo.config, name)))
    steps = {}
    for key in plan:
        row = rows[key]
        try:
            steps[key] = build_step(args, base, inp, *key)
            t0 = time.perf_counter()
            _, f = steps[key]()
            sync(device)
            row["note"] = f"first call {time.perf_counter() - t0:.1f} s; interleaved steps"
            if forces64 is not None:  # now: a CUDA-graph replay of another configuration may reuse the memory
                row["force_err_vs_fp64"] = (f.double() - forces64).norm(dim=1).mean().item()
            del f
        except Exception as exc:  # noqa: BLE001 - one failing configuration must not stop the run
            row["note"] = f"{type(exc).__name__}: {exc}"[:300]
            steps.pop(key, None)
            print(f"  {key[0]:7s} {key[1]:8s} FAILED {row['note']}", flush=True)
            if args.traceback:
                traceback.print_exc()
    keys = list(steps)
    for _ in range(args.warmup):
        for key in keys:
            steps[key]()
    sync(device)
    times: dict[tuple[str, str], list[float]] = {key: [] for key in keys}
    for cycle in range(args.repeats):
        shift = cycle % max(1, len(keys))
        for key in keys[shift:] + keys[:shift]:
            t0 = time.perf_counter()
            steps[key]()
            sync(device)
            times[key].append((time.perf_counter() - t0) * 1e3)
    for key in keys:
        ts = times[key]
        q = statistics.quantiles(ts, n=10) if len(ts) >= 2 else [ts[0]] * 9
        rows[key].update(median_ms=statistics.median(ts), p20_ms=q[1], p80_ms=q[7])
        # against FP32 in the same mode where it ran (CUDA graphs against CUDA graphs), else FP32 compiled
        ref_mode = key[1] if ("fp32", key[1]) in times else "compile"
        ref = times.get(("fp32", ref_mode))
        if ref:
            ratios = [a / b for a, b in zip(ref, ts)]
            qr = statistics.quantiles(ratios, n=10) if len(ratios) >= 2 else [ratios[0]] * 9
            rows[key]["note"] += (f"; per-cycle speedup vs fp32 {ref_mode} median {statistics.median(ratios):.3f}"
                                  f" (p20 {qr[1]:.3f}, p80 {qr[7]:.3f}), slower in {sum(r < 1 for r in ratios)}"
                                  f" of {len(ratios)} cycles")


def _finish(results: dict, forces: dict) -> None:
    """Noise floor (FP32 eager vs FP32 compiled) and speedups against FP32 compiled, on every row so far."""
    floor = math.nan
    if ("fp32", "eager") in forces and ("fp32", "compile") in forces:
        floor = (forces["fp32", "eager"] - forces["fp32", "compile"]).norm(dim=1).mean().item()
    baseline = results.get(("fp32", "compile"), {}).get("median_ms")
    for row in results.values():
        row["fp32_noise_floor"] = floor
        if baseline and row.get("median_ms"):
            row["speedup_vs_fp32_compile"] = baseline / row["median_ms"]


def write_rows(rows: list[dict], path: str, provenance: Provenance) -> None:
    """The rows so far as a result file (rewritten after each configuration: a run cut short keeps them)."""
    write_results(path, from_wide("md_step", ({"impl": impl_of(r["method"]), **r} for r in rows), CASE_FIELDS,
                                  UNITS), provenance)


def aggregate_rounds(rows: list[dict]) -> list[dict]:
    """One row per (model, n_atoms, method, mode): the median over rounds of ``median_ms`` and of the speedup
    (each against its own round's FP32 compiled), with the spread over rounds in ``round_min_ms`` /
    ``round_max_ms`` and the count in ``rounds``."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("median_ms") not in (None, ""):
            groups.setdefault((r["model"], str(r["n_atoms"]), r["method"], r["mode"], r.get("attention", "")),
                              []).append(r)
    out = []
    for group in groups.values():
        times = [float(r["median_ms"]) for r in group]
        speed = [float(r["speedup_vs_fp32_compile"]) for r in group
                 if r.get("speedup_vs_fp32_compile") not in (None, "")]
        agg = dict(group[0], median_ms=statistics.median(times), round_min_ms=min(times),
                   round_max_ms=max(times), rounds=len(times),
                   speedup_vs_fp32_compile=statistics.median(speed) if speed else "")
        out.append(agg)
    return out


def plot(csv_path: str, png_path: str) -> None:
    """Step time per method and mode, one panel per (model, n_atoms); speedup over FP32 compiled on the bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = aggregate_rounds(read_wide(csv_path))
    cases = list(dict.fromkeys((r["model"], r["n_atoms"]) for r in rows))
    if not cases:
        return
    ncols = min(4, len(cases))
    nrows = math.ceil(len(cases) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 4.2 * nrows), squeeze=False)
    for ax in axes.flat[len(cases):]:
        ax.set_visible(False)
    colors = {"eager": "#9ecae1", "compile": "#3182bd", "graph": "#08519c"}
    for ax, (model, n) in zip(axes.flat, cases):
        sub = [r for r in rows if (r["model"], r["n_atoms"]) == (model, n)]
        labels = [f"{r['method']}{ATTENTION_SUFFIX.get(r.get('attention', ''), '')}\n{r['mode']}" for r in sub]
        vals = [float(r["median_ms"]) for r in sub]
        bars = ax.bar(range(len(sub)), vals, color=[colors.get(r["mode"], "grey") for r in sub])
        for b, r in zip(bars, sub):
            if r.get("speedup_vs_fp32_compile"):
                ax.text(b.get_x() + b.get_width() / 2, b.get_height(), f"{float(r['speedup_vs_fp32_compile']):.2f}x",
                        ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(sub)), labels, rotation=90, fontsize=7)
        ax.set_ylabel("ms per energy+forces step")
        ax.set_title(f"{model}, {n} atoms", fontsize=9)
    gpu = rows[0].get("gpu", "")
    fig.suptitle(f"PET energy+forces step, {gpu} (torch {rows[0].get('torch', '')}, triton {rows[0].get('triton', '')})",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)
    print(f"wrote {png_path}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--shapes", default="s,s-nn32,m,l")
    p.add_argument("--systems", default="water_192,water_17280",
                   help="tcemu.mlip.systems names: water_192, water_1536, water_5184, water_17280, any supercell of "
                        "the 192-atom box as water_<atoms> or water_<a>x<b>x<c>")
    p.add_argument("--methods", default="fp32,tf32,tf32x3,bf16x3,bf16x6,bf16x9")
    p.add_argument("--modes", default="eager,compile")
    p.add_argument("--compile-scope", choices=sorted(COMPILE_SCOPES), default="full",
                   help="what compile/graph modes compile: PET's backend methods, or also its preprocessing")
    p.add_argument("--emulate-attention", action="store_true",
                   help="split methods also emulate PET's attention (its attention blocks inside "
                        "tcemu.emulation_mode(method, attention=True), by tcemu.emulate_functional_)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--profile", action="store_true",
                   help="GEMM share of GPU time (one extra step, profiled). PyTorch leaves CUPTI attached after a "
                        "profile (pytorch#144455), which slows the host side of later configurations: for "
                        "host-bound sizes, time without it, or try --teardown-cupti")
    p.add_argument("--teardown-cupti", action="store_true",
                   help="set TEARDOWN_CUPTI=1 so that CUPTI detaches after each profile (pytorch#144455; PyTorch "
                        "itself keeps it attached with CUDA graphs on CUDA < 12.6). Not yet tried on the GPU")
    p.add_argument("--profile-top", default="", help="directory for each profiled step's top-kernel table")
    p.add_argument("--configs", default="", help="explicit method:mode list, run in this order")
    p.add_argument("--budget-s", type=float, default=0.0, help="skip configurations starting after this")
    p.add_argument("--rounds", type=int, default=1,
                   help="run the configuration list this many times, interleaved (rows per round; speedups "
                        "against the same round's FP32 compiled; a summary of medians over rounds is printed)")
    p.add_argument("--interleave-steps", action="store_true",
                   help="build every configuration first, then time them one step each in turn (rotated), for "
                        "host-bound sizes where the host's speed drifts between configurations; no profile")
    p.add_argument("--plot-only", default="", help="draw the figure from this CSV and exit")
    p.add_argument("--no-fp64", action="store_true", help="skip the FP64 reference (no force error column)")
    p.add_argument("--traceback", action="store_true")
    p.add_argument("--out", default="out/md_step.csv", help="result file (a figure goes beside it)")
    args = p.parse_args(argv)
    if args.interleave_steps and args.profile:
        p.error("--interleave-steps times steps only; profile in a run without it")
    if args.teardown_cupti:
        os.environ["TEARDOWN_CUPTI"] = "1"
    if args.plot_only:
        plot(args.plot_only, str(Path(args.plot_only).with_suffix(".png")))
        return 0
    rows = run(args)  # written as they finish
    print(f"wrote {args.out} ({len(rows)} rows)")
    if args.rounds > 1:
        print("medians over rounds (min-max of the round medians):")
        for a in aggregate_rounds(rows):
            sp = a["speedup_vs_fp32_compile"]
            attn = ATTENTION_SUFFIX.get(a.get("attention", ""), "")
            print(f"  {a['model']:10s} {a['n_atoms']:>6} {a['method'] + attn:17s} {a['mode']:8s} {a['median_ms']:9.2f} ms "
                  f"({a['round_min_ms']:.2f}-{a['round_max_ms']:.2f}, {a['rounds']} rounds)  "
                  f"speedup {sp if sp == '' else f'{sp:.2f}x'}")
    try:
        plot(args.out, str(Path(args.out).with_suffix(".png")))
    except ImportError as exc:  # matplotlib absent: the CSV is the result
        print(f"no plot: {exc}")
    failed = [r for r in rows if r.get("note") and not str(r["note"]).startswith("first call")]
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
