# /// script
# requires-python = ">=3.11"
# dependencies = ["tcemu[mlip]"]
# ///
"""What an emulated PET costs Dynamo at each call: the guard nodes, graphs and graph breaks of PET compiled with
dynamic shapes (as ``benchmarks/md_run.py`` compiles it) inside ASE's calculator, per method and emulation scope.

A compiled frame checks its guards at every call, so a model with more guard nodes pays more host time per
step where the step is host-bound (192 atoms, ``docs/engines.md``). Each configuration is built and run for
``--steps`` ASE steps in a fresh Dynamo state (``torch._dynamo.reset``); the guard trees Dynamo logs
(``TORCH_LOGS=guards``'s records) are counted as nodes (``+-`` entries), and the graphs and graph breaks from
Dynamo's counters. Then ``--measure-steps`` more steps count, per step, the calls that ``emulation_mode``'s
Python handler receives at run time (a mode around code that calls compiled graphs sees their wrappers' torch
calls: Dynamo leaves torch-function modes on while a graph runs) and Dynamo's cache lookups (compiled frames
entered, from the profiler). These depend on the torch version and on the code traced, not on the device, so the
CPU measures them. Output: a result file (``tcemu._results``), benchmark ``md_guards``, one case per
(model, system, backend, scope) and method, metrics ``guard_nodes``, ``lambda_guards`` (those of them that
run as Python lambdas, the slowest kind), ``guard_eval_us`` (one evaluation of
every compiled frame's guards, summed over the frames), ``graphs``, ``graph_breaks``,
``mode_calls_per_step`` and ``cache_lookups_per_step``.

    python benchmarks/md_guards.py --out benchmarks/results/cpu/md_guards/pet_tiny_water_192.csv
    python benchmarks/md_guards.py --backend inductor --out benchmarks/results/cpu/md_guards/pet_tiny_water_192_inductor.csv
    python benchmarks/md_guards.py --as-cuda-small-shapes \
        --out benchmarks/results/cpu/md_guards/pet_tiny_water_192_cuda_small_shapes.csv
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
CONFIGS = (("fp32", "model"), ("tf32x3+attn", "model"), ("tf32x3+attn", "layers"))
UNITS = {"guard_nodes": "nodes", "lambda_guards": "nodes", "guard_eval_us": "us", "graphs": "graphs",
         "graph_breaks": "breaks", "mode_calls_per_step": "calls", "cache_lookups_per_step": "lookups"}
#: evaluations of each new frame's guards that torch's profile_guard_manager averages for ``guard_eval_us``
GUARD_EVAL_ITERATIONS = 500


def _md_run():
    spec = importlib.util.spec_from_file_location("md_run", HERE / "md_run.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["md_run"] = mod
    spec.loader.exec_module(mod)
    return mod


class _GuardNodes(logging.Handler):
    """Counts the nodes of the guard trees Dynamo logs."""

    def __init__(self) -> None:
        super().__init__()
        self.nodes = 0
        self.lambdas = 0

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        self.nodes += message.count("+- ")
        self.lambdas += message.count("+- LAMBDA_GUARD")


@contextlib.contextmanager
def _counting_mode_calls(calls: list) -> Iterator[None]:
    """Appends each call of ``emulation_mode``'s handler made at run time (not while Dynamo traces) to ``calls``."""
    from tcemu.emulation.mode import emulation_mode

    handler = emulation_mode.__torch_function__

    def counted(self, func, types, args=(), kwargs=None):
        if not torch.compiler.is_compiling():
            calls.append(func)
        return handler(self, func, types, args, kwargs)

    emulation_mode.__torch_function__ = counted
    try:
        yield
    finally:
        emulation_mode.__torch_function__ = handler


def per_step_calls(run, steps: int) -> dict:
    """Per step, over ``steps`` more steps of a compiled ``run``: the emulation mode's handler calls at run time
    and Dynamo's cache lookups (the profiler's ``TorchDynamo Cache Lookup`` events, one per compiled frame entered)."""
    from torch.profiler import profile

    calls: list = []
    with _counting_mode_calls(calls), profile() as prof:
        run.warm_up(steps)
    lookups = sum(e.count for e in prof.key_averages() if e.key == "TorchDynamo Cache Lookup")
    return {"mode_calls_per_step": len(calls) / steps, "cache_lookups_per_step": lookups / steps}


