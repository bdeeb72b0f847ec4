"""What ``TCEMU_FP32_PRECISION`` and ``tcemu-autoload.pth`` cost (tcemu.autoload), on the CPU.

* the ``.pth`` line as site.py runs it, the variable unset (in-process, best of 5 x 100,000 runs);
* interpreter start with the ``.pth`` processed (as site-packages does for the wheel), the variable unset and set,
  against a start without it (``site.addsitedir`` of a folder with and without it; medians of ``--starts``
  alternating runs);
* ``import torch`` with the variable set (the hand-over hook registered) and unset;
* per call of a module the hook has already seen, and per torch op outside any module, with the hook
  installed and not (medians of ``--repeats`` loops);
* module calls per energy+forces evaluation of PET (tiny), so the per-call cost reads as a per-step cost.

Writes a result file of ``tcemu._results`` (``--out``); the stored run: ``benchmarks/results/cpu/autoload/cost.csv``.

    python benchmarks/autoload_cost.py --out benchmarks/results/cpu/autoload/cost.csv
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PTH = ROOT / "src" / "tcemu-autoload.pth"


def _start_seconds(site_dir: str, code: str, env_extra: dict[str, str]) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TCEMU_")}
    env.update(PYTHONPATH=str(ROOT / "src"), **env_extra)
    boot = f"import site; site.addsitedir({site_dir!r}); {code}"
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", boot], env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    return float(out.stdout) if out.stdout.strip() else wall


def interpreter_costs(starts: int) -> list[tuple[str, float, str]]:
    with tempfile.TemporaryDirectory() as with_pth, tempfile.TemporaryDirectory() as without:
        (Path(with_pth) / PTH.name).write_text(PTH.read_text())
        cases = {
            "start_without_pth": (without, "pass", {}),
            "start_with_pth_unset": (with_pth, "pass", {}),
            "start_with_pth_set": (with_pth, "pass", {"TCEMU_FP32_PRECISION": "tf32x3"}),
        }
        timing = "import time; t = time.perf_counter(); import torch; print(time.perf_counter() - t)"
        cases |= {
            "import_torch_unset": (with_pth, timing, {}),
            "import_torch_set": (with_pth, timing, {"TCEMU_FP32_PRECISION": "tf32x3"}),
        }
        times: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(starts):  # alternating, so that a drift of the machine's speed hits every case alike
            for name, (site_dir, code, env) in cases.items():
                times[name].append(_start_seconds(site_dir, code, env))
    return [(name, statistics.median(t) * 1e3, "ms") for name, t in times.items()]


def pth_line_costs(n: int = 100000) -> list[tuple[str, float, str]]:
    """The .pth line itself, run as site.py runs it (exec), with the variable unset: microseconds per run."""
    import timeit

    code = compile(PTH.read_text(), str(PTH), "exec")
    env = dict(os.environ)
    os.environ.pop("TCEMU_FP32_PRECISION", None)
    try:
        t = min(timeit.repeat(lambda: exec(code, {}), number=n, repeat=5)) / n
    finally:
        os.environ.clear()
        os.environ.update(env)
    return [("pth_line_us_unset", t * 1e6, "us")]


def _per_call_ns(fn, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e9


def hook_costs(n: int, repeats: int) -> list[tuple[str, float, str]]:
    """ns per call of a module the hook has seen, and of a torch op outside modules, without and with the hook
    (alternating rounds, medians)."""
    import torch

    from tcemu import autoload

    torch.set_num_threads(1)
    seen = torch.nn.Identity()
    x, a, b = torch.randn(2, 4), torch.randn(8), torch.randn(8)
    samples: dict[str, list[float]] = {k: [] for k in ("call_without", "call_with", "op_without", "op_with")}
    for _ in range(repeats):
        samples["call_without"].append(_per_call_ns(lambda: seen(x), n))
        samples["op_without"].append(_per_call_ns(lambda: torch.add(a, b), n))
        autoload.install("tf32x3")
        try:
            seen(x)  # now seen (parameter-free, so left as it is): what remains per call is the hook's check
            samples["call_with"].append(_per_call_ns(lambda: seen(x), n))
            samples["op_with"].append(_per_call_ns(lambda: torch.add(a, b), n))
        finally:
            autoload.uninstall()
    med = {k: statistics.median(v) for k, v in samples.items()}
    return [("module_call_ns_without_hook", med["call_without"], "ns"),
            ("module_call_ns_with_hook", med["call_with"], "ns"),
            ("hook_ns_per_module_call", med["call_with"] - med["call_without"], "ns"),
            ("torch_add_ns_without_hook", med["op_without"], "ns"),
            ("torch_add_ns_with_hook", med["op_with"], "ns")]


def pet_module_calls() -> list[tuple[str, float, str]]:
    """Module calls in one energy+forces evaluation of PET tiny (metatomic's ASE calculator, 192 atoms)."""
    import torch
    from metatomic_ase import MetatomicCalculator

    from tcemu.mlip import models, systems

    atoms = systems.water_box()
    atoms.calc = MetatomicCalculator(models.build_pet("tiny").export(), device="cpu")
    calls = [0]

    def count(module, args):
        calls[0] += 1

    handle = torch.nn.modules.module.register_module_forward_pre_hook(count)
    try:
        atoms.get_forces()
    finally:
        handle.remove()
    return [("pet_tiny_module_calls_per_evaluation", float(calls[0]), "calls")]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--starts", type=int, default=15)
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", default="")
    args = p.parse_args(argv)
    rows = (pth_line_costs() + interpreter_costs(args.starts) + hook_costs(args.calls, args.repeats)
            + pet_module_calls())
    for name, value, unit in rows:
        print(f"{name:42s} {value:12.3f} {unit}")
    if args.out:
        from tcemu._results import Provenance, Result, write_results

        results = [Result("autoload_cost", "tcemu", "", "", name, repr(float(value)), unit)
                   for name, value, unit in rows]
        write_results(args.out, results, Provenance.current("cpu"))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    sys.exit(main())
