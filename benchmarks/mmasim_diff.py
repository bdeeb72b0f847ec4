"""Differential check of tcemu.numerics against MMA-Sim, every output bit, per (arch, instruction, qualifier).

MMA-Sim (microsoft/MMA-Sim @ c785138, needs only torch) is none of tcemu's code. ``--mmasim-git REPO`` extracts it
at that commit (``git archive``, the archive's embedded commit id checked) from a repository (bare, checked out,
or a URL) into a temporary folder removed afterwards; ``--mmasim DIR`` takes a folder of its files, checked by
git tree id against c785138's (refused otherwise, unless ``--allow-unverified``). Every case MMA-Sim models (its
qualifier lists ``mmasim/isa/nv_ptx/*.py`` and ``mmasim/isa/amd.py``; ``wgmma`` / ``tcgen05`` from their shape
checks) is mapped to tcemu's preset by :data:`ARCH_MAP` and :func:`tcemu_key`; a case
:func:`tcemu.numerics.get_preset` refuses is reported "not modelled by tcemu". Each case draws ``--samples`` dot
products (whole MMA tiles) from random and adversarial families (benchmarks/_mmasim_inputs.py), runs them through
MMA-Sim and through tcemu with ``variant="mmasim"`` and the default ``variant="measured"``, and compares the output
bits of every tile MMA-Sim answers (tiles it raises on are counted, not compared; ``--min-compared N`` adds tiles
until N outputs are compared). Disagreements are grouped by class with the first reproducer of each.

    PYTHONPATH=src python benchmarks/mmasim_diff.py --mmasim-git <MMA-Sim repository> --samples 1000000 --workers 64
    PYTHONPATH=src python benchmarks/mmasim_diff.py --summary benchmarks/results/cpu/numerics/mmasim_diff*.csv

MMA-Sim is a scalar Python loop (about 1.4e4 dot products per second per core): 1e6 samples for each of the
~145 cases tcemu models is about 3 core-hours. Output: ``--out``.csv (``tcemu._results`` rows: per case and
variant, dot products generated and compared, agreements, disagreements and their classes, MMA-Sim errors) and
``--out``.md (the table, every class of disagreement with its first reproducer, and what decides it:
benchmarks/_mmasim_report.py). ``--summary CSV...`` writes the consolidated summary of stored runs (per case its
latest run, each class with its reproducer and the side the records support, the unexplained disagreements
counted): benchmarks/results/cpu/numerics/mmasim_diff_summary.md. The stored runs are
benchmarks/results/cpu/numerics/mmasim_diff*.{csv,md}.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from _mmasim_inputs import ENC, FAMILIES, gen_tile, width
from _mmasim_report import write
from _mmasim_summary import rewrite_explanations, summarize

#: MMA-Sim architecture -> tcemu arch name (a name get_preset does not know is reported as not modelled)
ARCH_MAP = {"Volta": "v100", "Turing": "turing", "Ampere": "a100", "Ada Lovelace": "ada", "Hopper": "h100",
            "Blackwell": "b200", "RTX Blackwell": "sm120", "CDNA1": "cdna1", "CDNA2": "cdna2", "CDNA3": "cdna3"}
#: MMA-Sim / PTX / AMD type name -> tcemu format name
TYPE_MAP = {"f64": "fp64", "f32": "fp32", "tf32": "tf32", "xf32": "xf32", "f16": "fp16", "bf16": "bf16",
            "e4m3": "e4m3", "e5m2": "e5m2", "e2m1": "e2m1", "e2m3": "e2m3", "e3m2": "e3m2", "fp8": "fp8",
            "bf8": "bf8", "ue8m0": "ue8m0", "ue4m3": "ue4m3"}  # fp8, bf8: AMD float8_e4m3fnuz, e5m2fnuz
@dataclass(frozen=True)
class Case:
    """One MMA-Sim instruction: its class ("mma", "mma_block_scale", "wgmma", "tcgen05mma", ..., "mfma")."""

    kind: str
    arch: str
    qualifier: str
    m: int
    n: int
    k: int
    a: str
    b: str
    c: str
    d: str
    scale: str | None = None
    block: int = 0

    @property
    def name(self) -> str:
        return f"{self.arch}/{self.kind}.{self.qualifier}"


def enumerate_cases(mmasim_path: str) -> list[Case]:
    """Every case MMA-Sim's ISA lists (imported from the checkout at ``mmasim_path``)."""
    sys.path.insert(0, mmasim_path)
    from mmasim.isa import amd
    from mmasim.isa.nv_ptx import nv_mma

    out: list[Case] = []
    for arch, quals in nv_mma.arch_mma_qualifiers.items():
        for q in quals:
            shape, d, a, b, c = q.split(".")
            m, n, k = _mnk(shape)
            out.append(Case("mma", arch, q, m, n, k, a, b, c, d))
    for arch, quals in nv_mma.arch_mma_block_scale_qualifiers.items():
        for q in quals:
            shape, blk, d, a, b, c, s = q.split(".")
            m, n, k = _mnk(shape)
            out.append(Case("mma_block_scale", arch, q, m, n, k, a, b, c, d, s, int(blk[5:])))
    # wgmma (nv_wgmma.py shape checks): k8 tf32 f32; k16 f16 f32/f16, bf16 f32; k32 e4m3/e5m2 pairs f32/f16
    wg = [("8", "f32", "tf32", "tf32"), ("16", "f32", "f16", "f16"), ("16", "f16", "f16", "f16"),
          ("16", "f32", "bf16", "bf16")]
    wg += [("32", d, a, b) for d in ("f32", "f16") for a in ("e5m2", "e4m3") for b in ("e5m2", "e4m3")]
    for k, d, a, b in wg:
        out.append(Case("wgmma", "Hopper", f"m64n8k{k}.{d}.{a}.{b}", 64, 8, int(k), a, b, d, d))
    # tcgen05.mma (nv_tcgen05mma.py): k8 tf32; k16 f16/bf16 pairs f32, f16 f16; k32 e5m2/e4m3/e2m1 pairs f32/f16
    tc = [("8", "f32", "tf32", "tf32")] + [("16", "f32", a, b) for a in ("f16", "bf16") for b in ("f16", "bf16")]
    tc += [("16", "f16", "f16", "f16")]
    f8 = ("e5m2", "e4m3", "e2m1")
    tc += [("32", d, a, b) for d in ("f32", "f16") for a in f8 for b in f8]
    for k, d, a, b in tc:
        out.append(Case("tcgen05mma", "Blackwell", f"m64n8k{k}.{d}.{a}.{b}", 64, 8, int(k), a, b, d, d))
    bs = [("32", "block32", a, b, "ue8m0") for a in f8 for b in f8]
    bs += [("64", blk, "e2m1", "e2m1", s) for s, blk in (("ue8m0", "block32"), ("ue8m0", "block16"),
                                                        ("ue4m3", "block16"))]
    for k, blk, a, b, s in bs:
        out.append(Case("tcgen05mma_block_scale", "Blackwell", f"m128n8k{k}.{blk}.f32.{a}.{b}.{s}", 128, 8, int(k),
                        a, b, "f32", "f32", s, int(blk[5:])))
    for arch, quals in amd.arch_mfma_qualifiers.items():
        for q in quals:
            inst = amd.mfma(arch, q)  # noqa: the ISA class only parses the qualifier
            names = {v: k for k, v in _amd_types().items()}
            ta, tb, td = (names[t] for t in (inst.a_type, inst.b_type, inst.d_type))
            if q.endswith("xf32"):
                ta = tb = "xf32"
            out.append(Case("mfma", arch, q, inst.m, inst.n, inst.k, ta, tb, td, td))
    return list(dict.fromkeys(out))  # RTX Blackwell's list repeats the Ada FP8 qualifiers


