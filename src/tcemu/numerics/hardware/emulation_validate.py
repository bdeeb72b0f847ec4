"""Validation of the emulated-GEMM twin against the GPU's own kernels, bit for bit (``tcemu validate --emulation``).

The main process runs tcemu's GEMMs (``emu_mm`` with explicit KernelConfigs: the Triton kernel and, on Hopper,
the Gluon kernels ``g``, ``pg``, ``gw``/``tgw``, ``pgw``/``ptgw``) on the GEMMs of
:func:`.gemm_families.plan`, and hands each output block with its inputs to a pool of CPU processes that compute
the twin (:mod:`tcemu.numerics.emulated`) and compare every element (NaN with NaN of any payload; payload
differences are counted apart). At most ``2 * workers`` blocks are in flight, so the GPU and the CPUs overlap.
Every GEMM is followed by the range fix-up, as ``emu_mm`` launches it (given FP32 b, or only b's pieces: the
plan alternates); the twin models it (``GemmSchedule.fixup``), and the summary counts the outputs that went
through it (``fixed``: the elements the kernel marked) and their mismatches (``fixed_mismatches``).

Kept: every mismatch up to ``max_saved`` per (method, kernel) as a one-output reproducer (a row of A, a column of
B, the configuration, the GPU's and the twin's bits), the first ``shrink`` of them reduced on the GPU
(:func:`shrink`: the 16 x 16 problem holding only that row and column, the shortest K prefix, then entries set to
zero while the mismatch persists); a 16 x 16 block of the first GEMM of each (method, kernel, family) as the
replay set (:func:`check_replay`, run by ``make test``); a summary JSON.

``TorchGemmRunner`` runs the kernels on a CUDA device; ``TwinGemmRunner`` is a stand-in that answers with the
twin (optionally perturbed), for dry runs and tests of this pipeline on a CPU.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass

import numpy as np

from ..schedule import KERNEL_FAMILIES
from .gemm_families import GEMM_FAMILIES, GemmJob, gemm_inputs, plan

__all__ = ["EmulationValidationConfig", "TorchGemmRunner", "TwinGemmRunner", "run_emulation_validation", "shrink",
           "check_replay", "REPLAY_PATH", "arch_of_capability"]

METHODS = ("tf32x3", "bf16x3", "bf16x6", "bf16x9")
REPLAY_PATH = os.path.join(os.path.dirname(__file__), "data", "h200_emulation_replay.npz")
_BLOCK_OUTPUTS = 1 << 17  # outputs per worker job


def arch_of_capability(major: int, minor: int = 0) -> str:
    """The preset architecture of a CUDA compute capability (sm_80 a100, sm_89 ada, sm_90 h200, sm_100 b200)."""
    table = {(8, 0): "a100", (8, 6): "a100", (8, 9): "ada", (9, 0): "h200", (10, 0): "b200"}
    if (major, minor) not in table:
        raise ValueError(f"no Tensor Core preset for sm_{major}{minor}; the twin knows {sorted(table)}")
    return table[major, minor]


@dataclass
class EmulationValidationConfig:
    methods: tuple[str, ...] = METHODS
    kernels: tuple[str, ...] = KERNEL_FAMILIES
    outputs: int = 4_000_000  # per (method, kernel): every (family, fix-up's B) of each; fits 4 minutes on the H200
    families: tuple[str, ...] = GEMM_FAMILIES
    k_max: int = 192  # sized for the H200 run: benchmarks/numerics_speed.py --twin
    max_mn: int = 1024
    workers: int = 0  # 0: cpu_count - 1
    seed: int = 2026
    max_saved: int = 2000  # mismatches kept per (method, kernel)
    shrink: int = 4  # mismatches per (method, kernel) reduced on the GPU
    progress: bool = True


class TorchGemmRunner:
    """``emu_mm`` on a torch device with an explicit configuration: ``run(method, config, a, b, fixup_b) -> (c,
    fell_back)`` with c float32 NumPy and ``fell_back`` True where a Gluon configuration ran the Triton kernel
    instead; ``fixup_b`` ``fp32`` passes FP32 b to ``emu_mm`` (its range fix-up reads it), ``recombined`` only
    b's pieces."""

    def __init__(self, device: str = "cuda"):
        import torch  # noqa: PLC0415

        self.torch = torch
        self.device = torch.device(device)
        self._arch = None  # read at first use: the validation's process pool is forked before CUDA starts here
        from tcemu._hw import interpreting  # noqa: PLC0415

        if self.device.type != "cuda" and not interpreting():
            raise ValueError("the emulated-GEMM validation needs a CUDA device; for a dry run on the CPU set "
                             "TRITON_INTERPRET=1 (the kernels' interpreter, slow: use small --outputs)")

    @property
    def arch(self) -> str:
        if self._arch is None:
            if self.device.type == "cuda":
                from tcemu._hw import capability  # noqa: PLC0415

                self._arch = arch_of_capability(*capability(self.device))
            else:  # the CPU under TRITON_INTERPRET=1 (a dry run of this pipeline): tl.dot by the H200's model
                self._arch = "h200"
        return self._arch

    def info(self) -> dict:
        import triton  # noqa: PLC0415

        from ..schedule import fp_fusion_enabled  # noqa: PLC0415

        # the interpreter's NumPy arithmetic contracts nothing
        out = {"device": str(self.device), "arch": self.arch, "triton": triton.__version__,
               "fp_fusion": fp_fusion_enabled() if self.device.type == "cuda" else False}
        try:
            from tcemu._hw import versions  # noqa: PLC0415

            out.update({k: v for k, v in versions().items() if isinstance(v, (str, int, float, bool))})
        except Exception:  # noqa: BLE001 - versions are informative only
            pass
        if self.device.type == "cuda":
            out["gpu"] = self.torch.cuda.get_device_name(self.device)
            from tcemu._hw import sm_count  # noqa: PLC0415

            out["sm_count"] = sm_count(self.device)
        return out

    def run(self, method: str, config: str, a: np.ndarray, b: np.ndarray,
            fixup_b: str = "fp32") -> tuple[np.ndarray, bool]:
        import importlib  # noqa: PLC0415

        em = importlib.import_module("tcemu.emulation.gemm.launch")
        t = self.torch
        at = t.from_numpy(a).to(self.device)
        with contextlib.ExitStack() as stack:
            if self.device.type != "cuda":
                from tcemu.emulation.methods import get_method  # noqa: PLC0415

                from .interpret_dot import tensor_core_dot  # noqa: PLC0415

                stack.enter_context(tensor_core_dot(get_method(method).piece_format, self.arch))
            bd = t.from_numpy(b).to(self.device)
            c = em.emu_mm(at, em.split_t(bd, method), method, config=em.KernelConfig.parse(config),
                          b=bd.mT if fixup_b == "fp32" else None)
            out = c.cpu().numpy()
        return out, (method, config) in em._WGMMA_FAILED


