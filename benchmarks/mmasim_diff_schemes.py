"""Differential check of tcemu's AMD MFMA, FP64 DMMA and Turing presets against MMA-Sim itself (not run in CI).

MMA-Sim (microsoft/MMA-Sim, MIT) is never committed here: pass ``--mmasim DIR``, a checkout of it at the stated
commit (``git clone https://github.com/microsoft/MMA-Sim DIR && git -C DIR checkout c785138``); it needs PyTorch.
For every instruction of MMA-Sim's AMD lists (``mmasim/isa/amd.py``: CDNA1, CDNA2, CDNA3) and its Turing and f64
``mma`` qualifiers, whole instruction-shaped matrices are drawn from every kind of
:mod:`tcemu.numerics.inputs_schemes` (Turing: :mod:`tcemu.numerics.inputs`), run through MMA-Sim and through
``block_fma_bits`` with the tcemu preset, and every output bit compared (a NaN against a NaN counts as agreement;
the NaN bits are not modelled by either side). At c785138 MMA-Sim's CDNA1/CDNA2 fp16 and bf16 path stops on an
assertion (``pairwise_dot`` asserts fp32 operands, gets fp16/bf16); those cases are recorded as such and then run
with the operands cast to fp32 (exact), which is what MMA-Sim computes with assertions off (``python -O``).

Output: a JSON summary (``--out``: per case samples, agreements, the first disagreements with their operands) and a
result file (``tcemu._results``, ``--csv``: benchmark ``mmasim_diff_schemes``, one case per instruction, metrics
``samples`` and ``agree``). Stored run: ``benchmarks/results/cpu/numerics/mmasim_diff_schemes.{json,csv}``.

Usage: ``python benchmarks/mmasim_diff_schemes.py --mmasim /tmp/MMA-Sim [--reps 1] [--out
out/mmasim_diff_schemes.json] [--csv out/mmasim_diff_schemes.csv]``
"""

from __future__ import annotations

import argparse
import json
import sys
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from tcemu.numerics import block_fma_bits, get_preset  # noqa: E402
from tcemu.numerics.inputs import make_operands  # noqa: E402
from tcemu.numerics.inputs_schemes import SCHEME_KINDS, scheme_operands  # noqa: E402

MMASIM_COMMIT = "c785138"
_FLOAT = {"fp64": np.float64, "fp32": np.float32, "fp16": np.float16}
_UINT = {"fp64": np.uint64, "fp32": np.uint32, "fp16": np.uint16}


def _torch_of(bits: np.ndarray, fmt: str):
    import torch

    dt = {"fp64": (torch.float64, np.int64), "fp32": (torch.float32, np.int32), "tf32": (torch.float32, np.int32),
          "fp16": (torch.float16, np.int16), "bf16": (torch.bfloat16, np.int16),
          "e4m3fnuz": (torch.float8_e4m3fnuz, np.uint8), "e5m2fnuz": (torch.float8_e5m2fnuz, np.uint8)}[fmt]
    return torch.from_numpy(np.ascontiguousarray(bits).view(dt[1]).copy()).view(dt[0])