def _amd_types():
    from mmasim.isa.common import amd_torch_dtype

    return {k: v for k, v in amd_torch_dtype.items() if k != "xf32"}


def _mnk(shape: str) -> tuple[int, int, int]:
    m, rest = shape[1:].split("n")
    n, k = rest.split("k")
    return int(m), int(n), int(k)


def tcemu_key(case: Case) -> tuple[str, str, str, str]:
    """(arch, instruction, input format, output format) for :func:`tcemu.numerics.get_preset`."""
    arch = ARCH_MAP[case.arch]
    fa, fb = TYPE_MAP[case.a], TYPE_MAP[case.b]
    fin = fa if fa == fb else f"{fa}.{fb}"
    fout = TYPE_MAP[case.d] if case.c == case.d else f"{TYPE_MAP[case.d]}.{TYPE_MAP[case.c]}"  # d.c: c fp16, d fp32
    if case.kind == "mma":
        instr = f"mma.sync.m{case.m}n{case.n}k{case.k}"
    elif case.kind == "wgmma":
        instr = "wgmma"
    elif case.kind == "tcgen05mma":
        instr = "tcgen05"
    elif case.kind in ("mma_block_scale", "tcgen05mma_block_scale"):
        base = "mma.sync" if case.kind == "mma_block_scale" else "tcgen05"
        instr = f"{base}.{'mxf8f6f4' if case.k == 32 else 'mxf4nvf4'}"
        fin += f":{TYPE_MAP[case.scale]}x{case.block}"
    else:  # AMD
        instr = f"v_mfma_{case.qualifier}"
    return arch, instr, fin, fout