def _guard_eval_timer() -> list[float]:
    """A list that gets, for each frame Dynamo compiles, the microseconds one evaluation of its guards takes
    (the mean of ``GUARD_EVAL_ITERATIONS``, torch's own profiler of a guard tree, on the frame's arguments): the
    host time a compiled call pays before its graph runs. Empty where this torch lacks that hook."""
    times: list[float] = []
    try:
        import torch._dynamo.guards as dynamo_guards
        from torch._C._dynamo.guards import profile_guard_manager
    except ImportError:
        return times
    if not hasattr(dynamo_guards, "guard_manager_testing_hook_fn"):
        return times

    def record(guard_manager, local_scope, _builder) -> None:
        times.append(profile_guard_manager(guard_manager.root, local_scope, GUARD_EVAL_ITERATIONS))

    dynamo_guards.guard_manager_testing_hook_fn = record
    return times


@contextlib.contextmanager
def _as_cuda_small_shapes() -> Iterator[None]:
    """The decisions CUDA takes at 192 atoms, on the CPU: each GEMM runs as SGEMM (the small-shape fallback) and
    each attention call as torch's FP32 attention (fewer than ``FUSED_MIN_HEADS`` heads), so that the traced
    graphs are those of the GPU run (the guards too, except those of the CUDA backend's own resolution code,
    which is not traced here)."""
    from tcemu.emulation import attention, dispatch

    saved = (dispatch.ReferenceBackend.runs_as_sgemm, attention._fused_unsupported, attention._small_batch)
    dispatch.ReferenceBackend.runs_as_sgemm = lambda self, M, N, K, device, spec: True
    attention._fused_unsupported = lambda q, k, v, mask, spec: None
    attention._small_batch = lambda q: True
    try:
        yield
    finally:
        dispatch.ReferenceBackend.runs_as_sgemm, attention._fused_unsupported, attention._small_batch = saved


def measure(shape: str, system: str, steps: int, backend: str, measure_steps: int = 3) -> list[dict]:
    from torch._dynamo.utils import counters

    from tcemu.mlip import systems
    from tcemu.mlip.models import build_pet

    md_run = _md_run()
    from _md_engines import AseRun  # noqa: PLC0415 - md_run puts benchmarks/ on the path

    args = argparse.Namespace(log_every=10, temperature=300.0, seed=0, dt=0.5, skin=2.0)
    base, atoms = build_pet(shape, 0), systems.build(system)
    handler = _GuardNodes()
    guard_us = _guard_eval_timer()
    torch._logging.set_logs(guards=True)
    guards = logging.getLogger("torch._dynamo.guards.__guards")
    guards.addHandler(handler)
    guards.propagate = False  # counted, not printed
    rows = []
    try:
        for method, scope in CONFIGS:
            torch._dynamo.reset()
            counters.clear()
            handler.nodes = handler.lambdas = 0
            guard_us.clear()
            model = md_run.build_model(base, method, backend, emulation_scope=scope)
            run = AseRun(model, atoms, args, torch.device("cpu"))
            run.warm_up(steps)
            row = {"method": method, "scope": scope, "guard_nodes": handler.nodes,
                   "lambda_guards": handler.lambdas,
                   "guard_eval_us": round(sum(guard_us), 2) if guard_us else None,
                   "graphs": counters["stats"]["unique_graphs"],
                   "graph_breaks": sum(counters["graph_break"].values())}
            rows.append(row | per_step_calls(run, measure_steps))
            print(rows[-1], flush=True)
    finally:
        import torch._dynamo.guards as dynamo_guards

        dynamo_guards.guard_manager_testing_hook_fn = None
        guards.removeHandler(handler)
        torch._logging.set_logs()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="tiny", help="PET shape (tcemu.mlip.models.PET_SHAPES)")
    p.add_argument("--system", default="water_192")
    p.add_argument("--steps", type=int, default=2, help="ASE steps per configuration (the first compiles)")
    p.add_argument("--measure-steps", type=int, default=3, help="steps after those, counted per step")
    p.add_argument("--backend", default="aot_eager", help="torch.compile backend (the guards are Dynamo's)")
    p.add_argument("--as-cuda-small-shapes", action="store_true",
                   help="trace as CUDA does at small sizes: every GEMM takes the SGEMM fallback (traced as F.linear) "
                        "and every attention call torch's FP32 attention (the small-batch fallback)")
    p.add_argument("--out", default="md_guards.csv")
    args = p.parse_args(argv)
    from tcemu._results import Provenance, case, measurement, write_results

    results = []
    with _as_cuda_small_shapes() if args.as_cuda_small_shapes else contextlib.nullcontext():
        rows = measure(args.shape, args.system, args.steps, args.backend, args.measure_steps)
    for r in rows:
        where = case(model=f"pet-{args.shape}", system=args.system, backend=args.backend, scope=r["scope"],
                     traced_as="cuda_small_shapes" if args.as_cuda_small_shapes else None)
        results += measurement("md_guards", "tcemu", r["method"], where, {k: r[k] for k in UNITS}, UNITS)
    write_results(args.out, results, Provenance.current("cpu"))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent / "src"))
    sys.exit(main())
