"""FP32 GEMM inputs and the plan of the emulated-GEMM validation (``tcemu validate --emulation``).

``gemm_inputs(family, M, K, N, rng) -> (a, b)`` float32. Families:

- ``normal``: N(0, 1).
- ``wide``: signed, log-uniform magnitudes over 2^-20..2^20 (wide exponent spread within a row and a column).
- ``cancel``: N(0, 1) with exact cancellations along K (half of the pairs k = 2j, 2j + 1 cancel: a[:, 2j+1] =
  -a[:, 2j], b[2j+1] = b[2j]), so that the result is the residual of near-total cancellation.
- ``tiny``: a ~ N(0, 1) 2^-100, b ~ N(0, 1) 2^e with e in -40..-20: products in and below FP32's subnormal
  range (the roundings of 2^-s scalings and of the fused multiply-add, the c = 0 floor, the split of tiny values).
- ``huge``: a ~ N(0, 1) 2^e with e in 75..95, b ~ N(0, 1) 2^e with e in 0..20: results up to about 2^120,
  finite (the split's pieces near the top of the range, the levels' 2^-s scalings of large values).
- ``special``: normal entries with a few Inf, -Inf, NaN, -0, subnormal, FLT_MAX-sized values injected (sparse, so
  that most outputs stay finite): the non-finite paths (canonical NaN, Inf through L0, corrections set to 0,
  overflow to Inf).

:func:`plan` lays out the GEMMs: per (method, kernel family) random shapes (M, N multiples of 16 up to
``max_mn``, K from 16 up to ``k_max`` in the classes that decide a kernel's compiled variant: a multiple of the
K-tile, or not, and for the Triton kernel also K not 16-byte aligned), the families in turn, and the
configurations of each family in turn, until ``outputs`` output elements.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["GEMM_FAMILIES", "gemm_inputs", "GemmJob", "plan", "family_configs"]

GEMM_FAMILIES = ("normal", "wide", "cancel", "tiny", "huge", "special")
_FLT_MAX = float(np.finfo(np.float32).max)


def _signed_pow2(shape, lo: int, hi: int, rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal(shape) * np.ldexp(1.0, rng.integers(lo, hi + 1, shape))


def gemm_inputs(family: str, m: int, k: int, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """float32 a (m, k) and b (k, n) of a family (module docstring)."""
    if family == "normal":
        a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    elif family == "wide":
        def wide(shape):
            mag = np.exp2(rng.uniform(-20, 20, shape))
            return np.where(rng.random(shape) < 0.5, -mag, mag)
        a, b = wide((m, k)), wide((k, n))
    elif family == "cancel":
        a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        pairs = k // 2
        keep = rng.random(pairs) < 0.5
        j = np.nonzero(keep)[0] * 2
        a[:, j + 1] = -a[:, j]
        b[j + 1, :] = b[j, :]
    elif family == "tiny":
        a, b = rng.standard_normal((m, k)) * 2.0**-100, _signed_pow2((k, n), -40, -20, rng)
    elif family == "huge":
        a, b = _signed_pow2((m, k), 75, 95, rng), _signed_pow2((k, n), 0, 20, rng)
    elif family == "special":
        a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        values = np.array([np.inf, -np.inf, np.nan, -0.0, 2.0**-140, -(2.0**-130), _FLT_MAX, -_FLT_MAX / 3])
        for x in (a, b):
            cnt = max(4, x.size // 4000)
            idx = rng.integers(0, x.size, cnt)
            pick = rng.integers(0, values.size, cnt)
            pick[0] = rng.integers(0, 3)  # at least one Inf or NaN in each operand
            x.reshape(-1)[idx] = values[pick]
    else:
        raise ValueError(f"unknown family {family!r}; known: {', '.join(GEMM_FAMILIES)}")
    with np.errstate(over="ignore"):
        return a.astype(np.float32), b.astype(np.float32)


def family_configs(method: str, kernel: str) -> list[str]:
    """The configurations the validation runs for (method, kernel): the dispatcher's own candidates of that
    kernel (every bucket), or, where the dispatcher has none, its candidate of the nearest kernel forced into
    this one (e.g. BF16x6 ``gw`` from its ``pg``). BF16x9 has the Triton kernel only."""
    import importlib  # noqa: PLC0415

    em = importlib.import_module("tcemu.emulation.gemm.launch")
    from tcemu.emulation.methods import get_method  # noqa: PLC0415

    from ..schedule import kernel_family  # noqa: PLC0415

    spec = get_method(method)
    cands = list(dict.fromkeys(em.config_candidates(spec, 4096) + em.config_candidates(spec, 64)))
    if kernel == "triton":  # one of each (mode, A split beforehand or not) the dispatcher uses
        seen, out = set(), []
        for c in cands:
            if not c.wgmma and (c.mode, c.presplit) not in seen:
                seen.add((c.mode, c.presplit))
                out.append(str(c))
        return out
    if spec.name == "bf16x9":
        return []
    own = [str(c) for c in cands if c.wgmma and kernel_family(spec, c, "h200", 256)[0] == kernel]
    base = next(str(c) for c in cands if c.wgmma and c.presplit)  # e.g. 128x128x32w8s3m1pg / ...ptgw
    core = base[: base.index("m") + 2]  # "128x128x32w8s3m1"
    forced = {"g": [core + "g"], "pg": [core + "pg"], "gw": [core + "gw", core + "tgw"],
              "pgw": [core + "pgw", core + "ptgw"]}[kernel]
    return list(dict.fromkeys(own + forced))[:2]


@dataclass(frozen=True)
class GemmJob:
    """One GEMM of the validation: which kernel and configuration, the shape, the family, the input seed."""

    method: str
    kernel: str
    config: str
    family: str
    m: int
    k: int
    n: int
    seed: int
    replay: bool  # keep a 16 x 16 block of this GEMM for the replay set


def _k_class(kernel: str, rng: np.random.Generator) -> int:
    """0: K a multiple of the K-tile; 1: 16-byte aligned, not a multiple of 16; 2 (Triton kernel only: the Gluon
    kernels need 16-byte rows, else the launcher falls back): not aligned at all. Classes 1 and 2 are one compiled
    variant of the Triton kernel (Triton specialises K on divisibility by 16)."""
    return int(rng.integers(0, 2 if kernel != "triton" else 3))


def _k_of_class(cls: int, bk: int, piece_bytes: int, k_max: int, rng: np.random.Generator) -> int:
    if cls == 0:
        return int(bk * rng.integers(1, max(2, k_max // bk) + 1))
    if cls == 1:
        align = 16 // piece_bytes
        while True:
            k = int(align * rng.integers(2, k_max // align + 1))
            if k % 16:
                return k
    return int(rng.integers(17, k_max + 1)) | 1


def plan(methods, kernels, outputs: int, *, seed: int = 2026, k_max: int = 192, max_mn: int = 1024,
         families=GEMM_FAMILIES, replay_k_max: int = 128) -> list[GemmJob]:
    """The GEMMs of a validation run (module docstring); the first GEMM of each (method, kernel, family) has
    K <= ``replay_k_max`` and gives the replay block."""
    from tcemu.emulation.methods import get_method  # noqa: PLC0415

    jobs = []
    for mi, method in enumerate(methods):
        spec = get_method(method)
        piece_bytes = 2 if spec.piece_format == "bf16" else 4
        for ki, kernel in enumerate(kernels):
            configs = family_configs(method, kernel)
            if not configs:
                continue
            rng = np.random.default_rng([seed, mi, ki])
            done, i = 0, 0
            while done < outputs or i < len(families):  # at least one GEMM of each family
                fam = families[i % len(families)]
                cls = _k_class(kernel, rng)
                # the Triton kernel: every configuration in both compiled variants; the two-configuration Gluon
                # families: one variant each (the compile count is the GPU run's main fixed cost)
                pick = (i + i // len(families)) if kernel == "triton" else min(cls, 1)
                cfg = configs[pick % len(configs)]
                bk = int(cfg.split("x")[2].split("w")[0])
                first = i < len(families)
                k = _k_of_class(cls, bk, piece_bytes, replay_k_max if first else k_max, rng)
                m = 16 * int(rng.integers(1, max_mn // 16 + 1))
                n = 16 * int(rng.integers(1, max_mn // 16 + 1))
                jobs.append(GemmJob(spec.name, kernel, cfg, fam, m, k, n, int(rng.integers(0, 2**31)), first))
                done += m * n
                i += 1
    return jobs