def resolve(case: Case, variant: str):
    """tcemu's preset for a case, or the reason there is none."""
    from tcemu.numerics import get_preset

    try:
        key = tcemu_key(case)
        p = get_preset(*key, variant=variant)
    except (ValueError, KeyError) as exc:
        return None, f"not modelled by tcemu: {str(exc).splitlines()[0][:160]}"
    if p.k_instr != case.k:
        return None, f"not modelled by tcemu: preset K={p.k_instr}, MMA-Sim K={case.k}"
    return p, None


# ---------------------------------------------------------------- running both


def _torch_tensor(bits, fmt_type: str, torch):
    """MMA-Sim's operand from bits: its dtypes (``nv_torch_dtype``; e2m1 as raw uint8, K=64 packed in pairs)."""
    view = {"fp16": (np.int16, torch.float16), "bf16": (np.int16, torch.bfloat16), "fp32": (np.int32, torch.float32),
            "tf32": (np.int32, torch.float32), "xf32": (np.int32, torch.float32), "fp64": (np.int64, torch.float64),
            "e4m3": (np.uint8, torch.float8_e4m3fn), "e5m2": (np.uint8, torch.float8_e5m2),
            "fp8": (np.uint8, torch.float8_e4m3fnuz), "bf8": (np.uint8, torch.float8_e5m2fnuz),
            "ue8m0": (np.uint8, torch.float8_e8m0fnu), "ue4m3": (np.uint8, torch.float8_e4m3fn)}
    if fmt_type == "e2m1":
        return torch.from_numpy(np.ascontiguousarray(bits.astype(np.uint8)))
    npd, td = view[fmt_type]
    return torch.from_numpy(np.ascontiguousarray(bits.astype(np.uint64).astype(npd))).view(td)


def _mmasim_instance(case: Case):
    from mmasim.simulator import amd, nv_ptx

    cls = {"mma": nv_ptx.mma, "mma_block_scale": nv_ptx.mma_block_scale, "wgmma": nv_ptx.wgmma,
           "tcgen05mma": nv_ptx.tcgen05mma, "tcgen05mma_block_scale": nv_ptx.tcgen05mma_block_scale,
           "mfma": amd.mfma}[case.kind]
    return cls(case.arch, case.qualifier)


