"""Multi-word emulation across Tensor Core generations: the twin's error tables (``tcemu numerics emulation``).

For a method and an architecture's preset, :func:`error_table` runs the twin (:mod:`tcemu.numerics.emulated`,
the kernel the dispatcher picks for the shape, on that architecture's instruction) on random inputs of several
families and K, and measures against the FP64 product of the same FP32 inputs:

- the normwise error ``||C - C64||_F / ||C64||_F`` and the largest elementwise error relative to
  ``|A| |B|`` (in units of FP32's u = 2^-24), next to the same two numbers for an FP32 SGEMM of the same inputs
  (NumPy's float32 matmul on the host, an FMA-based blocked SGEMM);
- an adversarial search (:func:`adversarial`) for the largest elementwise error relative to ``|a| |b|`` of one
  dot product: populations of dot products evolved by mutation towards the split's rounding boundaries and
  towards cancellation, the best kept; reported beside the method's rigorous bound
  (:func:`tcemu.testing.elementwise_bound`) and FP32's error on the same inputs. A search finds a lower bound of
  the worst case, not the worst case.

Architectures whose kernels were not run here (A100, B200) are modelled with the kernel configuration the
dispatcher picks for the shape, run by the Triton kernel (the Gluon kernels are Hopper's), on the instruction
``tl.dot`` compiles to there (:data:`tcemu.numerics.schedule.KERNEL_INSTRUCTION`, from offline compiles).
"""

from __future__ import annotations

import numpy as np

from .emulated import run_gemm
from .schedule import GemmSchedule, derive_schedule

__all__ = ["error_table", "adversarial", "format_table", "U"]

U = 2.0**-24
FAMILIES = ("normal", "wide", "cancel", "tiny")


def _inputs(family: str, m: int, k: int, n: int, rng: np.random.Generator):
    from .hardware.gemm_families import gemm_inputs  # noqa: PLC0415

    return gemm_inputs(family, m, k, n, rng)


def _twin(schedule: GemmSchedule, method: str, a: np.ndarray, b: np.ndarray, diagonal: bool = False) -> np.ndarray:
    """The twin of a @ b, with the range fix-up (only the dot products a[i] . b[:, i] if ``diagonal``)."""
    rows = cols = np.arange(a.shape[0]) if diagonal else None
    return run_gemm(schedule, a, b, rows=rows, cols=cols)[0].view(np.float32)


def _errors(c: np.ndarray, c64: np.ndarray, scale: np.ndarray) -> tuple[float, float]:
    """(normwise error, max elementwise error / (|A||B|) in u) over the finite FP64 entries."""
    ok = np.isfinite(c64) & (scale > 0)
    d = c.astype(np.float64)[ok] - c64[ok]
    norm = np.linalg.norm(c64[ok])
    return float(np.linalg.norm(d) / norm) if norm else 0.0, float(np.max(np.abs(d) / scale[ok]) / U)


