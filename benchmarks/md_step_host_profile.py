# /// script
# requires-python = ">=3.11"
# dependencies = ["tcemu[mlip,triton]"]
# ///
"""Where the host time of a compiled PET step goes: graph breaks, distinct graphs and a cProfile table.

At 192 atoms a compiled PET energy+forces step is host-bound (about 8 ms of GPU work in a 25-35 ms step on
the H200), so every graph break and every Python layer around a kernel shows in the step time. This script
compiles PET's backend as ``benchmarks/md_step.py`` does, times the step, prints Dynamo's graph-break and
graph counters, then profiles a few steps with cProfile (sorted by own time and by cumulative time).

Output: the cProfile tables on stdout, and a result file (``tcemu._results``), benchmark
``md_step_host_profile``, one case per method: the step time and Dynamo's counts of graphs, graph breaks and
recompiles (``UNITS``). Stored runs (console logs): ``benchmarks/results/h200/md_step/*host_profile.log``.

    TORCH_LOGS=graph_breaks,recompiles python benchmarks/md_step_host_profile.py --methods tf32x3,fp32
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import io
import pstats
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the private helpers beside this script
import _pet_step as pet_step  # noqa: E402

from tcemu._results import Provenance, from_wide, write_results  # noqa: E402

CASE_FIELDS = ("model", "system", "n_atoms", "compile_scope", "precision")
UNITS = {"median_ms": "ms", "p20_ms": "ms", "p80_ms": "ms", "unique_graphs": "count", "graph_breaks": "count",
         "recompiles": "count"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--methods", default="tf32x3,fp32")
    p.add_argument("--shape", default="s")
    p.add_argument("--system", default="water_192")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--profile-steps", type=int, default=5)
    p.add_argument("--precision", default="", help="set torch.backends.cuda.matmul.fp32_precision first")
    p.add_argument("--device", default="cuda")
    p.add_argument("--compile-scope", choices=sorted(pet_step.COMPILE_SCOPES), default="full")
    p.add_argument("--out", default="out/md_step_host_profile.csv", help="result file")
    args = p.parse_args(argv)

    import tcemu
    from tcemu.mlip import systems
    from tcemu.mlip.models import build_pet
    from torch._dynamo.utils import counters

    dev = torch.device(args.device)
    prov = Provenance.current(args.device)
    rows = []
    if args.precision:
        torch.backends.cuda.matmul.fp32_precision = args.precision
    atoms = systems.build(args.system)
    base = build_pet(args.shape).to(dev)
    for method in args.methods.split(","):
        torch._dynamo.reset()
        counters.clear()
        pet = copy.deepcopy(base)
        if method not in ("fp32", "tf32"):
            tcemu.emulate_(pet, method, warn_unreachable=False)
        pet_step.compile_backend(pet, scope=args.compile_scope)
        model = pet.export()
        inp = pet_step.prepare_inputs(atoms, model, dev, torch.float32)

        def step():
            pet_step.energy_and_forces(model, inp, torch.float32)

        med, p20, p80 = pet_step.time_steps(step, dev, warmup=4, repeats=args.steps)
        print(f"### {method}: median {med:.1f} ms (p20 {p20:.1f}, p80 {p80:.1f})", flush=True)
        print({k: dict(v) for k, v in counters.items() if k in ("stats", "graph_break", "recompiles")}, flush=True)
        rows.append(dict(impl=pet_step.impl_of(method), method=method, model=f"pet-{args.shape}",
                         system=args.system, n_atoms=len(atoms), compile_scope=args.compile_scope, precision=args.precision,
                         median_ms=med, p20_ms=p20, p80_ms=p80,
                         unique_graphs=counters["stats"].get("unique_graphs", 0),
                         graph_breaks=sum(counters["graph_break"].values()),
                         recompiles=sum(counters["recompiles"].values())))
        write_results(args.out, from_wide("md_step_host_profile", rows, CASE_FIELDS, UNITS), prov)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.profile_steps):
            step()
        pet_step.sync(dev)
        prof.disable()
        for key, n in (("tottime", 25), ("cumulative", 40)):
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats(key).print_stats(n)
            print(s.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