def run_mmasim(inst, case: Case, fa, fb, fc, a, b, c, sa, sb, torch) -> np.ndarray:
    """MMA-Sim's D bits (m, n) as uint64."""
    ta, tb = _torch_tensor(a, fa, torch), _torch_tensor(b, fb, torch)
    if case.k == 64 and case.scale:  # packed fp4: element 2i in the low nibble
        ta = torch.from_numpy((a[:, 0::2] | (a[:, 1::2] << 4)).astype(np.uint8))
        tb = torch.from_numpy((b[0::2, :] | (b[1::2, :] << 4)).astype(np.uint8))
    tc = _torch_tensor(c, fc, torch)
    if case.scale:
        d = inst(ta, tb, tc, _torch_tensor(sa, case.scale, torch), _torch_tensor(sb, case.scale, torch))
    else:
        d = inst(ta, tb, tc)
    npd = {torch.float16: np.uint16, torch.float32: np.uint32, torch.float64: np.uint64}[d.dtype]
    ints = {np.uint16: torch.int16, np.uint32: torch.int32, np.uint64: torch.int64}[npd]
    return d.contiguous().view(ints).numpy().astype(npd).astype(np.uint64)


def run_tcemu(p, a, b, c, sa, sb) -> np.ndarray:
    """tcemu's D bits (m, n) for one tile (rows of a against columns of b)."""
    from tcemu.numerics.formats import get_format
    from tcemu.numerics.model import block_fma_bits

    m, k = a.shape
    n = b.shape[1]
    fa, fb = get_format(p.input_format), get_format(p.b_format)
    a_rows = np.repeat(a, n, axis=0).astype(fa.container_dtype)
    b_cols = np.tile(b.T, (m, 1)).astype(fb.container_dtype)
    c_flat = c.reshape(-1).astype(get_format(p.c_in_format).container_dtype)
    scales = (None, None)
    if sa is not None:
        scales = (np.repeat(sa, n, axis=0).astype(np.uint8), np.tile(sb.T, (m, 1)).astype(np.uint8))
    return np.asarray(block_fma_bits(a_rows, b_cols, c_flat, p, *scales)).astype(np.uint64).reshape(m, n)


def classify(x: int, y: int, fc: str) -> str:
    """A disagreement's class from the two output bit patterns (tcemu x, MMA-Sim y) in format ``fc``."""
    e, f, *_ = ENC[fc]
    w = 1 + e + f
    mag = (1 << (w - 1)) - 1
    top = ((1 << e) - 1) << f

    def kind(v):
        if v & mag > top:
            return "nan"
        return "inf" if v & mag == top else ("zero" if v & mag == 0 else "finite")

    kx, ky = kind(x), kind(y)
    if kx == ky == "nan":
        return "NaN bits differ"
    if kx != ky:
        return f"tcemu {kx} vs MMA-Sim {ky}"
    if kx == "zero":
        return "sign of zero"
    if (x ^ y) >> (w - 1):
        return "sign differs"
    d = abs(int(x & mag) - int(y & mag))
    return "1 ulp" if d == 1 else ("<= 2^4 ulp" if d <= 16 else "> 2^4 ulp")


def _hex(v, w):
    return "0x" + format(int(v) & ((1 << w) - 1), f"0{(w + 3) // 4}x")  # (int64 containers: two's complement)


def _causes(measured, mmasim, got, ref, tile, got_mmasim) -> dict:
    """For the default variant's disagreements: which disputed choice, taken as MMA-Sim's, removes each one."""
    from dataclasses import replace

    bad = got != ref
    if not bad.any() or measured.interleave is not None:
        return {}
    zf = run_tcemu(replace(measured, zero_factor_exp=mmasim.zero_factor_exp), *tile)
    fl = run_tcemu(replace(measured, czero_floor=mmasim.czero_floor, c_exp_floor=mmasim.c_exp_floor), *tile)
    no = run_tcemu(replace(measured, scheme=mmasim.scheme), *tile) if measured.scheme != mmasim.scheme else None
    out = {}
    for i, j in zip(*np.nonzero(bad)):
        if no is not None and no[i, j] == ref[i, j]:  # the NaN rules alone: an order among NaNs, or AMD's bits
            out[i, j] = "NaN order" if getattr(measured.scheme, "nan_rule", "") == "propagate" else "NaN bits"
        elif zf[i, j] == ref[i, j]:
            out[i, j] = "zero-factor rule"
        elif fl[i, j] == ref[i, j]:
            out[i, j] = "c floors"
        else:
            out[i, j] = "zero-factor rule + c floors" if got_mmasim[i, j] == ref[i, j] else "other"
    return out


