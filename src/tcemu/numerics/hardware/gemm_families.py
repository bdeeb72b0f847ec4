"""FP32 GEMM inputs and the plan of the emulated-GEMM validation (``tcemu validate --emulation``).

``gemm_inputs(family, M, K, N, rng) -> (a, b)`` float32. Families:

- ``normal``: N(0, 1).
- ``wide``: signed, log-uniform magnitudes over 2^-20..2^20 (wide exponent spread within a row and a column).
- ``cancel``: N(0, 1) with exact cancellations along K (half of the pairs k = 2j, 2j + 1 cancel: a[:, 2j+1] =
  -a[:, 2j], b[2j+1] = b[2j]), so that the result is the residual of near-total cancellation.
- ``tiny``: a ~ N(0, 1) 2^-100, b ~ N(0, 1) 2^e with e in -40..-20: products in and below FP32's subnormal
  range (the roundings of 2^-s scalings and of the fused multiply-add, the c = 0 floor, the split of tiny values).
- ``huge``: a ~ N(0, 1) 2^e with e in 75..95, b ~ N(0, 1) 2^e with e in 0..20: results up to about 2^120,
  finite (the split's pieces near the top of the range, the levels' 2^-s scalings of large values); and the top
  of the range (:func:`top_of_range`): a block of outputs (an eighth of the rows by an eighth of the columns)
  that sum 2 to 4 products of 2^127 .. 2^129 (partial sums and levels that overflow where the result is finite,
  results near FLT_MAX and past it), and one false overflow (:func:`false_overflow`), X X = 3.4028233e38 with
  X = 1.8446743e19 (finite; the high pieces round X up to 2^64, so an L0 tile from zero is Inf without the
  range fix-up). The range check marks those elements and the fix-up computes them.
- ``special``: normal entries with a few Inf, -Inf, NaN, -0, subnormal, FLT_MAX-sized values injected (sparse, so
  that most outputs stay finite), and one false overflow as in ``huge``: the non-finite paths (canonical NaN, Inf
  through L0, corrections set to 0, overflow to Inf) and the range fix-up.

Each top-of-range row, false overflow and special value has a copy in the first 16 rows of A and columns of B,
the block the replay set keeps.

:func:`plan` lays out the GEMMs: per (method, kernel family) random shapes (M, N multiples of 16 up to
``max_mn``, K from 16 up to ``k_max`` in the classes that decide a kernel's compiled variant: a multiple of the
K-tile, or not, and for the Triton kernel also K not 16-byte aligned), the families in turn, and the
configurations of each family in turn, until ``outputs`` output elements.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["GEMM_FAMILIES", "gemm_inputs", "top_of_range", "false_overflow", "GemmJob", "plan", "family_configs",
           "FIXUP_B"]

GEMM_FAMILIES = ("normal", "wide", "cancel", "tiny", "huge", "special")
_FLT_MAX = float(np.finfo(np.float32).max)
#: just below 2^64: X X = 3.4028233e38 < FLT_MAX, but X's TF32 and BF16 high pieces round up to 2^64
X_BELOW_2_64 = 1.8446743e19
#: what the range fix-up reads as B, alternated over a run's GEMMs: the FP32 b (emu_mm(..., b=)), or its pieces
FIXUP_B = ("fp32", "recombined")
#: rows (columns) that hold the cases meant for the replay block
_REPLAY_BLOCK = 16


def _signed_pow2(shape, lo: int, hi: int, rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal(shape) * np.ldexp(1.0, rng.integers(lo, hi + 1, shape))


def top_of_range(a: np.ndarray, b: np.ndarray, rng: np.random.Generator,
                 fraction: float = 0.125) -> tuple[np.ndarray, np.ndarray]:
    """A block of outputs at the top of the range, in place on float64 ``a`` (m, k) and ``b`` (k, n): rows R of A
    and columns C of B (each about ``fraction`` of them, one of each in the replay block) share 2 to 4 k whose
    entries are +-2^63.5 .. 2^64.5, so that each output of R x C sums that many products of 2^127 .. 2^129 with
    random signs: partial sums and correction levels that overflow where the result is finite (on N(0, 1) data
    about a third of these outputs come out finite, most of them Inf without the fix-up), results near FLT_MAX
    and past it. A's other rows are scaled down by 2^-60 at those k, so no other output grows. Returns
    (R, C)."""
    (m, k), n = a.shape, b.shape[1]

    def pick(size: int) -> np.ndarray:
        return np.union1d(np.nonzero(rng.random(size) < fraction)[0], [rng.integers(0, min(_REPLAY_BLOCK, size))])

    rows, cols = pick(m), pick(n)
    ks = rng.choice(k, size=min(k, int(rng.integers(2, 5))), replace=False)
    a[:, ks] *= 2.0**-60
    for x, index in ((a, np.ix_(rows, ks)), (b, np.ix_(ks, cols))):
        shape = (len(index[0].ravel()), len(index[1].ravel()))
        x[index] = rng.choice([-1.0, 1.0], shape) * np.exp2(rng.uniform(63.5, 64.5, shape))
    return rows, cols


def false_overflow(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> tuple[int, int]:
    """Make output (r, c) of float64 ``a`` @ ``b`` (r, c in the replay block) about +-X X = 3.4028233e38, finite,
    in place: a[r] scaled down by 2^-60 but a[r, k0] = +-X, b[k0, c] = X (A's column k0 scaled down by 2^-60
    too, so that no other output of column c grows). Returns (r, c)."""
    m, k = a.shape
    r, c, k0 = (int(rng.integers(0, min(_REPLAY_BLOCK, d))) for d in (m, b.shape[1], k))
    a[:, k0] *= 2.0**-60
    a[r] *= 2.0**-60
    a[r, k0] = X_BELOW_2_64 * rng.choice([-1.0, 1.0])
    b[k0, c] = X_BELOW_2_64
    return r, c


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
        top_of_range(a, b, rng)
        false_overflow(a, b, rng)
    elif family == "special":
        a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        false_overflow(a, b, rng)
        values = np.array([np.inf, -np.inf, np.nan, -0.0, 2.0**-140, -(2.0**-130), _FLT_MAX, -_FLT_MAX / 3])
        for x, (rows, cols) in ((a, (min(_REPLAY_BLOCK, m), k)), (b, (k, min(_REPLAY_BLOCK, n)))):
            cnt = max(4, x.size // 4000)
            idx = rng.integers(0, x.size, cnt)
            idx[1] = rng.integers(0, rows) * x.shape[1] + rng.integers(0, cols)  # one in the replay block
            pick = rng.integers(0, values.size, cnt)
            pick[:2] = rng.integers(0, 3, 2)  # at least one Inf or NaN in each operand, and in the block
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
    # the g kernel holds A's FP32 tile beside its pieces: with BF16's K-tile of 64 three stages need 262 KB of
    # shared memory on the H200 (227 KB there), so its forced configuration takes two
    core_g = core.replace("s3", "s2") if spec.piece_format == "bf16" else core
    forced = {"g": [core_g + "g"], "pg": [core + "pg"], "gw": [core + "gw", core + "tgw"],
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
    fixup_b: str = "fp32"  # what the range fix-up reads as B (FIXUP_B)


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
                fixup_b = FIXUP_B[(i + i // len(families)) % 2]  # each family both ways over two rounds
                jobs.append(GemmJob(spec.name, kernel, cfg, fam, m, k, n, int(rng.integers(0, 2**31)), first,
                                    fixup_b))
                done += m * n
                i += 1
    return jobs
