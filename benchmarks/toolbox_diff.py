"""Differential check of tcemu.numerics against the Khattak & Mikaitis toolbox (MATLAB Tensor & Matrix Core models,
github.com/north-numerical-computing/MATLAB-tensor-core): its public hardware data and its models, every output bit.
Not run in CI.

(a) Hardware data: every recorded case (48 x 5,000 dot products, bundled as ``tcemu.numerics.public_data``) through
    tcemu's preset of the instruction the harness issued (default variant and ``variant="toolbox"``) and through the
    toolbox's own model of that GPU under GNU Octave. The H100/H200 FP8 -> fp32 cases, whose d lacks c, are also
    compared with c = 0 (as the toolbox's Validate_TC_models.m does).
(b) Models: every model the toolbox ships (and MI300MC, which it deleted; taken from the commit before the deletion)
    is run under Octave in batches on random and adversarial tiles (``_toolbox_tiles.FAMILIES``), and compared bit
    for bit with tcemu's matching preset, ``variant="toolbox"`` where tcemu keeps the toolbox's choice and the
    default. Wrappers (A2TC, A30TC, H200TC, L40STC, RTXPRO6000TC, MI250MC, MI300XMC, MI300AMC, B200TCRN) get one
    tile each, checked against the model they wrap.

Each disagreement is classed (``_toolbox_classes``) with its first reproducer and the side the hardware data or
the PTX/CDNA ISA documents support; outputs no rule explains are counted as ``unexplained``. None of the toolbox's
code is part of tcemu: it is extracted from a git mirror into a temporary directory.

    PYTHONPATH=src python benchmarks/toolbox_diff.py --toolbox-git <bare git dir of MATLAB-tensor-core> \\
        --samples 16384 --workers 2

Output: ``--out``.csv (``tcemu._results`` rows: per case and tcemu target, samples, agreements, each class's count,
toolbox errors) and ``--out``.md (tables, every class with its reproducer and explanation, what ran and what did
not); the stored run is benchmarks/results/cpu/numerics/toolbox_diff.{csv,md}.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from tcemu.numerics.rounding import Rounding

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _toolbox_classes import UNEXPLAINED, classify
from _toolbox_hw import TB_FORMAT, fields_differ, hardware_part
from _toolbox_octave import octave_version, run_batches, run_with_fallback
from _toolbox_tiles import FAMILIES, gen_tile, out_bits, tcemu_tile, values

AMD = ("MI100MC", "MI210MC", "MI300MC")


@dataclass(frozen=True)
class ModelCase:
    """One toolbox model and format pair, and the tcemu arch it is compared with (``fma``: its block size)."""

    model: str
    arch: str
    fin: str
    fout: str
    fma: int

    @property
    def name(self) -> str:
        return f"{self.model} {self.fin}->{self.fout}"

    @property
    def instruction(self) -> str:
        return "mfma" if self.model in AMD else "mma.sync"


def _nv(model, arch, blocks, fp8=True):
    out = []
    for fin, outs in (("fp16", ("fp32", "fp16")), ("bf16", ("fp32",)), ("tf32", ("fp32",))) + \
            ((("e4m3", ("fp32", "fp16")), ("e5m2", ("fp32", "fp16"))) if fp8 else ()):
        out += [ModelCase(model, arch, fin, fo, blocks[fin]) for fo in outs]
    return out


MODEL_CASES = (
    [ModelCase("V100TC", "v100", "fp16", fo, 4) for fo in ("fp32", "fp16")]
    + _nv("A100TC", "a100", {"fp16": 8, "bf16": 8, "tf32": 4}, fp8=False)
    + _nv("AdaTC", "ada", {"fp16": 8, "bf16": 8, "tf32": 4, "e4m3": 16, "e5m2": 16})
    + _nv("H100TC", "h100", {"fp16": 16, "bf16": 16, "tf32": 8, "e4m3": 32, "e5m2": 32})
    + _nv("B200TC", "b200", {"fp16": 16, "bf16": 16, "tf32": 8, "e4m3": 32, "e5m2": 32})
    + [ModelCase("MI100MC", "mi100", "fp16", "fp32", 4), ModelCase("MI100MC", "mi100", "bf16", "fp32", 2),
       ModelCase("MI210MC", "mi250", "fp16", "fp32", 4), ModelCase("MI210MC", "mi250", "bf16", "fp32", 4)]
    + [ModelCase("MI300MC", "mi300", f, "fp32", n) for f, n in (("fp16", 8), ("bf16", 8), ("xf32", 4), ("fp8", 16),
                                                                ("bf8", 16))]
)
#: wrapper -> (the model it calls, formats of its smoke tile)
WRAPPERS = {"A2TC": ("A100TC", "fp16", "fp32"), "A30TC": ("A100TC", "fp16", "fp32"),
            "L40STC": ("AdaTC", "e4m3", "fp16"), "H200TC": ("H100TC", "e5m2", "fp32"),
            "RTXPRO6000TC": ("B200TC", "e4m3", "fp32"), "B200TCRN": ("B200TC", "fp16", "fp32"),
            "MI250MC": ("MI210MC", "fp16", "fp32"), "MI300XMC": ("MI300MC", "fp16", "fp32"),
            "MI300AMC": ("MI300MC", "bf16", "fp32")}


def targets(case: ModelCase) -> list[tuple[str, object]]:
    """(label, tcemu params) compared with the case's outputs: the variant keeping the toolbox's choices first."""
    from tcemu.numerics import get_preset

    out = []
    arches = [case.arch] + (["sm120"] if case.model == "B200TC" else [])  # RTXPRO6000TC = B200TC
    for arch in arches:
        for variant in ("toolbox", "measured"):
            try:
                p = get_preset(arch, case.instruction, case.fin, case.fout, variant=variant)
            except ValueError:
                continue
            if any(q == p for _, q in out):
                continue
            out.append((f"{arch} {variant}", p))
    return out


def k_of(case: ModelCase, p) -> int:
    """Two blocks of the toolbox at least, in whole instructions of tcemu's preset."""
    k = p.k_instr
    while k < 2 * case.fma:
        k += p.k_instr
    return k


