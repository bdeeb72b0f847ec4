"""Probe: run the crafted vector families on the hardware, then infer the instruction's parameters from them.

Two halves, so the inference can be rerun on any CPU from stored hardware bits:

- ``collect(runner, cases)`` (GPU): every vector of :mod:`.probe_vectors`, in-kernel chains of two instructions,
  the same chains fed through the host (does anything but the rounded fp32/fp16 accumulator pass between
  instructions?), and ``wgmma`` with ``scale-d = 0``. Returns raw bits per case; ``save_raw``/``load_raw``.
- ``infer(raw, case)`` (CPU): for each question, every candidate value is tried in the hypothesis space of
  :mod:`.hypothesis`, with the answers of earlier questions fixed, and kept only if it predicts the hardware bits
  of *every* vector of the deciding families. No value comes from the presets: they are only compared with
  afterwards (``compare_with_preset``). The report keeps, for each rejected value, the vector that rejected it.
"""

from __future__ import annotations

import itertools
import json
import time

import numpy as np

from .cases import CASES, Case, get_case
from .hypothesis import FMTS, Hyp, evaluate
from .probe_compare import compare_with_preset
from .probe_vectors import FAMILIES, Vector, build_vectors, pack_diagonal

__all__ = ["collect", "save_raw", "load_raw", "infer", "compare_with_preset", "probe_report", "probe_mma"]

KMAX = 64


# ---------------------------------------------------------------------------------------------------------------
# GPU half
# ---------------------------------------------------------------------------------------------------------------
def _run_vectors(runner, case: Case, vecs: list[Vector], nchain: int, scale_d: int = 1) -> np.ndarray:
    if not vecs:
        return np.zeros(0, np.uint32)
    a, b, c, where = pack_diagonal(case, vecs, nchain)
    d = runner.run(case, a, b, c, scale_d=scale_d)
    return np.array([d[t, i, i] for t, i in where], dtype=np.uint32)


def collect(runner, cases=CASES, log=print) -> dict:
    """Hardware bits of every probe vector of every case (see module docstring)."""
    raw = {}
    for case in cases:
        t0 = time.perf_counter()
        vecs = build_vectors(case)
        d = np.zeros(len(vecs), np.uint32)
        for nchain in (1, 2):
            idx = [i for i, v in enumerate(vecs) if v.nchain == nchain]
            d[idx] = _run_vectors(runner, case, [vecs[i] for i in idx], nchain)
        # the chained vectors again, one instruction at a time, the accumulator passing through the host
        idx2 = [i for i, v in enumerate(vecs) if v.nchain == 2]
        first = [Vector(v.family, v.tag, v.a[: case.K], v.b[: case.K], v.c) for v in (vecs[i] for i in idx2)]
        d1 = _run_vectors(runner, case, first, 1)
        second = [Vector(v.family, v.tag, v.a[case.K:], v.b[case.K:], int(x)) for v, x in zip((vecs[i] for i in idx2), d1)]
        d_host = _run_vectors(runner, case, second, 1)
        entry = {
            "a": _pad([v.a for v in vecs]), "b": _pad([v.b for v in vecs]),
            "c": np.array([v.c for v in vecs], np.uint32), "d": d,
            "nchain": np.array([v.nchain for v in vecs], np.uint8),
            "family": np.array([v.family for v in vecs]), "tag": np.array([v.tag for v in vecs]),
            "hostchain_index": np.array(idx2, np.int32), "hostchain_d": d_host,
        }
        if case.instruction == "wgmma":  # scale-d = 0: is C ignored (the suspected source of c-less FP8 data)?
            idx1 = [i for i, v in enumerate(vecs) if v.nchain == 1 and v.family in ("random", "fbits")]
            entry["scale0_index"] = np.array(idx1, np.int32)
            entry["scale0_d"] = _run_vectors(runner, case, [vecs[i] for i in idx1], 1, scale_d=0)
            zero_c = [Vector(v.family, v.tag, v.a, v.b, 0) for v in (vecs[i] for i in idx1)]
            entry["scale0_zero_c_d"] = _run_vectors(runner, case, zero_c, 1)
        raw[case.name] = entry
        log(f"probe {case.name:<22} {len(vecs):5d} vectors  {time.perf_counter() - t0:.1f} s")
    return raw