class TwinGemmRunner:
    """A stand-in GPU that answers with the twin itself; ``perturb(method, config, a, b, bits) -> bits`` makes it
    differ (tests of the mismatch and shrink paths)."""

    def __init__(self, arch: str = "h200", perturb=None, fp_fusion: bool = True):
        self.arch, self.perturb, self.fp_fusion = arch, perturb, fp_fusion

    def info(self) -> dict:
        return {"device": "twin (no GPU)", "arch": self.arch, "fp_fusion": self.fp_fusion}

    def run(self, method: str, config: str, a: np.ndarray, b: np.ndarray,
            fixup_b: str = "fp32") -> tuple[np.ndarray, bool]:
        bits = _twin_bits(method, config, self.arch, self.fp_fusion, a, b, fixup_b)[0]
        if self.perturb is not None:
            bits = self.perturb(method, config, a, b, bits)
        return bits.view(np.float32), False


def _twin_bits(method, config, arch, fp_fusion, a, b, fixup_b="fp32"):
    """(bits, fixed) of the twin of a @ b under the kernel's schedule for this K, with its range fix-up."""
    from ..emulated import run_gemm  # noqa: PLC0415
    from ..schedule import derive_schedule  # noqa: PLC0415

    s = derive_schedule(method, config, arch=arch, K=a.shape[1], fp_fusion=fp_fusion, fixup_b=fixup_b)
    return run_gemm(s, a, b)


