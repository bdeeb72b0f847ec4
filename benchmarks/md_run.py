# /// script
# requires-python = ">=3.11"
# dependencies = ["tcemu[mlip,torchsim,triton]"]
# ///
"""The speed of a whole MD run (issue 24): ASE VelocityVerlet and TorchSim's NVE with PET, FP32 compiled against
TF32x3 with PET's attention emulated, neighbour lists rebuilt as each engine does.

``benchmarks/md_step.py`` times one energy+forces step with the neighbour pairs held fixed; a user's MD run also
pays the neighbour lists, the engine's own work, and (with a static ``torch.compile``) a recompilation for every
new neighbour count. Here each configuration runs a real MD loop on a PET model compiled once with dynamic shapes
(``tcemu.mlip.models.compile_pet_``), shared by both engines and both system sizes:

* ASE: ``metatomic_ase.MetatomicCalculator`` (its neighbour lists: vesin, or nvalchemiops on CUDA where it is
  installed; Verlet skin ``--skin``) under ``ase.md.verlet.VelocityVerlet``;
* TorchSim: ``metatomic_torchsim.MetatomicModel`` (TorchSim 0.5+; TorchSim 0.3's own ``MetatomicModel`` where
  that is what is installed) under TorchSim's NVE (``tcemu.torchsim.nve``).

``--emulation-scope`` (named in the case): ``layers`` (default) emulates the ``nn.Linear`` layers, as
``tcemu.mlip.models.compile_pet_`` leaves a compiled PET and as ``benchmarks/md_step.py`` does; ``model`` also
every functional product of PET, so that PET's eager ``forward``, around the compiled methods, runs inside
``emulation_mode``.

Per configuration (engine, system, method): ``--warmup`` steps (the first compiles), then ``--steps`` timed steps
with the total energy logged every ``--log-every`` steps, then ``--breakdown-steps`` steps with the time inside
the neighbour-list call and inside the model call measured (CUDA synchronised around them). The methods of one
engine and system run side by side, each its own MD trajectory, and take turns of ``--interleave`` timed steps
(10 by default): the host's speed drifts by tens of per cent between stretches of one process
(``docs/md_step.md``), which decides a comparison of host-bound steps run one after the other. Long-format CSV
(``--out``, default ``$OUT/md_run.csv``): a result file of ``tcemu._results`` (impl: the engine; case: the model,
system, atoms, compile mode and, for energies, the step), one row per metric: ``s_per_step`` (wall clock over the timed steps),
``first_step_s``, ``speedup_vs_fp32`` (the same engine and system), ``drift_meV_per_atom_ps`` (linear fit of the
logged total energy), ``fluct_meV_per_atom``, ``graphs_compiled_timed`` (Dynamo graphs compiled during the timed
steps: 0 means no recompilation as the neighbour count changed), ``graphs_compiled_total``, the spread of the
timed steps (``step_median_s``, ``step_max_s``, ``slow_steps`` over twice the median and their
``slow_steps_excess_s``: one-off work inside the run, such as a Triton kernel compiled for a row count first
seen there, which ``graphs_compiled_timed`` does not count; ``triton_variants_timed`` counts those kernels),
``nl_ms``,
``model_ms`` and ``engine_ms`` per step (breakdown), with ``--profile-steps`` the per-step time of metatomic's
``record_function`` ranges and of the top operators (``profile_scope_cpu_ms``, ``profile_self_cpu_ms``,
``profile_self_gpu_ms``; the case names the range or operator), ``coverage_fraction`` (with ``--coverage``, where tcemu has
its coverage meter ``tcemu.coverage``), and ``e_total_eV`` / ``e_pot_eV`` at each logged ``step``.
Every row carries the GPU, driver, torch, triton, git commit and date. A configuration that fails records its
error as a ``s_per_step_note`` row (unit ``text``); ``--budget-s`` skips what would start after that many seconds (noted), in the order of
``--systems``, engines and methods, so a time-limited run keeps its priorities.

    python benchmarks/md_run.py --large-steps 100 --budget-s 400 --out $OUT/md_run_h200.csv   # H200 (see docs)
    python benchmarks/md_run.py --device cpu --shape tiny --systems water_192 --steps 10 --log-every 5 \\
        --compile eager --out /tmp/md_run.csv                                  # CPU smoke test
"""

from __future__ import annotations