def _pad(rows: list[list[int]]) -> np.ndarray:
    out = np.zeros((len(rows), KMAX), np.uint32)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def save_raw(path: str, raw: dict, device: dict | None = None) -> None:
    arrays = {}
    for cname, e in raw.items():
        for k, v in e.items():
            arrays[f"{cname}__{k}"] = v
    arrays["__device__"] = np.array(json.dumps(device or {}))
    np.savez_compressed(path, **arrays)


def load_raw(path: str) -> tuple[dict, dict]:
    z = np.load(path, allow_pickle=False)
    raw: dict[str, dict] = {}
    device = {}
    for key in z.files:
        if key == "__device__":
            device = json.loads(str(z[key]))
            continue
        cname, field = key.split("__", 1)
        raw.setdefault(cname, {})[field] = z[key]
    return raw, device


# ---------------------------------------------------------------------------------------------------------------
# CPU half: inference
# ---------------------------------------------------------------------------------------------------------------
class _Vecs:
    """The probe vectors of one case as plain lists, with the hardware answer."""

    def __init__(self, e: dict, case: Case):
        n = len(e["d"])
        self.case = case
        self.items = []
        for i in range(n):
            kt = case.K * int(e["nchain"][i])
            self.items.append((str(e["family"][i]), str(e["tag"][i]), [int(x) for x in e["a"][i][:kt]],
                               [int(x) for x in e["b"][i][:kt]], int(e["c"][i]), int(e["d"][i]), int(e["nchain"][i])))

    def family(self, *fams, nchain=None):
        return [it for it in self.items if it[0] in fams and (nchain is None or it[6] == nchain)]


def _pred(h: Hyp, it, case: Case) -> int:
    return evaluate(h, it[2], it[3], it[4], case.input_format, case.output_format)


def _first_fail(h: Hyp, vecs, case: Case):
    for it in vecs:
        try:
            p = _pred(h, it, case)
        except Exception as exc:  # noqa: BLE001 - a hypothesis that cannot evaluate is rejected
            return it, f"error {type(exc).__name__}"
        if p != it[5]:
            return it, p
    return None


def _evidence(it, pred, case: Case) -> dict:
    w = 8 if case.output_format == "fp32" else 4
    wi = {"fp16": 4, "bf16": 4, "tf32": 8, "e4m3": 2, "e5m2": 2}[case.input_format]
    nz = [k for k in range(len(it[2])) if it[2][k] != 0]
    return {"family": it[0], "vector": it[1],
            "a": {k: f"{it[2][k]:#0{wi + 2}x}" for k in nz[:12]},
            "b": {k: f"{it[3][k]:#0{wi + 2}x}" for k in nz[:12]},
            "c": f"{it[4]:#0{w + 2}x}", "hardware": f"{it[5]:#0{w + 2}x}",
            "predicted": pred if isinstance(pred, str) else f"{pred:#0{w + 2}x}"}


def _search(base: Hyp, grid: dict, vecs, case: Case, order_key=None):
    """Try every combination of grid values on base; return (consistent list, rejections {combo: (it, pred)})."""
    keys = list(grid)
    ok, rej = [], {}
    # discriminating vectors first: shuffle deterministically, keep family order mixed
    rng = np.random.default_rng(0)
    vecs = [vecs[i] for i in rng.permutation(len(vecs))]
    for combo in itertools.product(*(grid[k] for k in keys)):
        h = base.with_(**dict(zip(keys, combo)))
        f = _first_fail(h, vecs, case)
        if f is None:
            ok.append(dict(zip(keys, combo)))
        else:
            rej[combo] = f
    if not ok and rej:  # nothing fits every vector: keep the best fit (most vectors matched), flagged
        sub = vecs[:400]
        scores = []
        for combo in rej:
            h = base.with_(**dict(zip(keys, combo)))
            scores.append((sum(_safe_pred(h, it, case) == it[5] for it in sub), combo))
        scores.sort(key=lambda x: -x[0])
        best = dict(zip(keys, scores[0][1]))
        best["_best_fit"] = f"{scores[0][0]}/{len(sub)}"
        ok = [best]
    return ok, rej, keys


def _safe_pred(h, it, case):
    try:
        return _pred(h, it, case)
    except Exception:  # noqa: BLE001
        return None