def _compare(gpu: np.ndarray, twin: np.ndarray) -> tuple[np.ndarray, int]:
    """(mismatch mask, NaN payload differences): NaN matches NaN of any payload, except the range check's mark
    (an element the fix-up did not compute) on the GPU, which always mismatches."""
    from tcemu.emulation.gemm.range_fixup import RANGE_MARK_BITS  # noqa: PLC0415

    gn, tn = np.isnan(gpu.view(np.float32)), np.isnan(twin.view(np.float32))
    differ = gpu.view(np.uint32) != twin.view(np.uint32)
    left = gpu.view(np.uint32) == RANGE_MARK_BITS
    return (differ & ~(gn & tn)) | left, int(np.count_nonzero(differ & gn & tn & ~left))


def _check(job):
    """Worker: the twin of one block of rows, compared with the GPU's bits."""
    import torch  # noqa: PLC0415

    torch.set_num_threads(1)
    (key, j, r0, a_blk, b, c_blk, arch, fp_fusion, max_saved) = job
    t0 = time.process_time()
    err = None
    try:
        twin, fixed = _twin_bits(j.method, j.config, arch, fp_fusion, a_blk, b, j.fixup_b)
    except Exception as exc:  # noqa: BLE001 - a twin crash is a validation failure, reported
        twin, fixed = np.zeros_like(c_blk.view(np.uint32)), np.zeros(c_blk.shape, bool)
        err = f"{type(exc).__name__}: {exc}"
    dt = time.process_time() - t0
    bad, payload = _compare(c_blk.view(np.uint32), twin)
    idx = np.argwhere(bad)[:max_saved]
    mm = [(int(r0 + r), int(c), a_blk[r].copy(), b[:, c].copy(), int(c_blk.view(np.uint32)[r, c]),
           int(twin[r, c]), j.fixup_b, bool(fixed[r, c])) for r, c in idx]
    return {"key": key, "family": j.family, "config": j.config, "outputs": int(c_blk.size),
            "mismatches": int(bad.sum()), "payload": payload, "fixed": int(fixed.sum()),
            "fixed_finite": int((fixed & np.isfinite(twin.view(np.float32))).sum()),
            "fixed_mismatches": int((bad & fixed).sum()), "seconds": dt, "error": err, "mm": mm}


def shrink(runner, method: str, config: str, a_row: np.ndarray, b_col: np.ndarray, arch: str,
           fp_fusion: bool, fixup_b: str = "fp32") -> dict:
    """Reduce a one-output mismatch on the GPU: the 16 x 16 problem with only this row of A and column of B, the
    shortest K prefix that still mismatches (in steps that keep a Gluon kernel's 16-byte rows), then each entry
    set to zero where the mismatch persists. Returns the reproducer and whether each stage kept the mismatch."""
    from tcemu.emulation.methods import get_method  # noqa: PLC0415

    step = 16 // (2 if get_method(method).piece_format == "bf16" else 4)
    launches = 0

    def differs(ar, bc):
        nonlocal launches
        k = ar.size
        a = np.zeros((16, k), np.float32)
        b = np.zeros((k, 16), np.float32)
        a[0], b[:, 0] = ar, bc
        gpu, _ = runner.run(method, config, a, b, fixup_b)
        launches += 1
        twin = _twin_bits(method, config, arch, fp_fusion, a[:1], b[:, :1], fixup_b)[0]
        g = gpu.view(np.uint32)[:1, :1]
        return bool(_compare(g, twin)[0][0, 0]), int(g[0, 0]), int(twin[0, 0])

    ar, bc = a_row.astype(np.float32).copy(), b_col.astype(np.float32).copy()
    bad, g, t = differs(ar, bc)
    out = {"method": method, "config": config, "fixup_b": fixup_b, "k_full": int(ar.size), "in_16x16": bad}
    if bad:
        for k in range(step, ar.size, step):
            bad_k, g_k, t_k = differs(ar[:k].copy(), bc[:k].copy())
            if bad_k:
                ar, bc, g, t = ar[:k].copy(), bc[:k].copy(), g_k, t_k
                break
        for k in range(ar.size):
            if ar[k] == 0 and bc[k] == 0:
                continue
            a2, b2 = ar.copy(), bc.copy()
            a2[k] = b2[k] = 0
            bad_k, g_k, t_k = differs(a2, b2)
            if bad_k:
                ar, bc, g, t = a2, b2, g_k, t_k
    out.update({"k": int(ar.size), "a": ar, "b": bc, "gpu": g, "twin": t, "launches": launches})
    return out