import argparse
import collections
import copy
import math
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _md_engines import RUNS, MDRun, count_triton_variants, graphs_compiled, sync, take_turns  # noqa: E402

ENGINES = tuple(RUNS)
#: the issue's systems: the 17,280-atom water box (90 copies of the 192-atom box) and the 192-atom box
DEFAULT_SYSTEMS = "water_17280,water_192"  # the goal first, so a time budget skips the small runs
#: systems larger than this take ``--large-steps`` timed steps
LARGE_ATOMS = 5000


def split_method(method: str) -> tuple[str, bool]:
    """``"tf32x3+attn"`` -> ("tf32x3", True) (:meth:`tcemu.EmulationConfig.from_method_string`)."""
    from tcemu.emulation.configuration import EmulationConfig

    cfg = EmulationConfig.from_method_string(method)
    if cfg.attention == "step":
        raise ValueError(f"{method!r}: only '+attn' (PET's attention blocks) applies here")
    return cfg.method, cfg.attention == "blocks"


#: ``--compile-scope``: PET's methods compiled (``full``: tcemu.mlip.models.PET_COMPILE_SCOPE)
COMPILE_SCOPES = {"full": ("preprocess", "calculate_features", "predict"), "backend": ("calculate_features", "predict")}


#: ``--emulation-scope``: what ``tcemu.emulate_`` covers besides the attention blocks of ``+attn``. ``layers``:
#: the ``nn.Linear`` layers (``tcemu.mlip.models.compile_pet_``'s choice for a compiled PET, and
#: ``benchmarks/md_step.py``'s); ``model``: the layers and every functional product of the model, so that PET's
#: eager ``forward``, around the compiled methods, runs inside ``emulation_mode`` (``compile_pet_(...,
#: model_scope=True)``; an eager PET of ``tcemu.mlip.models.pet`` runs so)
EMULATION_SCOPES = ("layers", "model")


def build_model(base: torch.nn.Module, method: str, compile_mode: str, scope: str = "full",
                emulation_scope: str = "layers") -> torch.nn.Module:
    """A copy of the FP32 PET ``base`` in ``method``, compiled with dynamic shapes unless ``compile_mode`` is none."""
    import tcemu
    from tcemu.mlip.models import compile_pet_, is_pet_attention_block

    if emulation_scope not in EMULATION_SCOPES:
        raise ValueError(f"emulation scope {emulation_scope!r}: choose from {', '.join(EMULATION_SCOPES)}")
    name, attention = split_method(method)
    pet = copy.deepcopy(base)
    if name != "fp32":
        tcemu.emulate_(pet, name, warn_unreachable=False, functional=emulation_scope == "model")
    if attention:
        tcemu.emulate_functional_(pet, name, is_pet_attention_block, attention=True, matmuls=False)
    if compile_mode != "none":
        compile_pet_(pet, backend=compile_mode, scope=COMPILE_SCOPES[scope], model_scope=emulation_scope == "model")
    return pet


def drift_and_fluct(steps: list[int], e_total: list[float], n_atoms: int, dt_fs: float) -> tuple[float, float]:
    """(drift in meV/atom/ps from a linear fit, standard deviation in meV/atom) of the logged total energy."""
    if len(steps) < 2:
        return math.nan, math.nan
    t_ps = np.asarray(steps, dtype=np.float64) * dt_fs * 1e-3
    e = np.asarray(e_total, dtype=np.float64) / n_atoms * 1e3
    slope = np.polyfit(t_ps, e, 1)[0]
    return float(slope), float(np.std(e))


# ------------------------------------------------------------------------------------------------ engines


def coverage(rows, one_step: Callable[[], None], args) -> None:
    """With ``--coverage`` and a tcemu that has the coverage meter (``tcemu.coverage``): the share of the
    step's float32 products that ran emulated, measured over one more step (off by default: the meter may
    make Dynamo compile new graphs)."""
    import tcemu

    meter = getattr(tcemu, "coverage", None)
    if not args.coverage:
        return
    if meter is None:
        rows("coverage_fraction", "", "fraction", note="this tcemu has no tcemu.coverage")
        return
    with meter() as cov:
        one_step()
    rows("coverage_fraction", float(cov.fraction), "fraction", note="one step inside tcemu.coverage()")