def _partitions(K: int) -> dict[str, tuple]:
    parts = {f"1 block of {K}": (tuple(range(K)),)}
    for n in (1, 2, 4, 8, 16):
        if n < K and K % n == 0:
            parts[f"{K // n} blocks of {n}"] = tuple(tuple(range(s, s + n)) for s in range(0, K, n))
    if K % 4 == 0 and K >= 8:
        parts["2 groups by k mod 4: {0,1} then {2,3}"] = (tuple(k for k in range(K) if k % 4 < 2),
                                                         tuple(k for k in range(K) if k % 4 >= 2))
        parts["2 groups by k mod 4: {2,3} then {0,1}"] = (tuple(k for k in range(K) if k % 4 >= 2),
                                                         tuple(k for k in range(K) if k % 4 < 2))
    if K % 2 == 0:
        parts["2 groups by k mod 2: even then odd"] = (tuple(range(0, K, 2)), tuple(range(1, K, 2)))
    if K >= 16:
        parts[f"2 halves, each split by k mod 4"] = tuple(
            tuple(k for k in range(h * K // 2, (h + 1) * K // 2) if k % 4 in g) for h in (0, 1) for g in ((0, 1), (2, 3)))
    return parts


def infer(e: dict, case: Case, log=print) -> dict:
    """Infer the parameters of one case from its raw probe bits (see module docstring)."""
    t0 = time.perf_counter()
    V = _Vecs(e, case)
    fout = case.output_format
    K = case.K
    base = Hyp(K, out_fmt=fout, out_rnd="rz" if fout == "fp32" else "rne")
    report: dict = {"case": case.name, "instruction": case.instruction, "ptx": case.ptx,
                    "input_format": case.input_format, "output_format": fout, "parameters": {}, "checks": {}}
    P = report["parameters"]

    # ---- 1. block structure and where c enters (F- and rounding-agnostic vectors) --------------------------
    parts = _partitions(K)
    vecs = V.family("blocks", nchain=1)
    ok_struct = []
    rejections = {}
    for pname, blocks in parts.items():
        for cw in ("first", "last"):
            hits = []
            for F in (13, 25):
                h = base.with_(blocks=blocks, c_where=cw, frac_bits=F, prod_exp="true" if cw == "last" else "field")
                f = _first_fail(h, vecs, case)
                if f is None:
                    hits.append(F)
                else:
                    rejections[(pname, cw)] = f
            if hits:
                ok_struct.append((pname, cw))
    struct_ev = [_evidence(it, pred, case) | {"rejects": f"{p}, c {cw}"} for (p, cw), (it, pred) in rejections.items()
                 if (p, cw) not in ok_struct][:8]
    if not ok_struct:  # nothing fits: best fit, flagged
        sub = vecs[:400]
        scores = []
        for pname, blocks in parts.items():
            for cw in ("first", "last"):
                h = base.with_(blocks=blocks, c_where=cw, prod_exp="true" if cw == "last" else "field")
                scores.append((sum(_safe_pred(h, it, case) == it[5] for it in sub), pname, cw))
        scores.sort(key=lambda x: -x[0])
        P.setdefault("_notes", []).append(f"blocks: no candidate fits every vector; best fit {scores[0][0]}/{len(sub)}")
        ok_struct_fit = [(scores[0][1], scores[0][2])]
    else:
        ok_struct_fit = ok_struct
    if ok_struct_fit:
        pname, cw = ok_struct_fit[0]
        base = base.with_(blocks=parts[pname], c_where=cw, prod_exp="true" if cw == "last" else "field")
    P["blocks"] = {"inferred": [p for p, _ in ok_struct] or None, "candidates": list(parts), "evidence": struct_ev,
                   "vectors": len(vecs)}
    P["c_enters"] = {"inferred": sorted({cw for _, cw in ok_struct}) or None, "candidates": ["first", "last"]}

    # ---- 2. F, alignment rounding, output rounding and precision, final c-add rounding ---------------------
    vecs2 = V.family("fbits", "round", "blocks", nchain=1)
    grid = {"frac_bits": list(range(10, 31)), "align": ["trunc", "floor", "rne"],
            "out_rnd": ["rz", "rne", "rd", "ru"],
            "out_fmt": [fout, "e8m13"] if fout == "fp32" else [fout]}
    if base.c_where == "last":
        grid["c_add_rnd"] = ["rne", "rz"]
    ok2, rej2, keys2 = _search(base, grid, vecs2, case)
    if ok2 and "_best_fit" in ok2[0]:
        P.setdefault("_notes", []).append(f"precision: no candidate fits every vector; best fit {ok2[0]['_best_fit']}")
    for k in keys2:
        vals = sorted({o[k] for o in ok2}, key=str)
        ev = []
        for val in grid[k]:
            if val in vals:
                continue
            # the rejection of this value, with every other parameter at an accepted value if any
            best = None
            for combo, f in rej2.items():
                d = dict(zip(keys2, combo))
                if d[k] != val:
                    continue
                if ok2 and all(d[o] == ok2[0][o] for o in keys2 if o != k):
                    best = f
                    break
                best = best or f
            if best:
                ev.append(_evidence(best[0], best[1], case) | {"rejects": f"{k}={val}", "rejected": {k: val}})
        P[_NAMES.get(k, k)] = {"inferred": vals or None, "candidates": grid[k], "evidence": ev[:6],
                               "vectors": len(vecs2)}
    if ok2:
        base = base.with_(**{k: v for k, v in ok2[0].items() if not k.startswith("_")})
    # ---- 3. normalisation --------------------------------------------------------------------------------
    _stage(P, "normalisation", base, {"norm": ["late", "seq"]}, V.family("norm", "fbits", nchain=1), case)
    base = _adopt(base, P, "normalisation", "norm")
    # ---- 4. c = 0 floor (with the product exponent of subnormal inputs), c exponent floor -------------------
    fc = FMTS[fout]
    lo = fc.emin - fc.frac_bits - 12
    czero_vals = [None] + list(range(lo, fc.emin + 4))
    vz = V.family("czero", nchain=1)
    if vz:
        pe = [base.prod_exp] + [x for x in ("field", "true") if x != base.prod_exp]
        # with several blocks per instruction (tf32 as 4 + 4, WMMA's m16n8k4 chain) a tiny first-block result is
        # the next block's c, aligned per the c exponent floor: searched jointly here, decided in its own stage
        cexp = {"c_exp_floor": [fc.emin, None]} if len(base.blocks or ()) > 1 else {}
        _stage(P, "czero_floor", base, {"czero_floor": czero_vals, "prod_exp": pe,
                                        "underflow_sign": ["keep", "plus"], **cexp}, vz, case)
        base = _adopt(base, P, "czero_floor", "czero_floor", "prod_exp", "underflow_sign")
    else:
        P["czero_floor"] = {"inferred": "undecidable", "note": "no product of two inputs reaches the bottom of the "
                            "output range, so a c = 0 floor below the smallest product exponent cannot act"}
    vc = V.family("cexp", "czero", "subnormal", nchain=1)
    _stage(P, "c_exp_floor", base, {"c_exp_floor": [fc.emin, None]}, vc, case)
    base = _adopt(base, P, "c_exp_floor", "c_exp_floor")
    # ---- 5. overflow -------------------------------------------------------------------------------------
    vo = V.family("overflow", nchain=1)
    if len(vo) > 2:
        _stage(P, "overflow", base, {"overflow": ["inf", "ieee"]}, vo, case)
        base = _adopt(base, P, "overflow", "overflow")
    # ---- 6. specials: NaN output, signed zero ----------------------------------------------------------------
    vs = V.family("special", nchain=1)
    nan_seen = sorted({it[5] for it in vs if _is_nan(it[5], fout)})
    nan_vals = list(dict.fromkeys([None] + nan_seen))
    _stage(P, "nan", base, {"nan": nan_vals, "zero_sign": ["plus", "ieee"], "underflow_sign": ["keep", "plus"]},
           vs, case)
    P["nan"]["nan_outputs_seen"] = [f"{x:#x}" for x in nan_seen]
    base = _adopt(base, P, "nan", "nan", "zero_sign", "underflow_sign")
    # ---- 7. subnormals -----------------------------------------------------------------------------------
    _stage(P, "subnormals", base, {"ftz_in": [False, True], "ftz_out": [False, True]},
           V.family("subnormal", nchain=1), case)
    base = _adopt(base, P, "subnormals", "ftz_in", "ftz_out")
    # ---- 8. tf32 conversion ------------------------------------------------------------------------------
    if case.input_format == "tf32":
        _stage(P, "tf32_conversion", base, {"tf32_conv": ["trunc", "rne", "rna"]}, V.family("tf32conv"), case)
        base = _adopt(base, P, "tf32_conversion", "tf32_conv")
    # ---- 9. chained instructions: per-instruction blocks vs one fused block --------------------------------
    vch = V.family("blocks", nchain=2)
    f_sep = _first_fail(base, vch, case)
    fused = base.with_(k_instr=2 * K, blocks=tuple(tuple(b) + tuple(x + K for x in b) for b in base.blocks)
                       if base.blocks else ())
    f_fus = _first_fail(fused, vch, case)
    P["chaining"] = {"inferred": [n for n, f in (("instructions chain through the rounded accumulator", f_sep),
                                                 ("blocks fused across instructions", f_fus)) if f is None] or None,
                     "evidence": [_evidence(f[0], f[1], case) | {"rejects": n} for n, f in
                                  (("separate", f_sep), ("fused", f_fus)) if f is not None][:2],
                     "vectors": len(vch)}
    hc = e.get("hostchain_index")
    if hc is not None and len(hc):
        same = int(np.count_nonzero(e["d"][hc] == e["hostchain_d"]))
        report["checks"]["in_kernel_chain_equals_host_chain"] = {"same": same, "total": int(len(hc))}
    if "scale0_index" in e:
        same = int(np.count_nonzero(e["scale0_d"] == e["scale0_zero_c_d"]))
        differs_from_c = int(np.count_nonzero(e["scale0_d"] != e["d"][e["scale0_index"]]))
        report["checks"]["scale_d0_equals_c_zero"] = {"same": same, "total": int(len(e["scale0_index"])),
                                                      "differs_from_scale_d1": differs_from_c}
    # ---- final: the inferred hypothesis on every vector ----------------------------------------------------
    allv = V.items
    bad = []
    for it in allv:
        p = _pred(base, it, case)
        if p != it[5]:
            bad.append(_evidence(it, p, case))
    report["final"] = {"hypothesis": _hyp_dict(base), "vectors": len(allv), "mismatches": len(bad),
                       "mismatch_examples": bad[:10],
                       "mismatches_by_family": _count_by(bad)}
    report["seconds"] = round(time.perf_counter() - t0, 1)
    log(f"infer {case.name:<22} {len(allv)} vectors, final hypothesis mismatches {len(bad)} ({report['seconds']} s)")
    return report


_NAMES = {"frac_bits": "frac_bits", "align": "alignment", "out_rnd": "output_rounding", "out_fmt": "output_precision",
          "c_add_rnd": "c_add_rounding"}


def _is_nan(bits: int, fout: str) -> bool:
    if fout == "fp32":
        return (bits & 0x7F800000) == 0x7F800000 and bits & 0x7FFFFF
    return (bits & 0x7C00) == 0x7C00 and bits & 0x3FF


def _count_by(ev):
    out = {}
    for e in ev:
        out[e["family"]] = out.get(e["family"], 0) + 1
    return out


def _stage(P, name, base, grid, vecs, case):
    # a value chosen by earlier evidence is tried first, so it is kept unless these vectors contradict it
    grid = {k: ([getattr(base, k)] if getattr(base, k) in v else []) + [x for x in v if x != getattr(base, k)]
            for k, v in grid.items()}
    ok, rej, keys = _search(base, grid, vecs, case)
    ev = []
    acc = {k: v for k, v in ok[0].items() if not k.startswith("_")} if ok else {}
    for k in keys:  # per rejected value: its rejection with the other parameters at an accepted value if possible
        for val in grid[k]:
            if any(o.get(k) == val for o in ok):
                continue
            best = None
            for combo, f in rej.items():
                d = dict(zip(keys, combo))
                if d[k] != val:
                    continue
                if all(d[o] == acc.get(o) for o in keys if o != k):
                    best = (d, f)
                    break
                best = best or (d, f)
            if best:
                d, (it, pred) = best
                ev.append(_evidence(it, pred, case) | {"rejects": ", ".join(f"{kk}={_fmt(v)}" for kk, v in d.items()),
                                                       "rejected": {k: _fmt(val)}})
    inferred = [{k: _fmt(v) for k, v in o.items()} for o in ok]
    if ok and "_best_fit" in ok[0]:
        P.setdefault("_notes", []).append(f"{name}: no candidate fits every vector; best fit {ok[0]['_best_fit']}")
    P[name] = {"inferred": inferred or None, "candidates": {k: [_fmt(v) for v in vals] for k, vals in grid.items()},
               "evidence": ev[:60], "vectors": len(vecs), "_ok": ok}


def _fmt(v):
    return f"{v:#x}" if isinstance(v, int) and not isinstance(v, bool) and v > 4096 else v


def _adopt(base: Hyp, P, name, *keys) -> Hyp:
    ok = P[name].pop("_ok", [])
    if not ok:
        return base
    # prefer the first consistent combination (grids list the literature's value first)
    return base.with_(**{k: ok[0][k] for k in keys if k in ok[0]})


def _hyp_dict(h: Hyp) -> dict:
    d = {k: getattr(h, k) for k in ("k_instr", "c_where", "frac_bits", "align", "out_fmt", "out_rnd", "c_add_rnd",
                                    "czero_floor", "c_exp_floor", "prod_exp", "overflow", "norm", "nan", "ftz_in",
                                    "ftz_out", "tf32_conv", "zero_sign", "underflow_sign")}
    d["blocks"] = [list(b) for b in h.blocks] if h.blocks else [list(range(h.k_instr))]
    if d["nan"] is not None:
        d["nan"] = f"{d['nan']:#x}"
    return d


# ---------------------------------------------------------------------------------------------------------------
def _infer_job(job):
    e, name = job
    case = get_case(name)
    r = infer(e, case, log=lambda *a: None)
    try:
        r["preset_comparison"] = compare_with_preset(r, case)
    except Exception as exc:  # noqa: BLE001 - the model may be missing on a bare machine
        r["preset_comparison"] = {"error": f"{type(exc).__name__}: {exc}"}
    return r


def probe_report(raw: dict, device: dict, cases=None, log=print, workers: int = 0) -> dict:
    cases = [get_case(n) for n in (cases or raw)]
    rep = {"device": device, "families": list(FAMILIES), "cases": []}
    jobs = [(raw[c.name], c.name) for c in cases]
    if workers and workers > 1 and len(jobs) > 1:
        import multiprocessing as mp

        with mp.get_context("fork").Pool(min(workers, len(jobs))) as pool:
            results = pool.map(_infer_job, jobs)
    else:
        results = [_infer_job(j) for j in jobs]
    for r in results:
        log(f"infer {r['case']:<22} {r['final']['vectors']} vectors, final hypothesis mismatches "
            f"{r['final']['mismatches']} ({r['seconds']} s)")
        rep["cases"].append(r)
    # mma.sync vs wgmma on identical vectors
    pairs = []
    for c1 in cases:
        for c2 in cases:
            if c1.instruction == "mma.sync" and c2.instruction == "wgmma" and (c1.input_format, c1.output_format, c1.K) == (
                    c2.input_format, c2.output_format, c2.K):
                d1, d2 = raw[c1.name]["d"], raw[c2.name]["d"]
                n = min(len(d1), len(d2))
                same = int(np.count_nonzero(d1[:n] == d2[:n]))
                fam = raw[c1.name]["family"][:n]
                diff_f = {}
                for f in np.unique(fam[d1[:n] != d2[:n]]):
                    diff_f[str(f)] = int(np.count_nonzero((fam == f) & (d1[:n] != d2[:n])))
                pairs.append({"mma.sync": c1.name, "wgmma": c2.name, "vectors": n, "identical": same,
                              "differ_by_family": diff_f})
    rep["mma_sync_vs_wgmma"] = pairs
    return rep


def probe_mma(case: str | Case, runner=None):
    """Run the probe of one instruction on this GPU and return what it measured, as model parameters.

    ``probe_mma("mma.k8.tf32.fp32")`` -> :class:`tcemu.numerics.params.MMAParams`: the H200 preset with every
    field the vectors decided otherwise replaced (``measured.measured_params``). The full report (every stage,
    the deciding vectors, whether zero results are +0) is ``infer(collect(runner, [case])[name], case)``."""
    from .measured import measured_params

    case = get_case(case) if not isinstance(case, Case) else case
    if runner is None:
        from .runner import Runner

        runner = Runner()
    raw = collect(runner, [case], log=lambda *a: None)
    rep = {"cases": [_infer_job((raw[case.name], case.name))]}
    return measured_params(rep)[0][case.name][0]