def _compare(sim, p, name: str, kinds, reps: int) -> dict:
    """Random matrices of each kind through MMA-Sim (sim(A, B, C)) and the preset; per-kind agreement."""
    m, n, k = sim.m, sim.n, sim.k
    fb = p.b_format
    res = {"samples": 0, "agree": 0, "disagreements": []}
    for kind in kinds:
        for r in range(reps):
            rng = np.random.default_rng(zlib.crc32(f"{name} {kind} {r}".encode()))
            gen = scheme_operands if p.scheme is not None else make_operands
            a, b, c = gen(p, max(m, n) * max(m, n), k, kind, rng)
            A, Bt, C = a[:m], b[:n], c[: m * n].reshape(m, n)
            D = sim(_torch_of(A, p.input_format), _torch_of(Bt.T.copy(), fb), _torch_of(C, p.c_format))
            d_sim = D.contiguous().numpy().view(_UINT[p.c_format]).reshape(-1)
            ar, br = np.repeat(A, n, axis=0), np.tile(Bt, (m, 1))
            d_me = block_fma_bits(ar, br, C.reshape(-1), p)
            both_nan = np.isnan(d_sim.view(_FLOAT[p.c_format])) & np.isnan(d_me.view(_FLOAT[p.c_format]))
            same = (d_me == d_sim) | both_nan
            res["samples"] += int(same.size)
            res["agree"] += int(same.sum())
            for i in np.nonzero(~same)[0][:3]:
                res["disagreements"].append({"kind": kind, "a": ar[i].tolist(), "b": br[i].tolist(),
                                             "c": int(C.reshape(-1)[i]), "tcemu": int(d_me[i]),
                                             "mmasim": int(d_sim[i])})
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mmasim", required=True, help=f"a checkout of microsoft/MMA-Sim at {MMASIM_COMMIT}")
    ap.add_argument("--reps", type=int, default=1, help="matrices per (case, kind)")
    ap.add_argument("--out", default="out/mmasim_diff_schemes.json")
    ap.add_argument("--csv", default="out/mmasim_diff_schemes.csv")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(args.mmasim).resolve()))
    import mmasim.simulator.amd as sim_amd
    from mmasim.isa.amd import arch_mfma_qualifiers
    from mmasim.isa.nv_ptx.nv_mma import arch_mma_qualifiers
    from mmasim.simulator.nv_ptx import mma as nv_mma

    from tcemu.numerics.presets_amd import AMD_PRESETS

    cases = {}
    for arch, quals in arch_mfma_qualifiers.items():
        for q in quals:
            p = AMD_PRESETS[arch.lower(), q]
            entry = {}
            try:
                entry.update(_compare(sim_amd.mfma(arch, q), p, arch + q, SCHEME_KINDS, args.reps))
            except AssertionError:
                entry["mmasim_assertion"] = "pairwise_dot asserts fp32 operands; rerun with them cast to fp32"
                orig = sim_amd.pairwise_dot
                sim_amd.pairwise_dot = lambda a, b, f, _o=orig: _o(a.float(), b.float(), f)
                try:
                    entry.update(_compare(sim_amd.mfma(arch, q), p, arch + q, SCHEME_KINDS, args.reps))
                finally:
                    sim_amd.pairwise_dot = orig
            cases[f"{arch} v_mfma_{q}"] = entry
            print(f"{arch} {q}: {entry['agree']}/{entry['samples']}" + (" (assertion)" if "mmasim_assertion" in entry
                                                                          else ""), flush=True)
    nv = [("Turing", "turing", q) for q in arch_mma_qualifiers["Turing"]]
    nv += [(a, t, q) for a, t in (("Ampere", "a100"), ("Hopper", "h100"), ("Blackwell", "b200"))
           for q in arch_mma_qualifiers[a] if ".f64." in q]
    for arch, tarch, q in nv:
        shape, dty, aty, _, cty = q.split(".")
        if cty != dty:
            cases[f"{arch} mma.{q}"] = {"skipped": "c type differs from d type (not modelled)"}
            continue
        fin, fout = {"f16": "fp16", "f64": "fp64"}[aty], {"f16": "fp16", "f32": "fp32", "f64": "fp64"}[dty]
        p = get_preset(tarch, "mma." + shape, fin, fout, variant="mmasim")
        kinds = SCHEME_KINDS if fin == "fp64" else ("normal", "bits", "wide", "cancel", "tiny", "special")
        entry = _compare(nv_mma(arch, q), p, arch + q, kinds, args.reps)
        cases[f"{arch} mma.{q}"] = entry
        print(f"{arch} {q}: {entry['agree']}/{entry['samples']}", flush=True)
    ran = [v for v in cases.values() if "samples" in v]
    summary = {"mmasim_commit": MMASIM_COMMIT, "cases": len(cases), "samples": sum(v["samples"] for v in ran),
               "agree": sum(v["agree"] for v in ran), "by_case": cases}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=1))
    from tcemu._results import Provenance, case, measurement, write_results

    rows = []
    for name, v in cases.items():
        if "samples" in v:
            rows += measurement("mmasim_diff_schemes", "tcemu.numerics.block_fma_bits", f"MMA-Sim {MMASIM_COMMIT}",
                                case(instruction=name), {"samples": v["samples"], "agree": v["agree"]},
                                {"samples": "count", "agree": "count"})
    csv = write_results(args.csv, rows, Provenance.current(device="cpu"))
    print(f"{summary['agree']}/{summary['samples']} outputs agree over {len(ran)} cases; wrote {out}, {csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
