"""Validation driver: the GPU produces batches of hardware samples while a pool of CPU processes runs the model.

For each case and input family the main process generates tiles (:mod:`.families`), runs them on the Tensor
Core (:class:`.runner.Runner`) and hands (inputs, hardware bits) to a worker, which runs
:func:`tcemu.numerics.model.block_fma_bits` with the case's H200 preset and compares bit for bit. At most
``2 * workers`` batches are in flight, so generation, GPU and model overlap without piling up memory.

Every mismatch is kept (up to ``max_saved`` per case) as a one-sample reproducer (a row of A, a column of B,
c, the hardware's and the model's bits); after each case the first ones are shrunk on the hardware by zeroing
products one at a time while the mismatch persists (``minimize``). A small sample of every (case, family) is
kept as the replay set (:mod:`.replay`).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np

from .cases import Case, get_case
from .families import FAMILIES, generate

__all__ = ["ValidationConfig", "run_validation", "model_params", "model_bits", "rows_from_tiles"]

ARCH = "h200"


def model_params(case: Case):
    """The preset the model uses for a case (``get_preset("h200", instruction, input, output)``)."""
    from dataclasses import replace

    from tcemu.numerics.presets import get_preset

    p = get_preset(ARCH, case.instruction, case.input_format, case.output_format)
    if case.K != p.k_instr and p.interleave is None:  # a shorter instruction (m16n8k8, m16n8k4) of the same path
        p = replace(p, k_instr=case.K, n_fma=min(p.n_fma, case.K), label=f"{p.label} (K={case.K})")
    return p


def model_bits(case: Case, a_rows: np.ndarray, b_cols: np.ndarray, c: np.ndarray, params=None) -> np.ndarray:
    """Model output bits for samples: a_rows, b_cols (S, K') with K' a multiple of the case's K; c (S,)."""
    from tcemu.numerics.model import block_fma_bits

    params = params or model_params(case)
    return np.asarray(block_fma_bits(a_rows, b_cols, c, params))


def rows_from_tiles(a: np.ndarray, b: np.ndarray, c: np.ndarray):
    """Tiles -> one sample per output element: a (T, M, K), b (T, K, N), c (T, M, N) -> (S, K), (S, K), (S,)."""
    T, M, K = a.shape
    N = b.shape[-1]
    a_rows = np.broadcast_to(a[:, :, None, :], (T, M, N, K)).reshape(-1, K)
    b_cols = np.broadcast_to(np.swapaxes(b, 1, 2)[:, None, :, :], (T, M, N, K)).reshape(-1, K)
    return a_rows, b_cols, c.reshape(-1)


@dataclass
class ValidationConfig:
    cases: tuple[str, ...]
    samples: int = 10_000_000  # per case
    families: tuple[str, ...] = FAMILIES
    batch_samples: int = 1 << 18
    workers: int = 0  # 0: cpu_count - 1
    seed: int = 2026
    replay_per_family: int = 256
    max_saved: int = 50_000  # mismatches kept per case (each a one-sample reproducer)
    minimize: int = 16  # mismatches per case to shrink on the hardware
    progress: bool = True


# Alternative models compared in the same pass: name -> {case name: (MMAParams, zero_plus)}. Set before the pool
# forks (``run_validation(..., variants=...)``); "zero_plus" maps every zero result to +0 after the model.
_VARIANTS: dict[str, dict] = {}


def variant_bits(case: Case, a_rows, b_cols, c, params, zero_plus: bool) -> np.ndarray:
    d = model_bits(case, a_rows, b_cols, c, params)
    if zero_plus:
        mag = np.uint64(0x7FFFFFFF if case.output_format == "fp32" else 0x7FFF)
        d = np.where((d.astype(np.uint64) & mag) == 0, np.zeros_like(d), d)
    return d


def _check(job):
    """Worker: run the model on one batch, compare, return counts, mismatches and the replay sample."""
    (cname, family, bidx, a, b, c, d, replay_n, max_saved) = job
    case = get_case(cname)
    a_rows, b_cols, c_flat = rows_from_tiles(a, b, c)
    d_hw = d.reshape(-1)
    t0 = time.perf_counter()
    try:
        d_model = model_bits(case, a_rows, b_cols, c_flat)
        err = None
    except Exception as exc:  # noqa: BLE001 - a model crash is a validation failure, reported
        d_model = np.zeros_like(d_hw)
        err = f"{type(exc).__name__}: {exc}"
    dt = time.perf_counter() - t0
    bad = np.nonzero(d_model.astype(np.uint64) != d_hw.astype(np.uint64))[0]
    keep = bad[:max_saved]
    var = {}
    for vname, table in _VARIANTS.items():
        if cname not in table:
            continue
        params, zero_plus = table[cname]
        try:
            dv = variant_bits(case, a_rows, b_cols, c_flat, params, zero_plus)
            vb = np.nonzero(dv.astype(np.uint64) != d_hw.astype(np.uint64))[0]
            k2 = vb[:5000]
            var[vname] = (int(vb.size), (a_rows[k2].copy(), b_cols[k2].copy(), c_flat[k2].copy(), d_hw[k2].copy(),
                                         dv[k2].copy()))
        except Exception as exc:  # noqa: BLE001
            var[vname] = (-1, None)
            err = (err or "") + f" variant {vname}: {type(exc).__name__}: {exc}"
    out = {
        "case": cname, "family": family, "batch": bidx, "samples": int(d_hw.size), "mismatches": int(bad.size),
        "model_seconds": dt, "error": err, "variants": var,
        "mm": (a_rows[keep].copy(), b_cols[keep].copy(), c_flat[keep].copy(), d_hw[keep].copy(), d_model[keep].copy()),
    }
    if replay_n:
        rng = np.random.default_rng(bidx + 17)
        idx = np.sort(rng.choice(d_hw.size, min(replay_n, d_hw.size), replace=False))
        out["replay"] = (a_rows[idx].copy(), b_cols[idx].copy(), c_flat[idx].copy(), d_hw[idx].copy())
    return out


def minimize(runner, case: Case, a_rows, b_cols, c, params=None, max_rounds: int = 64):
    """Shrink one-sample mismatches on the hardware: zero products (a_k) while hardware != model persists.

    Returns (a_rows, b_cols, c, d_hw, d_model) of the reduced reproducers (same count as given)."""
    from .probe_vectors import Vector, pack_diagonal

    a_rows, b_cols, c = a_rows.copy(), b_cols.copy(), c.copy()
    S, K = a_rows.shape

    def hw(ar, bc, cc):
        vecs = [Vector("min", "", list(map(int, ar[i])), list(map(int, bc[i])), int(cc[i])) for i in range(len(cc))]
        a_t, b_t, c_t, where = pack_diagonal(case, vecs, 1)
        d = runner.run(case, a_t[:, 0], b_t[:, 0], c_t)
        return np.array([d[t, i, i] for t, i in where], dtype=d.dtype)

    for _ in range(max_rounds):
        changed = False
        cand_a, cand_b, cand_c, owner = [], [], [], []
        for s in range(S):
            for k in range(K):
                if a_rows[s, k] != 0:
                    ar = a_rows[s].copy()
                    ar[k] = 0
                    cand_a.append(ar)
                    cand_b.append(b_cols[s])
                    cand_c.append(c[s])
                    owner.append((s, k))
        if not owner:
            break
        ca, cb, cc = np.array(cand_a), np.array(cand_b), np.array(cand_c)
        d_h = hw(ca, cb, cc)
        d_m = model_bits(case, ca, cb, cc, params)
        done = set()
        for j, (s, k) in enumerate(owner):
            if s in done or d_h[j] == d_m[j]:
                continue
            a_rows[s] = ca[j]
            done.add(s)
            changed = True
        if not changed:
            break
    d_h = hw(a_rows, b_cols, c)
    d_m = model_bits(case, a_rows, b_cols, c, params)
    return a_rows, b_cols, c, d_h, d_m


def run_validation(runner, cfg: ValidationConfig, out_dir: str, log=print, variants: dict | None = None) -> dict:
    """Run every case of ``cfg``; write the summary JSON, mismatches and replay npz under ``out_dir``.

    ``variants``: other models to count mismatches for in the same pass (see ``_VARIANTS``)."""
    global _VARIANTS
    _VARIANTS = variants or {}
    os.makedirs(out_dir, exist_ok=True)
    cases = [get_case(n) for n in cfg.cases]
    workers = cfg.workers or max(1, (os.cpu_count() or 2) - 1)
    ctx = mp.get_context("fork")
    pool = ctx.Pool(workers)
    inflight = threading.BoundedSemaphore(2 * workers)
    results: dict[str, dict] = {}
    mismatch_store: dict[str, list] = {}
    replay_store: dict[str, tuple] = {}
    variant_store: dict[str, list] = {}
    t_start = time.perf_counter()
    total = cfg.samples * len(cases)
    try:
        from tqdm import tqdm

        bar = tqdm(total=total, unit="sample", unit_scale=True, mininterval=10, file=sys.stdout,
                   disable=not cfg.progress, smoothing=0.1)
    except ImportError:  # pragma: no cover
        bar = None

    def jobs():
        for case in cases:
            spt = case.samples_per_tile
            per_fam = -(-cfg.samples // len(cfg.families))
            for fi, fam in enumerate(cfg.families):
                tiles_left = -(-per_fam // spt)
                bidx = 0
                bt = max(1, cfg.batch_samples // spt)
                while tiles_left > 0:
                    nt = min(bt, tiles_left)
                    rng = np.random.default_rng([cfg.seed, case.id, fi, bidx])
                    a, b, c = generate(case, fam, nt, rng)
                    d = runner.run(case, a, b, c)
                    inflight.acquire()
                    yield (case.name, fam, bidx, a, b, c, d, cfg.replay_per_family if bidx == 0 else 0,
                           cfg.max_saved)
                    tiles_left -= nt
                    bidx += 1

    case_t0: dict[str, float] = {}
    try:
        for r in pool.imap_unordered(_check, jobs()):
            inflight.release()
            cname, fam = r["case"], r["family"]
            rc = results.setdefault(cname, {"samples": 0, "mismatches": 0, "families": {}, "model_seconds": 0.0,
                                            "errors": []})
            case_t0.setdefault(cname, time.perf_counter())
            rc["samples"] += r["samples"]
            rc["mismatches"] += r["mismatches"]
            rc["model_seconds"] += r["model_seconds"]
            f = rc["families"].setdefault(fam, {"samples": 0, "mismatches": 0})
            f["samples"] += r["samples"]
            f["mismatches"] += r["mismatches"]
            for vname, (nbad, mm) in r.get("variants", {}).items():
                vr = rc.setdefault("variants", {}).setdefault(vname, {"mismatches": 0, "families": {}})
                vr["mismatches"] += nbad
                vr["families"][fam] = vr["families"].get(fam, 0) + nbad
                if nbad > 0 and mm is not None:
                    lst = variant_store.setdefault(f"{cname}__{vname}", [])
                    if sum(len(x[0][3]) for x in lst) < 5000:
                        lst.append((mm, fam))
            if r["error"] and len(rc["errors"]) < 5:
                rc["errors"].append(r["error"])
            if r["mismatches"]:
                lst = mismatch_store.setdefault(cname, [])
                if sum(len(x[0][3]) for x in lst) < cfg.max_saved:
                    lst.append((r["mm"], fam))
            if "replay" in r:
                replay_store[f"{cname}__{fam}"] = r["replay"]
            if bar is not None:
                bar.update(r["samples"])
    finally:
        pool.close()
        pool.join()
        if bar is not None:
            bar.close()
    elapsed = time.perf_counter() - t_start

    # minimal reproducers on the hardware
    reproducers = {}
    for cname, lst in mismatch_store.items():
        case = get_case(cname)
        ar = np.concatenate([m[0][0] for m in lst])[: cfg.minimize]
        bc = np.concatenate([m[0][1] for m in lst])[: cfg.minimize]
        cc = np.concatenate([m[0][2] for m in lst])[: cfg.minimize]
        try:
            reproducers[cname] = minimize(runner, case, ar, bc, cc)
        except Exception as exc:  # noqa: BLE001
            log(f"minimize {cname}: {type(exc).__name__}: {exc}")

    summary = _summary(cases, results, elapsed, runner, cfg, workers)
    with open(os.path.join(out_dir, "h200_validation_summary.json"), "w") as fh:
        json.dump(summary, fh, indent=1)
    _save_mismatches(os.path.join(out_dir, "h200_validation_mismatches.npz"), {**mismatch_store, **variant_store},
                     reproducers)
    _save_replay(os.path.join(out_dir, "h200_validation_replay.npz"), replay_store)
    for c in summary["cases"]:
        vs = "  ".join(f"{k}: {v['mismatches']:,d}" for k, v in c.get("variants", {}).items())
        log(f"{c['case']:<22} {c['samples']:>11,d} samples  {c['mismatches']:>9,d} mismatches  {vs}"
            f"  ({c['model_samples_per_s']:,.0f} model samples/s per worker)")
    log(f"total {summary['total_samples']:,d} samples, {summary['total_mismatches']:,d} mismatches, "
        f"{elapsed:.1f} s ({summary['total_samples'] / elapsed:,.0f} samples/s)")
    return summary


def _summary(cases, results, elapsed, runner, cfg, workers) -> dict:
    out_cases = []
    for case in cases:
        r = results.get(case.name, {"samples": 0, "mismatches": 0, "families": {}, "model_seconds": 0.0, "errors": []})
        params = model_params(case)
        out_cases.append({
            "case": case.name, "instruction": case.instruction, "ptx": case.ptx,
            "input_format": case.input_format, "output_format": case.output_format,
            "model_output_format": params.output_format, "preset": params.label,
            "samples": r["samples"], "mismatches": r["mismatches"], "families": r["families"],
            "model_samples_per_s": r["samples"] / r["model_seconds"] if r["model_seconds"] else 0.0,
            "errors": r["errors"], "variants": r.get("variants", {}),
        })
    return {
        "device": runner.device, "arch_preset": ARCH, "families": list(cfg.families),
        "samples_per_case_requested": cfg.samples, "workers": workers, "seconds": elapsed, "seed": cfg.seed,
        "total_samples": sum(c["samples"] for c in out_cases),
        "total_mismatches": sum(c["mismatches"] for c in out_cases),
        "cases": out_cases,
    }


def _pad(x: np.ndarray, k: int = 32) -> np.ndarray:
    out = np.zeros((x.shape[0], k), np.uint32)
    out[:, : x.shape[1]] = x
    return out


def _save_mismatches(path, store, reproducers):
    arrays = {}
    for cname, lst in store.items():
        a = np.concatenate([m[0][0] for m in lst])
        arrays[f"{cname}__a"] = a
        arrays[f"{cname}__b"] = np.concatenate([m[0][1] for m in lst])
        arrays[f"{cname}__c"] = np.concatenate([m[0][2] for m in lst])
        arrays[f"{cname}__d_hw"] = np.concatenate([m[0][3] for m in lst])
        arrays[f"{cname}__d_model"] = np.concatenate([m[0][4] for m in lst])
        arrays[f"{cname}__family"] = np.concatenate([np.array([m[1]] * len(m[0][3])) for m in lst])
    for cname, (a, b, c, dh, dm) in reproducers.items():
        arrays[f"{cname}__min_a"], arrays[f"{cname}__min_b"], arrays[f"{cname}__min_c"] = a, b, c
        arrays[f"{cname}__min_d_hw"], arrays[f"{cname}__min_d_model"] = dh, dm
    np.savez_compressed(path, **arrays)


def _save_replay(path, store):
    arrays = {}
    for key, (a, b, c, d) in store.items():
        arrays[f"{key}__a"], arrays[f"{key}__b"], arrays[f"{key}__c"], arrays[f"{key}__d"] = a, b, c, d
    np.savez_compressed(path, **arrays)