def worker(args) -> dict:
    """One case's share: ``tiles`` tiles from ``seed``; counts per variant and the first reproducer per class."""
    case, mmasim_path, tiles, seed = args
    if mmasim_path not in sys.path:
        sys.path.insert(0, mmasim_path)
    import torch

    torch.set_num_threads(1)
    fa, fb, fc = TYPE_MAP[case.a], TYPE_MAP[case.b], TYPE_MAP[case.d]
    fci = TYPE_MAP[case.c]  # c's format: d's, or fp16 with fp32 d (V100/Turing m8n8k4 .f32.f16.f16.f16)
    params = {v: resolve(case, v)[0] for v in ("mmasim", "measured")}
    inst = _mmasim_instance(case)
    rng = np.random.default_rng(seed)
    fams = [f for f in FAMILIES if f != "scales" or case.scale]
    res = {"generated": 0, "compared": 0, "mmasim_errors": 0, "mmasim_error": "", "seconds": 0.0,
           "agree": {v: 0 for v in params}, "classes": {v: {} for v in params}}
    t0 = time.perf_counter()
    for t in range(tiles):
        family = fams[t % len(fams)]
        a, b, c, sa, sb = gen_tile(case, fa, fb, fci, family, rng)
        res["generated"] += case.m * case.n
        try:
            ref = run_mmasim(inst, case, fa, fb, fci, a, b, c, sa, sb, torch)
        except Exception as exc:  # MMA-Sim itself fails on this input: recorded, not compared
            res["mmasim_errors"] += 1
            res["mmasim_error"] = res["mmasim_error"] or f"{type(exc).__name__}: {str(exc)[:120]}"
            continue
        res["compared"] += ref.size
        for v, p in params.items():
            got = run_tcemu(p, a, b, c, sa, sb)
            res["agree"][v] += int(np.sum(got == ref))
            if v == "mmasim":
                got_mmasim = got
            causes = (_causes(p, params["mmasim"], got, ref, (a, b, c, sa, sb), got_mmasim) if v == "measured"
                      else {})
            for i, j in zip(*np.nonzero(got != ref)):
                cause = causes.get((i, j), "")
                cls = f"{family}: {cause + ': ' if cause else ''}{classify(int(got[i, j]), int(ref[i, j]), fc)}"
                entry = res["classes"][v].setdefault(cls, {"count": 0})
                entry["count"] += 1
                if "repro" not in entry:
                    w = width(fc)
                    entry["repro"] = {"a": [_hex(x, width(fa)) for x in a[i]],
                                      "b": [_hex(x, width(fb)) for x in b[:, j]], "c": _hex(c[i, j], width(fci)),
                                      "tcemu": _hex(got[i, j], w), "mmasim": _hex(ref[i, j], w)}
                    if sa is not None:
                        entry["repro"]["scale_a"] = [_hex(x, 8) for x in sa[i]]
                        entry["repro"]["scale_b"] = [_hex(x, 8) for x in sb[:, j]]
    res["seconds"] = time.perf_counter() - t0
    return res


def _merge(parts: list[dict]) -> dict:
    out = {"generated": 0, "compared": 0, "mmasim_errors": 0, "mmasim_error": "", "seconds": 0.0, "agree": {},
           "classes": {}}
    for r in parts:
        out["generated"] += r["generated"]
        out["compared"] += r["compared"]
        out["mmasim_errors"] += r["mmasim_errors"]
        out["mmasim_error"] = out["mmasim_error"] or r["mmasim_error"]
        out["seconds"] += r["seconds"]
        for v, n in r["agree"].items():
            out["agree"][v] = out["agree"].get(v, 0) + n
        for v, classes in r["classes"].items():
            dst = out["classes"].setdefault(v, {})
            for cls, e in classes.items():
                d = dst.setdefault(cls, {"count": 0, "repro": e.get("repro")})
                d["count"] += e["count"]
    return out