def run_emulation_validation(runner, cfg: EmulationValidationConfig, out_dir: str, log=print,
                             prefix: str = "h200_emulation") -> dict:
    """Every GEMM of the plan on ``runner``, compared with the twin; writes ``<prefix>_summary.json``,
    ``<prefix>_mismatches.npz`` and ``<prefix>_replay.npz`` under ``out_dir``."""
    os.makedirs(out_dir, exist_ok=True)
    jobs = plan(cfg.methods, cfg.kernels, cfg.outputs, seed=cfg.seed, k_max=cfg.k_max, max_mn=cfg.max_mn,
                families=cfg.families)
    workers = cfg.workers or max(1, (os.cpu_count() or 2) - 1)
    pool = mp.get_context("fork").Pool(workers)  # forked before the GPU is touched in this process
    info = runner.info()
    arch, fp_fusion = info["arch"], bool(info.get("fp_fusion", True))
    inflight = threading.BoundedSemaphore(2 * workers)
    results: dict[str, dict] = {}
    mismatches: dict[str, list] = {}
    replay: dict[str, dict] = {}
    gpu_seconds = [0.0]
    total = sum(j.m * j.n for j in jobs)
    try:
        from tqdm import tqdm  # noqa: PLC0415

        bar = tqdm(total=total, unit="output", unit_scale=True, mininterval=10, file=sys.stdout,
                   disable=not cfg.progress)
    except ImportError:  # pragma: no cover
        bar = None

    def blocks():
        for j in jobs:
            key = f"{j.method}__{j.kernel}"
            a, b = gemm_inputs(j.family, j.m, j.k, j.n, np.random.default_rng(j.seed))
            t0 = time.perf_counter()
            c, fell_back = runner.run(j.method, j.config, a, b, j.fixup_b)
            gpu_seconds[0] += time.perf_counter() - t0
            r = results.setdefault(key, _new_result(j))
            r["gemms"] += 1
            r["fell_back"] += int(fell_back)
            r["k_range"] = [min(r["k_range"][0], j.k), max(r["k_range"][1], j.k)]
            if j.replay:
                replay[f"{key}__{j.family}"] = {"a": a[:16].copy(), "b": b[:, :16].copy(),
                                                "c": c[:16, :16].view(np.uint32).copy(), "config": j.config,
                                                "fixup_b": j.fixup_b}
            rows = max(1, _BLOCK_OUTPUTS // j.n)
            for r0 in range(0, j.m, rows):
                inflight.acquire()
                yield (key, j, r0, a[r0:r0 + rows], b, c[r0:r0 + rows], arch, fp_fusion, cfg.max_saved)

    t_start = time.perf_counter()
    try:
        for res in pool.imap_unordered(_check, blocks()):
            inflight.release()
            r = results[res["key"]]
            r["outputs"] += res["outputs"]
            r["mismatches"] += res["mismatches"]
            r["nan_payload_differences"] += res["payload"]
            r["twin_cpu_seconds"] += res["seconds"]
            f = r["families"].setdefault(res["family"], {"outputs": 0, "mismatches": 0, "fixed": 0,
                                                         "fixed_finite": 0, "fixed_mismatches": 0})
            for field in ("fixed", "fixed_finite", "fixed_mismatches"):
                r[field] += res[field]
            for field in ("outputs", "mismatches", "fixed", "fixed_finite", "fixed_mismatches"):
                f[field] += res[field]
            r["configs"][res["config"]] = r["configs"].get(res["config"], 0) + res["outputs"]
            if res["error"] and len(r["errors"]) < 5:
                r["errors"].append(res["error"])
            lst = mismatches.setdefault(res["key"], [])
            lst.extend((res["config"], res["family"], *m) for m in res["mm"][: max(0, cfg.max_saved - len(lst))])
            if bar is not None:
                bar.update(res["outputs"])
    finally:
        pool.close()
        pool.join()
        if bar is not None:
            bar.close()
    elapsed = time.perf_counter() - t_start

    reproducers = []
    for key, lst in mismatches.items():
        method = key.split("__")[0]
        for config, _fam, _r, _c, a_row, b_col, _g, _t, fixup_b, _fixed in lst[: cfg.shrink]:
            try:
                reproducers.append(shrink(runner, method, config, a_row, b_col, arch, fp_fusion, fixup_b))
            except Exception as exc:  # noqa: BLE001 - a failed shrink leaves the full reproducer
                log(f"shrink {key} {config}: {type(exc).__name__}: {exc}")
    summary = _summary(results, info, cfg, workers, elapsed, gpu_seconds[0], jobs, reproducers, arch, fp_fusion)
    with open(os.path.join(out_dir, f"{prefix}_summary.json"), "w") as fh:
        json.dump(summary, fh, indent=1)
    _save_mismatches(os.path.join(out_dir, f"{prefix}_mismatches.npz"), mismatches, reproducers)
    _save_replay(os.path.join(out_dir, f"{prefix}_replay.npz"), replay, arch, fp_fusion)
    for key, r in summary["pairs"].items():
        log(f"{key:<16} {r['outputs']:>12,d} outputs {r['mismatches']:>9,d} mismatches  "
            f"({r['gemms']} GEMMs, K {r['k_range'][0]}-{r['k_range'][1]}, {r['fell_back']} fell back, "
            f"{r['fixed']:,d} through the range fix-up ({r['fixed_finite']:,d} finite, "
            f"{r['fixed_mismatches']:,d} mismatches), "
            f"{r['twin_outputs_per_cpu_second']:,.0f} twin outputs per CPU second)")
    log(f"total {summary['total_outputs']:,d} outputs, {summary['total_mismatches']:,d} mismatches, "
        f"{summary['total_fixed']:,d} through the range fix-up ({summary['total_fixed_mismatches']:,d} mismatches "
        f"there), {elapsed:.1f} s ({gpu_seconds[0]:.1f} s in the GPU runs, compiles included)")
    return summary


def _new_result(j: GemmJob) -> dict:
    return {"method": j.method, "kernel": j.kernel, "outputs": 0, "mismatches": 0, "nan_payload_differences": 0,
            "fixed": 0, "fixed_finite": 0, "fixed_mismatches": 0, "gemms": 0, "fell_back": 0, "k_range": [j.k, j.k],
            "families": {}, "configs": {}, "errors": [], "twin_cpu_seconds": 0.0}


def _summary(results, info, cfg, workers, elapsed, gpu_seconds, jobs, reproducers, arch, fp_fusion) -> dict:
    from ..schedule import derive_schedule  # noqa: PLC0415

    pairs = {}
    for key, r in results.items():
        r = dict(r)
        r["twin_outputs_per_cpu_second"] = r["outputs"] / r["twin_cpu_seconds"] if r["twin_cpu_seconds"] else 0.0
        r["schedules"] = {c: derive_schedule(r["method"], c, arch=arch, K=256, fp_fusion=fp_fusion).to_dict()
                          for c in r["configs"]}
        pairs[key] = r
    return {
        "device": info, "arch_preset": arch, "fp_fusion": fp_fusion, "config": asdict(cfg), "workers": workers,
        "seconds": elapsed, "gpu_seconds": gpu_seconds, "gemms": len(jobs),
        "total_outputs": sum(r["outputs"] for r in pairs.values()),
        "total_mismatches": sum(r["mismatches"] for r in pairs.values()),
        "total_fixed": sum(r["fixed"] for r in pairs.values()),
        "total_fixed_finite": sum(r["fixed_finite"] for r in pairs.values()),
        "total_fixed_mismatches": sum(r["fixed_mismatches"] for r in pairs.values()),
        "pairs": pairs,
        "reproducers": [{k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in rep.items()}
                        for rep in reproducers],
    }


def _save_mismatches(path: str, mismatches: dict, reproducers: list) -> None:
    arrays = {}
    for key, lst in mismatches.items():
        for i, (config, fam, r, c, a_row, b_col, g, t, fixup_b, fixed) in enumerate(lst):
            p = f"{key}__{i}"
            arrays[f"{p}__a"], arrays[f"{p}__b"] = a_row, b_col
            arrays[f"{p}__meta"] = np.array([config, fam, str(r), str(c), str(g), str(t), fixup_b, str(fixed)])
    for i, rep in enumerate(reproducers):
        arrays[f"min__{i}__a"], arrays[f"min__{i}__b"] = rep["a"], rep["b"]
        arrays[f"min__{i}__meta"] = np.array([rep["method"], rep["config"], str(rep["gpu"]), str(rep["twin"]),
                                              rep["fixup_b"]])
    np.savez_compressed(path, **arrays)


def _save_replay(path: str, replay: dict, arch: str, fp_fusion: bool) -> None:
    arrays = {"__meta__arch": np.array(arch), "__meta__fp_fusion": np.array(fp_fusion)}
    for group, d in replay.items():
        arrays[f"{group}__a"] = d["a"].view(np.uint32)
        arrays[f"{group}__b"] = d["b"].view(np.uint32)
        arrays[f"{group}__c"] = d["c"]
        arrays[f"{group}__config"] = np.array(d["config"])
        arrays[f"{group}__fixup_b"] = np.array(d["fixup_b"])
    np.savez_compressed(path, **arrays)


def check_replay(path: str = REPLAY_PATH) -> dict:
    """The twin on every stored block of GPU outputs: ``{"outputs", "mismatches", "groups": {group: {...}}}``.

    Each group ``<method>__<kernel>__<family>`` holds A's 16 rows (``__a``), B's 16 columns (``__b``), as uint32
    bits, the GPU's 16 x 16 output bits (``__c``), the configuration and what the range fix-up read as B
    (``__fixup_b``); the run's architecture and FP-fusion setting are in ``__meta__arch`` and
    ``__meta__fp_fusion``. ``fixed``: the outputs the twin computes by the fix-up."""
    z = np.load(path, allow_pickle=False)
    arch, fp_fusion = str(z["__meta__arch"]), bool(z["__meta__fp_fusion"])
    groups = sorted({k.rsplit("__", 1)[0] for k in z.files if not k.startswith("__meta__")})
    out = {"outputs": 0, "mismatches": 0, "fixed": 0, "groups": {}}
    for g in groups:
        method = g.split("__")[0]
        a, b, c = z[f"{g}__a"].view(np.float32), z[f"{g}__b"].view(np.float32), z[f"{g}__c"]
        twin, fixed = _twin_bits(method, str(z[f"{g}__config"]), arch, fp_fusion, a, b, str(z[f"{g}__fixup_b"]))
        bad, _ = _compare(c, twin)
        out["groups"][g] = {"outputs": int(c.size), "mismatches": int(bad.sum()), "fixed": int(fixed.sum()),
                            "k": int(a.shape[1])}
        out["outputs"] += int(c.size)
        out["mismatches"] += int(bad.sum())
        out["fixed"] += int(fixed.sum())
    return out