def finish(rows, run: MDRun, args, n_atoms: int) -> None:
    """The metrics of a run's timed steps."""
    step_s = np.asarray(run.step_s)
    rows("s_per_step", float(step_s.sum()) / step_s.size, "s",
         note=f"{step_s.size} steps, wall clock" + (f", in turns of {args.interleave}" if args.interleave else ""))
    rows("graphs_compiled_timed", run.graphs_timed, "graphs")
    rows("graphs_compiled_total", graphs_compiled(), "graphs", note="this process, so far")
    if args.count_triton:
        names = collections.Counter(run.variants_timed)
        rows("triton_variants_timed", len(run.variants_timed), "kernels",
             note="Triton kernel variants first launched during the timed steps (compiled or from its cache)"
             + "".join(f"; {name} x{n}" for name, n in sorted(names.items())))
        if run.signatures_timed:  # which arguments' specialisation was new: a text row
            rows("triton_variants_timed", "", "kernels", note=" | ".join(run.signatures_timed)[:20000])
    log = run.log
    drift, fluct = drift_and_fluct([s for s, _, _ in log], [p + k for _, p, k in log], n_atoms, args.dt)
    rows("drift_meV_per_atom_ps", drift, "meV/atom/ps", note=f"linear fit of {len(log)} logged total energies")
    rows("fluct_meV_per_atom", fluct, "meV/atom")
    for s, pot, kin in log:
        rows("e_total_eV", pot + kin, "eV", step=s)
        rows("e_pot_eV", pot, "eV", step=s)
    step_spread(rows, step_s)
    if args.breakdown_steps:
        breakdown(rows, *run.breakdown(args.breakdown_steps))
    if args.profile_steps:
        profile(rows, run, args.profile_steps, args.profile_top)
    coverage(rows, run.one_step, args)


def step_spread(rows, step_s: np.ndarray) -> None:
    """How the timed steps' wall clock is spread: the median step, the slowest, and the steps over twice the
    median with their time above it (one-off work inside the run, such as a kernel compiled for a shape first seen
    there, shows here rather than in ``graphs_compiled_timed``, which counts Dynamo graphs only)."""
    med = float(np.median(step_s))
    slow = step_s[step_s > 2 * med]
    rows("step_median_s", med, "s", note=f"{step_s.size} timed steps")
    rows("step_max_s", float(step_s.max()), "s")
    rows("slow_steps", int(slow.size), "steps", note="timed steps over twice the median")
    rows("slow_steps_excess_s", float((slow - med).sum()), "s", note="their time above the median, summed")


def breakdown(rows, nl: list[float], model: list[float], steps: list[float]) -> None:
    """Per-step medians: the neighbour lists, the model call (which includes the lists), the engine's own work."""
    n = len(steps)
    nl_ms = statistics.median(nl) * 1e3 * (len(nl) / n) if nl else 0.0
    model_ms = statistics.median(model) * 1e3 if model else math.nan
    step_ms = statistics.median(steps) * 1e3
    note = f"{n} steps with CUDA synchronised around the calls"
    rows("nl_ms", nl_ms, "ms", note=note)
    rows("model_ms", model_ms - nl_ms, "ms", note="the model call without its neighbour lists; " + note)
    rows("engine_ms", step_ms - model_ms, "ms", note="the step outside the model call; " + note)


