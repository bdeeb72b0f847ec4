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

Per configuration (engine, system, method): ``--warmup`` steps (the first compiles), then ``--steps`` timed steps
with the total energy logged every ``--log-every`` steps, then ``--breakdown-steps`` steps with the time inside
the neighbour-list call and inside the model call measured (CUDA synchronised around them). Long-format CSV
(``--out``, default ``$OUT/md_run.csv``): a result file of ``tcemu._results`` (impl: the engine; case: the model,
system, atoms, compile mode and, for energies, the step), one row per metric: ``s_per_step`` (wall clock over the timed steps),
``first_step_s``, ``speedup_vs_fp32`` (the same engine and system), ``drift_meV_per_atom_ps`` (linear fit of the
logged total energy), ``fluct_meV_per_atom``, ``graphs_compiled_timed`` (Dynamo graphs compiled during the timed
steps: 0 means no recompilation as the neighbour count changed), ``graphs_compiled_total``, the spread of the
timed steps (``step_median_s``, ``step_max_s``, ``slow_steps`` over twice the median and their
``slow_steps_excess_s``: one-off work inside the run, such as a Triton kernel compiled for a row count first
seen there, which ``graphs_compiled_timed`` does not count; ``triton_variants_timed`` counts those kernels),
``nl_ms``,
``model_ms`` and ``engine_ms`` per step (breakdown), ``coverage_fraction`` (with ``--coverage``, where tcemu has
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
import contextlib
import copy
import math
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

ENGINES = ("ase", "torchsim")
#: the issue's systems: the 17,280-atom water box (90 copies of the 192-atom box) and the 192-atom box
DEFAULT_SYSTEMS = "water_17280,water_192"  # the goal first, so a time budget skips the small runs
#: systems larger than this take ``--large-steps`` timed steps
LARGE_ATOMS = 5000


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def graphs_compiled() -> int:
    """Dynamo graphs compiled so far in this process."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


_TRITON_VARIANTS = [0]  # Triton (and Gluon) kernel variants first launched in this process, once counted
_TRITON_VARIANT_NAMES: list[str] = []  # their kernels' names, in launch order


def count_triton_variants() -> bool:
    """Count every Triton kernel variant compiled or loaded from Triton's cache on its first launch in this
    process (``triton.knobs.runtime.jit_post_compile_hook``, chained to a hook already set): a kernel
    specialised anew, e.g. for a row count's divisibility first seen, shows here. False where Triton lacks it."""
    try:
        from triton import knobs
    except ImportError:
        return False
    previous = knobs.runtime.jit_post_compile_hook
    if getattr(previous, "counts_triton_variants", False):  # installed by an earlier run of this process
        return True

    def hook(*args, **kwargs):
        _TRITON_VARIANTS[0] += 1
        _TRITON_VARIANT_NAMES.append(getattr(kwargs.get("fn"), "name", "?"))
        return previous(*args, **kwargs) if previous else None

    hook.counts_triton_variants = True
    knobs.runtime.jit_post_compile_hook = hook
    return True


def compile_counts() -> tuple[int, int]:
    return graphs_compiled(), _TRITON_VARIANTS[0]  # (Dynamo graphs, Triton kernel variants) so far


def split_method(method: str) -> tuple[str, bool]:
    """``"tf32x3+attn"`` -> ("tf32x3", True) (:meth:`tcemu.EmulationConfig.from_method_string`)."""
    from tcemu.emulation.configuration import EmulationConfig

    cfg = EmulationConfig.from_method_string(method)
    if cfg.attention == "step":
        raise ValueError(f"{method!r}: only '+attn' (PET's attention blocks) applies here")
    return cfg.method, cfg.attention == "blocks"


#: ``--compile-scope``: PET's methods compiled (``full``: tcemu.mlip.models.PET_COMPILE_SCOPE)
COMPILE_SCOPES = {"full": ("preprocess", "calculate_features", "predict"), "backend": ("calculate_features", "predict")}


def build_model(base: torch.nn.Module, method: str, compile_mode: str, scope: str = "full") -> torch.nn.Module:
    """A copy of the FP32 PET ``base`` in ``method``, compiled with dynamic shapes unless ``compile_mode`` is none."""
    import tcemu
    from tcemu.mlip.models import compile_pet_, is_pet_attention_block

    name, attention = split_method(method)
    pet = copy.deepcopy(base)
    if name != "fp32":
        tcemu.emulate_(pet, name, warn_unreachable=False)
    if attention:
        tcemu.emulate_functional_(pet, name, is_pet_attention_block, attention=True, matmuls=False)
    if compile_mode != "none":
        compile_pet_(pet, backend=compile_mode, scope=COMPILE_SCOPES[scope])
    return pet


@contextlib.contextmanager
def timed(obj, name: str, device: torch.device, into: list[float]):
    """Replace ``obj.name`` by a wrapper that records its wall time (CUDA synchronised) into ``into``."""
    inner = getattr(obj, name)

    def wrapper(*args, **kwargs):
        _sync(device)
        t0 = time.perf_counter()
        out = inner(*args, **kwargs)
        _sync(device)
        into.append(time.perf_counter() - t0)
        return out

    setattr(obj, name, wrapper)
    try:
        yield
    finally:
        setattr(obj, name, inner)


def drift_and_fluct(steps: list[int], e_total: list[float], n_atoms: int, dt_fs: float) -> tuple[float, float]:
    """(drift in meV/atom/ps from a linear fit, standard deviation in meV/atom) of the logged total energy."""
    if len(steps) < 2:
        return math.nan, math.nan
    t_ps = np.asarray(steps, dtype=np.float64) * dt_fs * 1e-3
    e = np.asarray(e_total, dtype=np.float64) / n_atoms * 1e3
    slope = np.polyfit(t_ps, e, 1)[0]
    return float(slope), float(np.std(e))


# ------------------------------------------------------------------------------------------------ engines


def run_ase(pet, atoms, args, device, rows: Callable[..., None]) -> None:
    """ASE VelocityVerlet with metatomic's calculator; records the metrics through ``rows``."""
    from ase import units
    from ase.md.velocitydistribution import Stationary
    from ase.md.verlet import VelocityVerlet
    from metatomic_ase import MetatomicCalculator

    from tcemu.mlip._common import maxwell_boltzmann_momenta

    calc = MetatomicCalculator(pet.export(), device=str(device), do_gradients_with_energy=False,
                               neighbor_skin=args.skin)
    atoms = atoms.copy()
    atoms.calc = calc
    maxwell_boltzmann_momenta(atoms, args.temperature, np.random.default_rng(args.seed))
    Stationary(atoms)
    dyn = VelocityVerlet(atoms, args.dt * units.fs)
    t0 = time.perf_counter()
    atoms.get_forces()
    dyn.run(max(args.warmup - 1, 0))
    rows("first_step_s", time.perf_counter() - t0, "s", note=f"{args.warmup} warm-up steps, the first compiles")
    log: list[tuple[int, float, float]] = []

    def record():
        log.append((dyn.nsteps, float(atoms.get_potential_energy()), float(atoms.get_kinetic_energy())))

    dyn.nsteps = 0
    dyn.attach(record, interval=args.log_every)
    marks: list[float] = []  # after each step (its forces have reached the host: the step is done)
    dyn.attach(lambda: marks.append(time.perf_counter()), interval=1)
    g0 = compile_counts()
    _sync(device)
    t0 = time.perf_counter()
    dyn.run(args.steps)
    _sync(device)
    wall = time.perf_counter() - t0
    finish(rows, wall, args, g0, log, len(atoms))
    step_spread(rows, np.diff(np.asarray([t0, *marks[-args.steps:]])))
    if args.breakdown_steps:
        nl, model, step_times = [], [], []
        with timed(calc._nl_calculators, "compute", device, nl), timed(calc, "calculate", device, model):
            for _ in range(args.breakdown_steps):
                t = time.perf_counter()
                dyn.run(1)
                step_times.append(time.perf_counter() - t)
        breakdown(rows, nl, model, step_times)
    coverage(rows, lambda: dyn.run(1), args)


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


def torchsim_model(pet, device: torch.device):
    """A TorchSim model of PET: metatomic-torchsim's (TorchSim 0.5+), else TorchSim 0.3's MetatomicModel (which
    loads a checkpoint file only: it is made from one, then given this PET)."""
    atomistic = pet.export()
    try:
        from metatomic_torchsim import MetatomicModel

        return MetatomicModel(atomistic, device=device, compute_stress=False)
    except ImportError:
        pass
    from torch_sim.models.metatomic import MetatomicModel

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pet.ckpt"
        torch.save(pet.get_checkpoint(), path)
        model = MetatomicModel(model=str(path), device=device, compute_stress=False)
    model._model = atomistic.to(device)
    model._requested_neighbor_lists = atomistic.requested_neighbor_lists()
    return model


def _torchsim_nl_owner(model):
    """(object, attribute) of the neighbour-list call of TorchSim's metatomic model, for the breakdown:
    metatomic-torchsim 0.1.7's calculator object, an older one's module function, or TorchSim 0.3's vesin call."""
    if hasattr(model, "_nl_calculators"):
        return model._nl_calculators, "compute"
    with contextlib.suppress(ImportError):
        import metatomic_torchsim._model as m

        if hasattr(m, "_compute_requested_neighbors"):
            return m, "_compute_requested_neighbors"
    import vesin.metatomic as v

    return v, "compute_requested_neighbors"


def run_torchsim(pet, atoms, args, device, rows: Callable[..., None]) -> None:
    """TorchSim's NVE (velocity Verlet) on PET; records the metrics through ``rows``."""
    import tcemu.torchsim

    model = torchsim_model(pet, device)
    t0 = time.perf_counter()
    state, step = tcemu.torchsim.nve(model, atoms.copy(), dt_fs=args.dt, temperature_K=args.temperature,
                                     seed=args.seed)
    for _ in range(max(args.warmup - 1, 0)):
        state = step(state)
    _sync(device)
    rows("first_step_s", time.perf_counter() - t0, "s", note=f"{args.warmup} warm-up steps, the first compiles")

    def energies(s) -> tuple[float, float]:
        kinetic = 0.5 * (s.momenta.double() ** 2 / s.masses.double().unsqueeze(-1)).sum()
        return float(s.energy.double().sum()), float(kinetic)

    log = [(0, *energies(state))]
    g0 = compile_counts()
    _sync(device)
    t0 = time.perf_counter()
    marks = []
    for i in range(1, args.steps + 1):
        state = step(state)
        if i % args.log_every == 0:
            log.append((i, *energies(state)))
        _sync(device)  # each step's end (a synchronisation per step, microseconds against its milliseconds)
        marks.append(time.perf_counter())
    wall = time.perf_counter() - t0
    finish(rows, wall, args, g0, log, len(atoms))
    step_spread(rows, np.diff(np.asarray([t0, *marks])))
    if args.breakdown_steps:
        nl, mod, step_times = [], [], []
        owner, name = _torchsim_nl_owner(model)
        with timed(owner, name, device, nl), timed(model, "forward", device, mod):
            for _ in range(args.breakdown_steps):
                t = time.perf_counter()
                state = step(state)
                _sync(device)
                step_times.append(time.perf_counter() - t)
        breakdown(rows, nl, mod, step_times)
    coverage(rows, lambda: step(state), args)


def finish(rows, wall: float, args, g0: tuple[int, int], log: list[tuple[int, float, float]], n_atoms: int) -> None:
    rows("s_per_step", wall / args.steps, "s", note=f"{args.steps} steps, wall clock")
    graphs, variants = compile_counts()
    rows("graphs_compiled_timed", graphs - g0[0], "graphs")
    rows("graphs_compiled_total", graphs, "graphs", note="this process, so far")
    if args.count_triton:
        names = collections.Counter(_TRITON_VARIANT_NAMES[g0[1]:variants])
        rows("triton_variants_timed", variants - g0[1], "kernels",
             note="Triton kernel variants first launched during the timed steps (compiled or from its cache)"
             + "".join(f"; {name} x{n}" for name, n in sorted(names.items())))
    drift, fluct = drift_and_fluct([s for s, _, _ in log], [p + k for _, p, k in log], n_atoms, args.dt)
    rows("drift_meV_per_atom_ps", drift, "meV/atom/ps", note=f"linear fit of {len(log)} logged total energies")
    rows("fluct_meV_per_atom", fluct, "meV/atom")
    for s, pot, kin in log:
        rows("e_total_eV", pot + kin, "eV", step=s)
        rows("e_pot_eV", pot, "eV", step=s)


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
        where = case(model=model, system=r["system"], n_atoms=r["n_atoms"], compile=r["compile"], step=r["step"])
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
        if e not in ENGINES:
            raise ValueError(f"unknown engine {e!r}; choose from {', '.join(ENGINES)}")
    args.count_triton = count_triton_variants()
    t_start = time.perf_counter()
    base = build_pet(args.shape, args.seed).to(device)
    models: dict[str, torch.nn.Module] = {}
    for system in args.systems.split(","):
        atoms = systems.build(system)
        for engine in engines:
            for method in methods:
                key = dict(engine=engine, system=system, n_atoms=len(atoms), method=method,
                           compile=f"{args.compile}:{args.compile_scope}" if args.compile != "none" else "none")

                def add(metric, value, unit, step="", note="", key=key):
                    rows.append({**key, "metric": metric, "value": value, "unit": unit, "step": step, "note": note})

                if args.budget_s and time.perf_counter() - t_start > args.budget_s:
                    add("s_per_step", "", "s", note="skipped: time budget")
                    continue
                print(f"== {engine} {system} ({len(atoms)} atoms) {method} [{time.perf_counter() - t_start:.0f} s]",
                      flush=True)
                try:
                    if method not in models:
                        models[method] = build_model(base, method, args.compile, args.compile_scope)
                    runner = run_ase if engine == "ase" else run_torchsim
                    steps = args.large_steps if args.large_steps and len(atoms) > LARGE_ATOMS else args.steps
                    runner(models[method], atoms, argparse.Namespace(**{**vars(args), "steps": steps}), device, add)
                    got = {r["metric"]: r["value"] for r in rows if r.get("engine") == engine and
                           r.get("system") == system and r.get("method") == method and not r["step"]}
                    print(f"   {got.get('s_per_step', math.nan) * 1e3:9.2f} ms/step  drift "
                          f"{got.get('drift_meV_per_atom_ps', math.nan):+.3f} meV/atom/ps  graphs during run "
                          f"{got.get('graphs_compiled_timed')}  nl {got.get('nl_ms', math.nan):.1f} ms  engine "
                          f"{got.get('engine_ms', math.nan):.1f} ms", flush=True)
                except Exception as exc:  # noqa: BLE001 - one failing configuration must not stop the run
                    add("s_per_step", "", "s", note=f"{type(exc).__name__}: {exc}"[:300])
                    print(f"   FAILED {type(exc).__name__}: {exc}"[:400], flush=True)
                    if args.traceback:
                        traceback.print_exc()
                _free(device)
                write_rows(rows + add_speedups(rows), args.out, model_name, prov)
    rows += add_speedups(rows)
    write_rows(rows, args.out, model_name, prov)
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--shape", default="s", help="PET shape (tcemu.mlip.models.PET_SHAPES; default s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--systems", default=DEFAULT_SYSTEMS, help=f"tcemu.mlip.systems names (default {DEFAULT_SYSTEMS})")
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--methods", default="fp32,tf32x3+attn", help="fp32 first (the speedups' reference)")
    p.add_argument("--compile", default="inductor", choices=("inductor", "aot_eager", "eager", "none"),
                   help="torch.compile backend of PET (dynamic shapes), or none for eager PyTorch")
    p.add_argument("--compile-scope", default="full", choices=tuple(COMPILE_SCOPES))
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--large-steps", type=int, default=0,
                   help=f"timed steps for systems of more than {LARGE_ATOMS} atoms (default: --steps)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--breakdown-steps", type=int, default=5)
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
