# /// script
# requires-python = ">=3.11"
# dependencies = ["tcemu[mlip,torchsim,triton]"]
# ///
"""Many small systems at once (issue 42): TorchSim's batched NVE and FIRE with PET, FP32 against emulated FP32.

A batch of ``--n-systems`` copies of one system (default 64 water boxes of 192 atoms, each rattled by its own seed
so that no two are alike) is one TorchSim state; each method runs it on its own copy of one random-weight PET
(``benchmarks/md_run.py``'s ``build_model``: the ``nn.Linear`` layers emulated, ``+attn`` PET's attention too,
compiled once with dynamic shapes unless ``--compile none``), through metatomic-torchsim's ``MetatomicModel`` and
``tcemu.torchsim.nve`` / ``tcemu.torchsim.fire``. Per mode (``nve``, ``fire``): every method is warmed up
(``--warmup`` steps, the first compiles), then the methods take turns of ``--interleave`` steps (the host's
speed drifts between stretches of one process, docs/md_step.md) until each has run ``--steps`` timed steps, each
step synchronised. ``s_per_step`` is the median over turns of a turn's mean step time (p20 and p80 beside it),
``speedup_vs_fp32`` that of FP32 in the same mode over the method's; ``e_pot_diff_meV_per_atom`` compares the
first step's potential energies with FP32's (same start), ``peak_mem_gb`` is the process's peak so far.

Output: a result file of ``tcemu._results`` (benchmark ``md_batched``, impl ``torchsim``, case: model, system,
systems, atoms, mode, compile), written after every mode.

    python benchmarks/md_batched.py --out $OUT/md_batched.csv                            # GPU: 64 x 192 atoms
    python benchmarks/md_batched.py --device cpu --shape tiny --n-systems 2 --steps 2 --warmup 1 --interleave 1 \\
        --compile none --out /tmp/md_batched.csv                                        # CPU smoke test
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the private helpers beside this script
from _md_engines import sync, torchsim_model  # noqa: E402
from md_run import build_model, split_method  # noqa: E402

from tcemu._results import Provenance, from_wide, write_results  # noqa: E402

CASE_FIELDS = ("model", "system", "n_systems", "n_atoms", "mode", "compile")
UNITS = {"s_per_step": "s", "p20_s": "s", "p80_s": "s", "speedup_vs_fp32": "x", "first_steps_s": "s",
         "e_pot_diff_meV_per_atom": "meV/atom", "peak_mem_gb": "GB", "steps": "count", "note": "text"}
MODES = ("nve", "fire")


def batch(system: str, n: int, rattle_A: float) -> list:
    """``n`` copies of ``system``, copy i rattled with seed i (copy 0 too: every copy is its own structure). A
    cluster in its vacuum box is made periodic (TorchSim's metatomic model takes no mixed cell): the vacuum keeps
    its images beyond the model's cutoff."""
    from tcemu.mlip import systems

    base = systems.build(system)
    if not base.pbc.any() and base.cell.rank == 3:
        base.pbc = True
    out = []
    for i in range(n):
        a = base.copy()
        a.rattle(stdev=rattle_A, seed=i)
        out.append(a)
    return out


class Run:
    """One method's TorchSim state and step in one mode, with its step times by turn."""

    def __init__(self, model, atoms: list, mode: str, args: argparse.Namespace):
        import tcemu.torchsim

        self.device = torch.device(args.device)
        if mode == "nve":
            self.state, self.step = tcemu.torchsim.nve(model, atoms, dt_fs=args.dt, temperature_K=args.temperature,
                                                       seed=args.seed)
        else:
            self.state, self.step = tcemu.torchsim.fire(model, atoms)
        self.e0 = self.state.energy.detach().double().sum().item()
        self.turns: list[float] = []

    def advance(self, n: int) -> float:
        """``n`` steps, each synchronised; their mean time."""
        t0 = time.perf_counter()
        for _ in range(n):
            self.state = self.step(self.state)
            sync(self.device)
        return (time.perf_counter() - t0) / n


def run(args: argparse.Namespace) -> list[dict]:
    from tcemu.mlip.models import build_pet

    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.fp32_precision = "ieee"  # FP32 means IEEE FP32, not TF32
    prov = Provenance.current(str(device))
    methods = args.methods.split(",")
    if split_method(methods[0])[0] != "fp32":
        raise ValueError("--methods must start with fp32 (the speedups' reference)")
    atoms = batch(args.system, args.n_systems, args.rattle)
    n_atoms = sum(len(a) for a in atoms)
    base = build_pet(args.shape, args.seed).to(device)
    models = {m: torchsim_model(build_model(base, m, args.compile, "full"), device) for m in methods}
    rows: list[dict] = []
    t_start = time.perf_counter()
    for mode in args.modes.split(","):
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
        case = dict(model=f"pet-{args.shape}", system=args.system, n_systems=args.n_systems, n_atoms=n_atoms,
                    mode=mode, compile=args.compile)
        runs: dict[str, Run] = {}
        out: dict[str, dict] = {}
        for m in methods:
            out[m] = dict(impl="torchsim", method=m, **case, note="")
            if args.budget_s and time.perf_counter() - t_start > args.budget_s:
                out[m]["note"] = "skipped: time budget"
                continue
            try:
                t0 = time.perf_counter()
                r = Run(models[m], [a.copy() for a in atoms], mode, args)
                r.advance(args.warmup)
                out[m]["first_steps_s"] = time.perf_counter() - t0
                runs[m] = r
                print(f"== {mode} {m}: {args.warmup} warm-up steps {out[m]['first_steps_s']:.1f} s", flush=True)
            except Exception as exc:  # noqa: BLE001 - one failing configuration must not stop the run
                out[m]["note"] = f"{type(exc).__name__}: {exc}"[:300]
                print(f"   FAILED {out[m]['note']}", flush=True)
                if args.traceback:
                    traceback.print_exc()
        done = 0
        while done < args.steps and runs:
            n = min(args.interleave, args.steps - done)
            for m in list(runs):  # the same turn for every method, in a rotated order
                try:
                    runs[m].turns.append(runs[m].advance(n))
                except Exception as exc:  # noqa: BLE001
                    out[m]["note"] = f"{type(exc).__name__}: {exc}"[:300]
                    runs.pop(m)
            runs = dict(list(runs.items())[1:] + list(runs.items())[:1])
            done += n
        ref = runs.get(methods[0])
        for m, r in runs.items():
            t = sorted(r.turns)
            q = statistics.quantiles(t, n=10, method="inclusive") if len(t) > 1 else [t[0]] * 9
            out[m].update(s_per_step=statistics.median(t), p20_s=q[1], p80_s=q[7], steps=args.steps,
                          e_pot_diff_meV_per_atom=((r.e0 - ref.e0) / n_atoms * 1e3) if ref else None)
            if device.type == "cuda":
                out[m]["peak_mem_gb"] = torch.cuda.max_memory_allocated(device) / 1e9
        for m in runs:
            if ref is not None:
                out[m]["speedup_vs_fp32"] = out[methods[0]]["s_per_step"] / out[m]["s_per_step"]
            print(f"   {mode} {m:14s} {out[m]['s_per_step'] * 1e3:9.2f} ms/step "
                  f"({out[m]['p20_s'] * 1e3:.2f}-{out[m]['p80_s'] * 1e3:.2f})  "
                  f"x{out[m].get('speedup_vs_fp32', float('nan')):.2f}  "
                  f"dE0 {float('nan') if ref is None else out[m]['e_pot_diff_meV_per_atom']:+.2e} meV/atom",
                  flush=True)
        rows += [{k: v for k, v in o.items() if v is not None and v != ""} for o in out.values()]
        write_results(args.out, from_wide("md_batched", rows, CASE_FIELDS, UNITS), prov)
        del runs
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--shape", default="s", help="PET shape (tcemu.mlip.models.PET_SHAPES)")
    p.add_argument("--system", default="water_192", help="tcemu.mlip.systems name of one system of the batch")
    p.add_argument("--n-systems", type=int, default=64)
    p.add_argument("--rattle", type=float, default=0.01, help="Angstrom: each copy's random displacement")
    p.add_argument("--methods", default="fp32,tf32x3+attn", help="fp32 first (the speedups' reference)")
    p.add_argument("--modes", default="nve,fire")
    p.add_argument("--compile", default="inductor", help="torch.compile backend of PET's methods, or none")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--interleave", type=int, default=10, help="steps per turn")
    p.add_argument("--dt", type=float, default=0.5, help="fs")
    p.add_argument("--temperature", type=float, default=300.0, help="K")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget-s", type=float, default=0.0, help="skip configurations starting after this")
    p.add_argument("--traceback", action="store_true")
    p.add_argument("--out", default="out/md_batched.csv")
    args = p.parse_args(argv)
    rows = run(args)
    print(f"wrote {args.out} ({len(rows)} rows)")
    return 0 if rows and not any(r.get("note") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