def _vals(p, a, b, c):
    cf = "fp16" if p.c_format == "fp16" else "fp32"
    return values(a, p.input_format), values(b, p.b_format), values(c, cf)


def run_case(env: dict, case: ModelCase, samples: int, tile: int, seed: int) -> dict:
    """Generate tiles, run the model, compare with every target; counts and the first reproducer per class."""
    tg = targets(case)
    p0 = tg[0][1]
    k = k_of(case, p0)
    ntiles = max(1, samples // (tile * tile))
    rng = np.random.default_rng([seed, sum(map(ord, case.name))])
    tiles = [gen_tile(p0.input_format, p0.c_format, tile, k, tile, FAMILIES[i % len(FAMILIES)], rng)
             for i in range(ntiles)]
    a, b, c = (np.stack([t[j] for t in tiles]) for j in range(3))
    t0 = time.perf_counter()
    raw = (Path(env["raw"]) / f"{case.model}_{case.fin}_{case.fout}_{len(a)}x{tile}_{seed}_{env['commit'][:7]}.npz"
           if env.get("raw") else None)
    if raw is not None and raw.exists():  # the toolbox's outputs of an earlier run of the same tiles
        z = np.load(raw, allow_pickle=False)
        assert all(np.array_equal(z[x], y) for x, y in (("a", a), ("b", b), ("c", c))), raw
        d, raised, info = z["d"], z["raised"], json.loads(str(z["info"]))
    else:
        d, raised, info = run_with_fallback(env["toolbox"], case.model, TB_FORMAT[case.fin], case.fout,
                                            *_vals(p0, a, b, c), env["workers"], env["extra"], case.model in AMD)
        if raw is not None:
            raw.parent.mkdir(parents=True, exist_ok=True)
            np.savez_compressed(raw, a=a, b=b, c=c, d=d, raised=raised, info=np.array(json.dumps(info)))
    row = {"case": case.name, "model": case.model, "k": k, "samples": int(d.size),
           "octave_s": time.perf_counter() - t0, **info, "targets": []}
    for label, p in tg:
        fo = "fp16" if p.c_format == "fp16" else ("e8m13" if p.output_format == "e8m13" else "fp32")
        tb_bits, tb_ok = out_bits(d, fo)
        mine = tcemu_tile(p, a, b, c)
        cls = classify(case, p, a, b, c, d, tb_bits, tb_ok, raised, mine, _fp32_block(case))
        cls = _variant_class(cls, tg, p, a, b, c, tb_bits, tb_ok)
        row["targets"].append({"target": label, "preset": p.label, "describe": p.describe(),
                               "agree": int((cls == "").sum()), "classes": _classes(cls, a, b, c, d, mine)})
    return row


def _fp32_block(case):
    from tcemu.numerics import get_preset

    if case.model != "B200TC" or case.fout != "fp16" or case.fin not in ("e4m3", "e5m2"):
        return None
    return get_preset("b200", "tcgen05", case.fin, "fp32", variant="toolbox")
def _variant_class(cls, tg, p, a, b, c, tb_bits, tb_ok):
    """For a target other than the first: outputs where the first target (the toolbox's choices) reproduces the
    toolbox are the toolbox's choice that this target does not take."""
    first = tg[0][1]
    if p == first or not (cls == UNEXPLAINED).any():
        return cls
    alt = tcemu_tile(first, a, b, c)
    hit = (cls == UNEXPLAINED) & (alt == tb_bits) & tb_ok
    cls[hit] = f"the toolbox's choice ({fields_differ(p, first)})"
    return cls


def _hexbits(x) -> list[str]:
    return [f"0x{int(v):x}" for v in np.asarray(x).ravel()]


def _classes(cls, a, b, c, d, mine) -> dict:
    out = {}
    for name in sorted({x for x in cls.ravel() if x}):
        t, i, j = np.argwhere(cls == name)[0]
        out[name] = {"count": int((cls == name).sum()),
                     "repro": {"a": _hexbits(a[t, i]), "b": _hexbits(b[t, :, j]), "c": _hexbits(c[t, i, j]),
                               "toolbox": repr(float(d[t, i, j])), "tcemu": f"0x{int(mine[t, i, j]):x}"}}
    return out


def run_wrappers(env: dict, tile: int, seed: int) -> list[dict]:
    """One tile through each wrapper (as shipped) and through the model it wraps: equal, or the error."""
    out = []
    for wrapper, (inner, fin, fout) in WRAPPERS.items():
        case = next(mc for mc in MODEL_CASES if mc.model == inner and mc.fin == fin and mc.fout == fout)
        p = targets(case)[0][1]
        rng = np.random.default_rng([seed, 7])
        tile_bits = [x[None] for x in gen_tile(p.input_format, p.c_format, tile, k_of(case, p), tile, "normal", rng)]
        vals = _vals(p, *tile_bits)
        amd = inner in AMD

        def go(model, extra, compat, vals=vals, fin=fin, fout=fout):
            return run_batches(env["toolbox"], model, TB_FORMAT[fin], fout, *vals, 1, extra, compat)

        w, m = go(wrapper, None, amd), go(inner, env["extra"], amd)
        same = not w.raised.any() and np.array_equal(w.d, m.d, equal_nan=True)
        note = "same outputs" if same else (f"raises: {w.message.splitlines()[0]}" if w.raised.any() else
                                            f"differs in {int((w.d != m.d).sum())} of {w.d.size} outputs")
        if w.raised.any() and env["extra"] is not None and inner in env["deleted"]:
            again = go(wrapper, env["extra"], amd)
            same2 = not again.raised.any() and np.array_equal(again.d, m.d, equal_nan=True)
            note += f"; with {inner}.m from before its deletion on the path: " + ("same outputs" if same2 else "differs")
        if wrapper == "A2TC" and not same:
            note += "; A2TC.m calls A100TC(alpha, A, B, C, beta, ...): C and beta swapped"
        if wrapper == "B200TCRN":  # its own model (RNE D), no tcemu preset: against B200's with RNE D
            q = replace(p, output_rounding=Rounding.RNE)
            agree = int((out_bits(w.d, "fp32")[0] == tcemu_tile(q, *tile_bits)).sum())
            note += f" (B200TCRN is B200TC with RNE D); tcemu b200 toolbox preset with RNE D: {agree} agree"
        out.append({"wrapper": wrapper, "inner": inner, "formats": f"{fin}->{fout}", "note": note})
    for model in AMD:  # the AMD models as shipped, without the MATLAB shims
        case = next(mc for mc in MODEL_CASES if mc.model == model)
        p = targets(case)[0][1]
        rng = np.random.default_rng([seed, 8])
        vals = _vals(p, *(x[None] for x in gen_tile(p.input_format, p.c_format, tile, k_of(case, p), tile, "finite",
                                                    rng)))
        bare, shim = (run_batches(env["toolbox"], model, TB_FORMAT[case.fin], case.fout, *vals, 1, env["extra"], x)
                      for x in (False, True))
        note = (f"raises without the shims: {bare.message.splitlines()[0]}" if bare.raised.any() else
                f"runs without the shims; differs from the run with them in {int((bare.d != shim.d).sum())} of "
                f"{bare.d.size} outputs")
        out.append({"wrapper": model, "inner": "as shipped", "formats": f"{case.fin}->{case.fout}", "note": note})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--toolbox-git", required=True, help="bare git dir of north-numerical-computing/MATLAB-tensor-core")
    ap.add_argument("--rev", default="HEAD")
    ap.add_argument("--samples", type=int, default=16384, help="dot products per model case (whole tiles)")
    ap.add_argument("--tile", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--cases", default="", help="comma-separated substrings of case names to run, e.g. 'H100TC e4m3' "
                                                "or 'B200 e4m3_fp32' (default: all)")
    ap.add_argument("--no-hw", action="store_true", help="skip part (a)")
    ap.add_argument("--no-models", action="store_true", help="skip part (b)")
    ap.add_argument("--raw", default="", help="folder for the toolbox's outputs per model case (npz): kept, and "
                                              "reused instead of Octave when a later run has the same tiles")
    ap.add_argument("--out", default="benchmarks/results/cpu/numerics/toolbox_diff.csv")
    args = ap.parse_args(argv)
    tmp = tempfile.TemporaryDirectory(prefix="toolbox_")
    toolbox, extra, meta = checkout(args.toolbox_git, args.rev, Path(tmp.name))
    env = {"toolbox": toolbox, "extra": extra, "workers": args.workers, "deleted": meta["deleted"], "raw": args.raw,
           "commit": meta["toolbox_commit"]}
    meta.update(octave=octave_version(), machine=f"{platform.machine()}, {_cpu()}", command=" ".join(sys.argv))
    t0 = time.perf_counter()
    picks = [s for s in args.cases.split(",") if s]
    hw = [] if args.no_hw else hardware_part(env, picks)
    rows = []
    if not args.no_models:
        for case in MODEL_CASES:
            if picks and not any(s in case.name for s in picks):
                continue
            rows.append(run_case(env, case, args.samples, args.tile, args.seed))
            print(f"{case.name}: {rows[-1]['octave_s']:.0f} s", file=sys.stderr)
        meta["wrappers"] = run_wrappers(env, args.tile, args.seed) if not picks else []
    meta["wall_s"] = time.perf_counter() - t0
    meta["octave_cpu_s"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
    from _toolbox_report import write

    write(Path(args.out), hw, rows, meta)
    return 0


def checkout(git_dir: str, rev: str, dest: Path) -> tuple[Path, Path, dict]:
    """Extract the toolbox at ``rev`` into dest/toolbox, and each model it calls but deleted (MI300MC) from the
    commit before its deletion into dest/extra; the commits for the report."""
    git = ["git", f"--git-dir={git_dir}"]
    commit = subprocess.run(git + ["rev-parse", rev], capture_output=True, text=True, check=True).stdout.strip()
    (dest / "toolbox").mkdir()
    archive = subprocess.run(git + ["archive", commit], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest / "toolbox")], input=archive, check=True)
    (dest / "extra").mkdir()
    meta = {"toolbox_commit": commit, "deleted": {}}
    for name in ("MI300MC",):
        if (dest / "toolbox" / "models" / f"{name}.m").exists():
            continue
        gone = subprocess.run(git + ["log", "-n1", "--diff-filter=D", "--format=%H", commit, "--",
                                     f"models/{name}.m"], capture_output=True, text=True, check=True).stdout.strip()
        text = subprocess.run(git + ["show", f"{gone}^:models/{name}.m"], capture_output=True, check=True).stdout
        (dest / "extra" / f"{name}.m").write_bytes(text)
        meta["deleted"][name] = {"deleted_at": gone[:7], "taken_from": f"{gone[:7]}^"}
    return dest / "toolbox", dest / "extra", meta


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


if __name__ == "__main__":
    raise SystemExit(main())