def error_table(method: str, arch: str, instruction: str | None = None, *, ks=(256, 4096),
                families=FAMILIES, size: int = 96, seed: int = 0, search: dict | None = None) -> dict:
    """The error statistics of ``method`` on ``arch`` (module docstring): one row per (family, K), and the
    adversarial search (``search``: keyword arguments of :func:`adversarial`; None for its defaults, False for
    none). Output ``size`` x ``size``, smaller for long K (the cost grows with K)."""
    rows = []
    for k in ks:
        m = n = size if k <= 1024 else max(16, size // 3)
        schedule = derive_schedule(method, arch=arch, instruction=instruction, M=4096, N=1024, K=k)
        for fi, fam in enumerate(families):
            rng = np.random.default_rng([seed, k, fi])
            a, b = _inputs(fam, m, k, n, rng)
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            c64, scale = a64 @ b64, np.abs(a64) @ np.abs(b64)
            nw, ew = _errors(_twin(schedule, method, a, b), c64, scale)
            nw32, ew32 = _errors(a @ b, c64, scale)
            rows.append({"family": fam, "k": k, "normwise": nw, "max_u": ew, "fp32_normwise": nw32,
                         "fp32_max_u": ew32, "config": schedule.config, "kernel": schedule.kernel})
    out = {"method": method, "arch": arch, "instruction": schedule.instruction, "model": schedule.params.label,
           "rows": rows}
    if search is not False:
        out["adversarial"] = adversarial(method, arch, instruction, **(search or {}))
    return out


def _mutate(a: np.ndarray, b: np.ndarray, shift: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """New candidates: a few entries each moved to the split's rounding boundaries (a value one residual unit
    above a piece's half-ulp), rescaled, or made to cancel the previous term."""
    a, b = a.copy(), b.copy()
    s, k = a.shape
    for x in (a, b.T):
        for _ in range(2):
            i = rng.integers(0, k, s)
            kind = rng.integers(0, 4, s)
            v = x[np.arange(s), i].astype(np.float64)
            sign = np.where(rng.random(s) < 0.5, -1.0, 1.0)
            e = np.floor(np.log2(np.maximum(np.abs(v), 1e-30)))
            tie = sign * 2.0**e * (1 + (2 * rng.integers(0, 2**(shift - 1), s) + 1) * 2.0 ** -(shift + 1)
                                   + rng.choice([-1.0, 1.0], s) * 2.0 ** -(2 * shift + 1))
            prev = x[np.arange(s), np.maximum(i - 1, 0)].astype(np.float64)
            new = np.select([kind == 0, kind == 1, kind == 2],
                            [tie, v * 2.0 ** rng.integers(-6, 7, s), -prev * (1 + rng.normal(0, 2.0**-12, s))],
                            rng.standard_normal(s))
            x[np.arange(s), i] = new.astype(np.float32)
    return a, b


def adversarial(method: str, arch: str, instruction: str | None = None, *, k: int = 64, population: int = 2048,
                generations: int = 40, seed: int = 0) -> dict:
    """The largest elementwise error relative to ``|a| |b|`` found for one dot product of length ``k`` (module
    docstring); returns it in u, the bound, FP32's error on the same inputs, and the worst inputs."""
    from tcemu.emulation.methods import get_method  # noqa: PLC0415
    from tcemu.testing import elementwise_bound  # noqa: PLC0415

    spec = get_method(method)
    schedule = derive_schedule(method, arch=arch, instruction=instruction, M=4096, N=1024, K=k)
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((population, k)).astype(np.float32)
    b = rng.standard_normal((k, population)).astype(np.float32)

    def score(a, b):
        c = _twin(schedule, method, a, b, diagonal=True).astype(np.float64)
        a64, b64 = a.astype(np.float64), b.T.astype(np.float64)
        exact = np.einsum("ij,ij->i", a64, b64)
        scale = np.einsum("ij,ij->i", np.abs(a64), np.abs(b64))
        with np.errstate(invalid="ignore", divide="ignore"):
            e = np.abs(c - exact) / scale
        return np.where(np.isfinite(e) & (scale > 0), e, 0.0)

    cur = score(a, b)
    for _ in range(generations):
        na, nb = _mutate(a, b, spec.shift, rng)
        new = score(na, nb)
        better = new > cur
        a[better], b[:, better], cur[better] = na[better], nb[:, better], new[better]
        order = np.argsort(cur)  # the worse half restarts from copies of the better half
        half = population // 2
        a[order[:half]], b[:, order[:half]], cur[order[:half]] = a[order[half:]], b[:, order[half:]], cur[order[half:]]
    best = int(np.argmax(cur))
    ab, bb = a[best].astype(np.float64), b[:, best].astype(np.float64)
    fp32 = float(np.float32(np.dot(a[best], b[:, best])))
    fp32_err = abs(fp32 - float(ab @ bb)) / float(np.abs(ab) @ np.abs(bb)) / U
    return {"k": k, "population": population, "generations": generations, "worst_u": float(cur[best] / U),
            "bound_u": elementwise_bound(spec, k) / U, "fp32_on_worst_u": fp32_err,
            "a": a[best].tolist(), "b": b[:, best].tolist()}


def format_table(t: dict) -> str:
    """Markdown: the rows of :func:`error_table`, then the adversarial line."""
    lines = [f"**{t['method']} on {t['arch']} {t['instruction']}** ({t['model']}; kernel "
             f"{t['rows'][0]['kernel']} {t['rows'][0]['config']})", "",
             "| family | K | normwise vs FP64 | FP32 SGEMM | ratio | max err / (abs A abs B) | FP32 SGEMM |",
             "|---|---|---|---|---|---|---|"]
    for r in t["rows"]:
        ratio = r["normwise"] / r["fp32_normwise"] if r["fp32_normwise"] else float("nan")
        lines.append(f"| {r['family']} | {r['k']} | {r['normwise']:.3g} | {r['fp32_normwise']:.3g} | {ratio:.2f} | "
                     f"{r['max_u']:.3g} u | {r['fp32_max_u']:.3g} u |")
    adv = t.get("adversarial")
    if adv:
        lines += ["", f"Adversarial search (K = {adv['k']}, {adv['generations']} generations of {adv['population']} "
                      f"dot products): worst found {adv['worst_u']:.3g} u of |a| |b| (rigorous bound "
                      f"{adv['bound_u']:.3g} u); FP32 on the same inputs {adv['fp32_on_worst_u']:.3g} u."]
    return "\n".join(lines)
