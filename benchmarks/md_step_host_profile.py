"""Where the host time of a compiled PET step goes: graph breaks, distinct graphs and a cProfile table.

At 192 atoms a compiled PET energy+forces step is host-bound (about 8 ms of GPU work in a 25-35 ms step on
the H200), so every graph break and every Python layer around a kernel shows in the step time. This script
compiles PET's backend as ``benchmarks/md_step.py`` does, times the step, prints Dynamo's graph-break and
graph counters, then profiles a few steps with cProfile (sorted by own time and by cumulative time).

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

sys.path.insert(0, str(Path(__file__).parent))
import md_step  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--methods", default="tf32x3,fp32")
    p.add_argument("--shape", default="s")
    p.add_argument("--system", default="water_192")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--profile-steps", type=int, default=5)
    p.add_argument("--precision", default="", help="set torch.backends.cuda.matmul.fp32_precision first")
    p.add_argument("--device", default="cuda")
    p.add_argument("--compile-scope", choices=sorted(md_step.COMPILE_SCOPES), default="full")
    args = p.parse_args(argv)

    import tcemu
    from tcemu.mlip import systems
    from tcemu.mlip.models import build_pet
    from torch._dynamo.utils import counters

    dev = torch.device(args.device)
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
        md_step.compile_backend(pet, scope=args.compile_scope)
        model = pet.export()
        inp = md_step.prepare_inputs(atoms, model, dev, torch.float32)

        def step():
            md_step.energy_and_forces(model, inp, torch.float32)

        med, p20, p80 = md_step.time_steps(step, dev, warmup=4, repeats=args.steps)
        print(f"### {method}: median {med:.1f} ms (p20 {p20:.1f}, p80 {p80:.1f})", flush=True)
        print({k: dict(v) for k, v in counters.items() if k in ("stats", "graph_break", "recompiles")}, flush=True)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.profile_steps):
            step()
        md_step._sync(dev)
        prof.disable()
        for key, n in (("tottime", 25), ("cumulative", 40)):
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats(key).print_stats(n)
            print(s.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