def profile(rows, run: MDRun, steps: int, top: int) -> None:
    """Where a step's time goes, from ``torch.profiler`` over ``steps`` more steps, per step:
    ``profile_scope_cpu_ms`` for every ``record_function`` range (metatomic's calculator and model name theirs:
    neighbour lists, backward, output conversion; host time with what runs inside), and for the ``top`` operators
    by self time ``profile_self_cpu_ms`` (host) and ``profile_self_gpu_ms`` (kernels)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if run.device.type == "cuda" else [])
    with torch_profile(activities=activities) as prof:
        for _ in range(steps):
            run.one_step()
        sync(run.device)
    events = prof.key_averages()
    note = f"torch.profiler over {steps} steps, per step"

    def name(event) -> str:
        return event.key.replace(";", ",")[:120]

    for event in events:
        if "::" in event.key and not event.key.startswith(("aten::", "autograd::", "cuda", "triton", "Torch-Compiled")):
            rows("profile_scope_cpu_ms", event.cpu_time_total / 1e3 / steps, "ms", op=name(event),
                 note=f"record_function range, {event.count} calls; " + note)
    by_cpu = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    for event in by_cpu:
        rows("profile_self_cpu_ms", event.self_cpu_time_total / 1e3 / steps, "ms", op=name(event),
             note=f"{event.count} calls; " + note)
    if run.device.type == "cuda":
        by_gpu = sorted(events, key=lambda e: e.self_device_time_total, reverse=True)[:top]
        for event in by_gpu:
            if event.self_device_time_total > 0:
                rows("profile_self_gpu_ms", event.self_device_time_total / 1e3 / steps, "ms", op=name(event),
                     note=f"{event.count} calls; " + note)


# ------------------------------------------------------------------------------------------------ driver


def _free(device: torch.device) -> None:
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def to_results(rows: list[dict], model: str) -> list:
    """tcemu._results rows: impl the engine, the case its model, system, size, compile mode and (energies) step;
    a configuration that failed or was skipped gets a ``note`` row (unit ``text``) instead of its value."""
    from tcemu._results import Result, case

    out = []
    for r in rows:
        where = case(model=model, system=r["system"], n_atoms=r["n_atoms"], compile=r["compile"],
                     scope=r.get("scope", ""), step=r["step"],
                     op=r.get("op", ""))
        if r["value"] != "":
            out.append(Result("md_run", r["engine"], r["method"], where, r["metric"], repr(float(r["value"])),
                              r["unit"]))
        elif r["note"]:
            out.append(Result("md_run", r["engine"], r["method"], where, f"{r['metric']}_note", r["note"], "text"))
    return out


def write_rows(rows: list[dict], out: str | None, model: str, provenance) -> None:
    if out:
        from tcemu._results import write_results

        write_results(out, to_results(rows, model), provenance)


def add_speedups(rows: list[dict]) -> list[dict]:
    """``speedup_vs_fp32`` rows: the FP32 configuration's s_per_step over each one's, per engine and system."""
    per = {(r["engine"], r["system"], r["method"]): r for r in rows if r["metric"] == "s_per_step"}
    out = []
    for (engine, system, method), r in per.items():
        ref = per.get((engine, system, "fp32"))
        if ref is None or not r["value"]:
            continue
        out.append({**r, "metric": "speedup_vs_fp32", "value": float(ref["value"]) / float(r["value"]), "unit": "x",
                    "note": "FP32 compiled s_per_step / this s_per_step"})
    return out


def run(args: argparse.Namespace) -> list[dict]:
    from tcemu.mlip import systems
    from tcemu.mlip.models import build_pet

    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.fp32_precision = "ieee"  # FP32 means IEEE FP32, not TF32
    from tcemu._results import Provenance

    prov = Provenance.current(str(device))
    model_name = f"pet-{args.shape}"
    rows: list[dict] = []
    methods = args.methods.split(",")
    for m in methods:
        split_method(m)
    engines = args.engines.split(",")
    for e in engines:
        if e not in RUNS:
            raise ValueError(f"unknown engine {e!r}; choose from {', '.join(RUNS)}")
    args.count_triton = count_triton_variants()
    t_start = time.perf_counter()
    base = build_pet(args.shape, args.seed).to(device)
    models: dict[str, torch.nn.Module] = {}

    def elapsed() -> str:
        return f"[{time.perf_counter() - t_start:.0f} s]"

    for system in args.systems.split(","):
        atoms = systems.build(system)
        steps = args.large_steps if args.large_steps and len(atoms) > LARGE_ATOMS else args.steps
        for engine in engines:
            adders, runs = {}, {}
            for method in methods:
                key = dict(engine=engine, system=system, n_atoms=len(atoms), method=method,
                           compile=f"{args.compile}:{args.compile_scope}" if args.compile != "none" else "none",
                           scope=args.emulation_scope)

                def add(metric, value, unit, step="", note="", op="", key=key):
                    rows.append({**key, "metric": metric, "value": value, "unit": unit, "step": step, "note": note,
                                 "op": op})

                adders[method] = add
                if args.budget_s and time.perf_counter() - t_start > args.budget_s:
                    add("s_per_step", "", "s", note="skipped: time budget")
                    continue
                print(f"== {engine} {system} ({len(atoms)} atoms) {method}: warm-up {elapsed()}", flush=True)
                try:
                    if method not in models:
                        models[method] = build_model(base, method, args.compile, args.compile_scope,
                                                     args.emulation_scope)
                    runs[method] = RUNS[engine](models[method], atoms, args, device)
                    add("first_step_s", runs[method].warm_up(args.warmup), "s",
                        note=f"{args.warmup} warm-up steps, the first compiles")
                except Exception as exc:  # noqa: BLE001 - one failing configuration must not stop the run
                    failed(add, exc, args)
                    runs.pop(method, None)
            print(f"== {engine} {system}: {steps} timed steps of {', '.join(runs)}"
                  + (f" in turns of {args.interleave}" if args.interleave else "") + f" {elapsed()}", flush=True)
            take_turns(runs, steps, args.interleave, lambda m, exc: failed(adders[m], exc, args))
            for method in [m for m in runs if len(runs[m].step_s) == steps]:
                try:
                    finish(adders[method], runs[method], args, len(atoms))
                except Exception as exc:  # noqa: BLE001
                    failed(adders[method], exc, args)
                got = {r["metric"]: r["value"] for r in rows if r.get("engine") == engine and
                       r.get("system") == system and r.get("method") == method and not r["step"] and not r["op"]}
                print(f"   {method}: {got.get('s_per_step', math.nan) * 1e3:9.2f} ms/step  drift "
                      f"{got.get('drift_meV_per_atom_ps', math.nan):+.3f} meV/atom/ps  graphs during run "
                      f"{got.get('graphs_compiled_timed')}  nl {got.get('nl_ms', math.nan):.1f} ms  engine "
                      f"{got.get('engine_ms', math.nan):.1f} ms", flush=True)
            runs.clear()
            _free(device)
            write_rows(rows + add_speedups(rows), args.out, model_name, prov)
    rows += add_speedups(rows)
    write_rows(rows, args.out, model_name, prov)
    return rows


def failed(add: Callable[..., None], exc: Exception, args) -> None:
    add("s_per_step", "", "s", note=f"{type(exc).__name__}: {exc}"[:300])
    print(f"   FAILED {type(exc).__name__}: {exc}"[:400], flush=True)
    if args.traceback:
        traceback.print_exc()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--shape", default="s", help="PET shape (tcemu.mlip.models.PET_SHAPES; default s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--systems", default=DEFAULT_SYSTEMS,
                   help=f"tcemu.mlip.systems names (default {DEFAULT_SYSTEMS}); any supercell of the 192-atom box "
                        "as water_<atoms> (water_1536, water_5184) or water_<a>x<b>x<c>")
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--methods", default="fp32,tf32x3+attn", help="fp32 first (the speedups' reference)")
    p.add_argument("--compile", default="inductor", choices=("inductor", "aot_eager", "eager", "none"),
                   help="torch.compile backend of PET (dynamic shapes), or none for eager PyTorch")
    p.add_argument("--compile-scope", default="full", choices=tuple(COMPILE_SCOPES))
    p.add_argument("--emulation-scope", default="layers", choices=EMULATION_SCOPES,
                   help="model: layers and functional products (the library's PET calculator); layers: nn.Linear only")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--large-steps", type=int, default=0,
                   help=f"timed steps for systems of more than {LARGE_ATOMS} atoms (default: --steps)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--interleave", type=int, default=10, metavar="K",
                   help="the methods' runs take turns of K timed steps (the same host speed for each); 0: one run "
                        "after the other")
    p.add_argument("--breakdown-steps", type=int, default=5)
    p.add_argument("--profile-steps", type=int, default=0, metavar="K",
                   help="K more steps under torch.profiler: the time of metatomic's ranges and the top operators")
    p.add_argument("--profile-top", type=int, default=12, help="operators kept per profile (by self time)")
    p.add_argument("--dt", type=float, default=0.5, help="time step in fs")
    p.add_argument("--temperature", type=float, default=300.0, help="initial temperature in K")
    p.add_argument("--skin", type=float, default=2.0, help="metatomic calculator's Verlet skin in A (ASE)")
    p.add_argument("--coverage", action="store_true", help="record tcemu.coverage's fraction (where it exists)")
    p.add_argument("--budget-s", type=float, default=0.0, help="skip configurations that would start later")
    p.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "md_run.csv"))
    p.add_argument("--traceback", action="store_true")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rows = run(args)
    failed = [r for r in rows if r["metric"] == "s_per_step" and r["value"] == "" and "skipped" not in r["note"]]
    print(f"wrote {args.out}: {len(rows)} rows, {len(failed)} failed configurations")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    sys.exit(main())