def _part_path(parts_dir: str, case: Case, chunk: int, chunks: int, samples: int, seed: int, top_up: str = "") -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in case.name)
    return Path(parts_dir) / f"{safe}.s{samples}.seed{seed}{top_up}.{chunk:03d}of{chunks}.json"


def _shares(tiles: int, chunks: int) -> list[int]:
    return [tiles // chunks + (w < tiles % chunks) for w in range(chunks)]


def cached_worker(args) -> dict:
    """:func:`worker` with its result kept in ``path`` (read back if another run already wrote it)."""
    path, job = args
    if path is not None and path.exists():
        return json.loads(path.read_text())
    res = worker(job)
    if path is not None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(res))
        tmp.replace(path)
    return res


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_argument_group("MMA-Sim's source (one of)")
    src.add_argument("--mmasim", default=None, help="a folder with MMA-Sim's files at c785138 (checked by git tree id)")
    src.add_argument("--mmasim-git", default=None,
                     help="a git repository of MMA-Sim (bare, checked out, or a URL): c785138 is extracted into a "
                          "temporary folder, removed afterwards")
    src.add_argument("--allow-unverified", action="store_true",
                     help="run on an --mmasim folder whose files are not c785138's (the results say so)")
    ap.add_argument("--samples", type=int, default=1_000_000, help="dot products per case (rounded up to tiles)")
    ap.add_argument("--min-compared", type=int, default=0,
                    help="add tiles (further seeded shares) to cases where MMA-Sim raises on some inputs until at "
                         "least this many outputs are compared")
    ap.add_argument("--workers", type=int, default=mp.cpu_count())
    ap.add_argument("--chunks", type=int, default=64,
                    help="shares per case, each with its own seed: the results do not depend on --workers")
    ap.add_argument("--parts-dir", default=None,
                    help="keep each share's result here and reuse those already there (a run can stop and resume, "
                         "and machines can share the work: copy their parts into one folder)")
    ap.add_argument("--reverse", action="store_true", help="take the shares in reverse order (a second machine)")
    ap.add_argument("--parts-only", action="store_true", help="compute the shares, write no summary")
    ap.add_argument("--complete-only", action="store_true",
                    help="summarize only the cases whose every share is in --parts-dir (computes nothing)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="", help="only cases whose name contains this text")
    ap.add_argument("--cases-file", default=None, help="only the cases named in this file, one exact name per line")
    ap.add_argument("--out", default="benchmarks/results/cpu/numerics/mmasim_diff.csv",
                    help="the CSV; the markdown summary is written beside it (.md)")
    ap.add_argument("--summary", nargs="+", metavar="CSV", default=None,
                    help="write the consolidated summary of these stored runs to --summary-out (runs nothing)")
    ap.add_argument("--summary-out", default="benchmarks/results/cpu/numerics/mmasim_diff_summary.md")
    ap.add_argument("--rewrite-findings", nargs="+", metavar="MD", default=None,
                    help="replace the Findings and causes of these stored runs' markdown with the current text, "
                         "naming the cases that a later run of --summary-of supersedes")
    ap.add_argument("--summary-of", nargs="+", metavar="CSV", default=None,
                    help="the stored runs (CSVs) --rewrite-findings compares with")
    return ap


def _mmasim_source(args) -> tuple[str, str, str | None]:
    """(folder to import MMA-Sim from, what the results say of it, a temporary folder to remove or None)."""
    from _mmasim_source import MMASIM_COMMIT, MMASIM_TREE, fetch_mmasim, verify_checkout

    if bool(args.mmasim) == bool(args.mmasim_git):
        raise SystemExit("give one of --mmasim DIR and --mmasim-git REPO")
    if args.mmasim_git:
        path = fetch_mmasim(args.mmasim_git)
        return str(path), f"MMA-Sim {MMASIM_COMMIT[:7]} extracted by git archive (embedded commit id checked)", \
            str(path.parent)
    problem = verify_checkout(args.mmasim)
    if problem is None:
        return args.mmasim, f"MMA-Sim's files verified as {MMASIM_COMMIT[:7]} (git tree {MMASIM_TREE[:7]})", None
    if not args.allow_unverified:
        raise SystemExit(f"refusing to run: {problem}. Use --mmasim-git, or --allow-unverified")
    print(f"WARNING: {problem}", file=sys.stderr)
    return args.mmasim, f"MMA-Sim NOT VERIFIED: {problem}", None


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.summary:
        counts = summarize(args.summary, args.summary_out)
        print(f"{args.summary_out}: {counts.get('unexplained', 0)} unexplained disagreements")
        return 0
    if args.rewrite_findings:
        for md in args.rewrite_findings:
            rewrite_explanations(md, args.summary_of or [])
        return 0
    mmasim, args.mmasim_note, temporary = _mmasim_source(args)
    try:
        rows, wall = run(args, mmasim)
    finally:
        if temporary:
            shutil.rmtree(temporary, ignore_errors=True)
    if not args.parts_only:
        write(rows, args, wall)
    return 0


def run(args, mmasim: str) -> tuple[list[dict], float]:
    """Every selected case's shares (and top-up rounds, ``--min-compared``) through a pool of workers; the rows
    (parts merged) and the wall time."""
    if args.parts_dir:
        Path(args.parts_dir).mkdir(parents=True, exist_ok=True)
    rows, jobs, todo = [], [], []
    listed = set(Path(args.cases_file).read_text().split("\n")) - {""} if args.cases_file else None
    for ci, case in enumerate(enumerate_cases(mmasim)):  # ci over every case: seeds do not depend on --only
        if args.only not in case.name or (listed is not None and case.name not in listed):
            continue
        p, why = resolve(case, "mmasim")
        if p is None:
            if not args.complete_only:
                rows.append({"case": case.name, "tcemu": "", "status": why})
            continue
        shares = _shares(-(-args.samples // (case.m * case.n)), args.chunks)
        paths = [_part_path(args.parts_dir, case, w, args.chunks, args.samples, args.seed) if args.parts_dir
                 else None for w in range(args.chunks)]
        if args.complete_only and not all(paths[w].exists() for w, t in enumerate(shares) if t):
            continue
        jobs += [(len(rows), (paths[w], (case, mmasim, t, [args.seed, ci, w]))) for w, t in enumerate(shares) if t]
        todo.append((len(rows), ci, case))
        rows.append({"case": case.name, "tcemu": " ".join(tcemu_key(case)), "status": "compared", "parts": [],
                     "seed": args.seed})
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(args.workers) as pool:
        for top_up in range(5):
            order = list(reversed(jobs)) if args.reverse else jobs
            for (ri, _), res in zip(order, pool.imap(cached_worker, [j for _, j in order])):
                rows[ri]["parts"].append(res)
            jobs = _top_up_jobs(args, rows, todo, mmasim, top_up + 1) if args.min_compared else []
            if not jobs:
                break
    for r in rows:
        if "parts" in r:
            r.update(_merge(r.pop("parts")))
    return rows, time.perf_counter() - t0


def _top_up_jobs(args, rows: list[dict], todo: list, mmasim: str, top_up: int) -> list:
    """Shares of further tiles for cases with fewer than ``--min-compared`` outputs compared (MMA-Sim raised on
    some tiles): enough tiles at the rate seen so far, and a little more; none where MMA-Sim raised on all."""
    jobs = []
    for ri, ci, case in todo:
        done = _merge(rows[ri]["parts"])
        if done["compared"] >= args.min_compared or not done["compared"]:
            continue
        rate = done["compared"] / done["generated"]
        tiles = int((args.min_compared - done["compared"]) / rate / (case.m * case.n) * 1.05) + 2
        shares = _shares(tiles, args.chunks)
        tag = f".top{top_up}t{tiles}"
        for w, t in enumerate(shares):
            if t:
                path = (_part_path(args.parts_dir, case, w, args.chunks, args.samples, args.seed, tag)
                        if args.parts_dir else None)
                jobs.append((ri, (path, (case, mmasim, t, [args.seed, ci, 1000 * top_up + w]))))
    return jobs


if __name__ == "__main__":
    raise SystemExit(main())
