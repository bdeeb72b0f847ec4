"""Whether an emulated GEMM pays: the small-shape decision per (GPU, method, role, M, N, K).

An emulated product is faster than cuBLAS SGEMM only from some row count M up, and that count differs by shape
and GPU: on an H200 at M = 7,680 TF32x3 ran 0.37x SGEMM at (K, N) = (256, 1024) and 1.44-1.59x on other shapes of
the same FLOP count (benchmarks/results/h200/gemm/small_shape_threshold.csv). So the decision is a measured
table, one per GPU model (``data/*.json``, written by ``benchmarks/gemm_decision.py``):

* a **curve** per (method, role, N, K): the GPU time of SGEMM and of the emulated call at a grid of M, each as
  (p20, p50, p80) over interleaved repeats;
* its **row threshold**: the smallest M from which the emulation runs faster at every measured point, counted
  conservatively: SGEMM's p20 over the emulation's p80 must reach ``1 + margin``. Between the last slower and
  the first faster grid point the threshold is interpolated in log M; below the smallest measured M nothing is
  assumed (SGEMM); above the largest the last verdict holds. A product runs emulated iff ``M >= threshold``,
  which is monotone in M (``ops.sgemm_row_limit`` bisects it);
* an unmeasured (N, K) takes the nearest measured pair of the same method and role within a factor of 2 in
  N and in K, its threshold kept in rows or in FLOPs, whichever is larger (conservative both ways);
* a GPU without a table, a method or shape with no curve near it: the FLOP rule, ``2 M N K >=
  small_shape_min_flops`` (the former rule: 6 GFLOP, measured on the H200).

Roles: ``fwd`` is ``a @ W^T`` with W (N, K) row-major (``linear``); ``bwd_input`` is ``a @ B`` with B (K, N)
row-major (``linear_input_grad`` and ``matmul``). The emulated kernels are the same for both (B's pieces are
(N, K) either way); cuBLAS runs the two layouts at different speeds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["FORMAT", "NEVER", "ROLES", "Curve", "DecisionTable", "Point", "flop_threshold", "row_threshold",
           "shipped_tables"]

#: the ``format`` of a table file
FORMAT = "tcemu-gemm-decision/1"
#: the product layouts a curve is measured for (module docstring)
ROLES = ("fwd", "bwd_input")
#: a row threshold no product reaches: never emulated
NEVER = 1 << 62
#: how far (as a factor, in N and in K each) a measured (N, K) may lie from an unmeasured one and stand for it
NEAREST_FACTOR = 2.0


def flop_threshold(N: int, K: int, min_flops: float) -> int:
    """The smallest M with ``2 M N K >= min_flops`` (the FLOP rule as a row threshold); NEVER for an empty
    product when ``min_flops > 0``."""
    if min_flops <= 0:
        return 0
    per_row = 2.0 * N * K
    if per_row <= 0:
        return NEVER
    m = max(0, math.ceil(min_flops / per_row))
    while m > 0 and 2.0 * (m - 1) * N * K >= min_flops:  # float rounding of the division, either way
        m -= 1
    while 2.0 * m * N * K < min_flops:
        m += 1
    return min(m, NEVER)


@dataclass(frozen=True)
class Point:
    """One measured row count: GPU milliseconds of SGEMM and of the emulated call, each (p20, p50, p80)."""

    M: int
    sgemm_ms: tuple[float, float, float]
    emu_ms: tuple[float, float, float]

    def conservative_speedup(self) -> float:
        """SGEMM's p20 over the emulation's p80: the speedup the spread of the repeats cannot undercut."""
        return self.sgemm_ms[0] / self.emu_ms[2] if self.emu_ms[2] > 0 else 0.0


@dataclass(frozen=True)
class Curve:
    """The measured points of one (method, role, N, K), by increasing M."""

    method: str
    role: str
    N: int
    K: int
    points: tuple[Point, ...]

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"tcemu decision table: role {self.role!r} is not one of {', '.join(ROLES)}")
        if not self.points:
            raise ValueError(f"tcemu decision table: {self.method} {self.role} N={self.N} K={self.K} has no points")
        if any(b.M <= a.M for a, b in zip(self.points, self.points[1:])):
            raise ValueError(f"tcemu decision table: {self.method} {self.role} N={self.N} K={self.K}: the points' M "
                             "must increase")

    def row_threshold(self, margin: float) -> int:
        """The smallest M from which every measured point is faster emulated by ``1 + margin`` (conservative
        speedup); interpolated in log M between the last slower and the first faster point; the smallest
        measured M where all are faster; NEVER where the largest is not."""
        need = math.log1p(margin)
        s = [math.log(max(p.conservative_speedup(), 1e-300)) - need for p in self.points]
        slower = [i for i, v in enumerate(s) if v < 0]
        if not slower:
            return self.points[0].M
        j = slower[-1]
        if j == len(s) - 1:
            return NEVER
        lo, hi = self.points[j], self.points[j + 1]
        frac = -s[j] / (s[j + 1] - s[j])  # s[j] < 0 <= s[j + 1]
        m = math.exp(math.log(lo.M) + frac * (math.log(hi.M) - math.log(lo.M)))
        return int(min(max(math.ceil(m), lo.M + 1), hi.M))


def _quantiles(values: Any) -> tuple[float, float, float]:
    q = tuple(float(v) for v in values)
    if len(q) != 3 or not all(0 < v < math.inf for v in q):
        raise ValueError(f"a time must be (p20, p50, p80) in positive milliseconds, got {values!r}")
    return q  # type: ignore[return-value]


def _curve(entry: Mapping[str, Any]) -> Curve:
    pts = tuple(sorted((Point(int(p["M"]), _quantiles(p["sgemm_ms"]), _quantiles(p["emu_ms"]))
                        for p in entry["points"]), key=lambda p: p.M))
    return Curve(str(entry["method"]), str(entry["role"]), int(entry["N"]), int(entry["K"]), pts)


@dataclass(frozen=True)
class DecisionTable:
    """The measured curves of one GPU model (its ``torch.cuda.get_device_name``)."""

    device: str
    curves: Mapping[tuple[str, str, int, int], Curve]
    source: str = ""

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str = "") -> DecisionTable:
        """Read a table file's content (``FORMAT``); a clear ValueError names what is wrong."""
        if data.get("format") != FORMAT:
            raise ValueError(f"tcemu decision table {source or '(given)'}: format {data.get('format')!r} is not "
                             f"{FORMAT!r}; write it with benchmarks/gemm_decision.py")
        try:
            curves = {}
            for entry in data["curves"]:
                c = _curve(entry)
                curves[c.method, c.role, c.N, c.K] = c
            return cls(str(data["device"]), curves, source)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"tcemu decision table {source or '(given)'} is malformed ({type(exc).__name__}: "
                             f"{exc}); write it again with benchmarks/gemm_decision.py") from exc

    @classmethod
    def load(cls, path: str | Path) -> DecisionTable:
        """Read a table file; a missing or unreadable one is a one-line error that says what to do."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except OSError as exc:
            raise FileNotFoundError(f"tcemu decision table {path}: cannot read it ({exc.strerror or exc}); write one "
                                    "with benchmarks/gemm_decision.py, or unset TCEMU_SMALL_SHAPE_TABLE / "
                                    "small_shape_table") from exc
        except json.JSONDecodeError as exc:
            raise ValueError(f"tcemu decision table {path} is not JSON ({exc}); write it again with "
                             "benchmarks/gemm_decision.py") from exc
        return cls.from_json(data, str(path))

    def nearest(self, method: str, role: str, N: int, K: int) -> tuple[Curve, ...]:
        """The curve of (N, K), else the nearest measured ones (equally near in log N + log K) within
        ``NEAREST_FACTOR`` in N and in K; empty where none is near."""
        exact = self.curves.get((method, role, N, K))
        if exact is not None:
            return (exact,)
        if N <= 0 or K <= 0:
            return ()
        limit = math.log(NEAREST_FACTOR) + 1e-12
        near = []
        for (m, r, n, k), c in self.curves.items():
            if m == method and r == role:
                dn, dk = abs(math.log(n / N)), abs(math.log(k / K))
                if dn <= limit and dk <= limit:
                    near.append((dn + dk, c))
        if not near:
            return ()
        d = min(dist for dist, _ in near)
        return tuple(c for dist, c in near if dist <= d + 1e-12)

    def threshold(self, method: str, role: str, N: int, K: int, margin: float) -> int | None:
        """The row threshold of (method, role, N, K): measured, or transferred from the nearest measured
        (N', K') as the larger of its rows and its rows scaled by N' K' / (N K) (the largest over equally near
        ones); None where no curve is near."""
        out = None
        for c in self.nearest(method, role, N, K):
            t = c.row_threshold(margin)
            if (c.N, c.K) != (N, K) and t < NEVER:
                t = min(NEVER, max(t, math.ceil(t * (c.N * c.K) / (N * K))))
            out = t if out is None else max(out, t)
        return out


def shipped_tables() -> dict[str, DecisionTable]:
    """The tables in the package (``tcemu/emulation/gemm/data/*.json``), by GPU name."""
    out: dict[str, DecisionTable] = {}
    folder = resources.files("tcemu.emulation.gemm") / "data"
    if not folder.is_dir():
        return out
    for f in sorted(folder.iterdir(), key=lambda p: p.name):
        if f.name.endswith(".json"):
            t = DecisionTable.from_json(json.loads(f.read_text()), f"tcemu/emulation/gemm/data/{f.name}")
            out[t.device] = t
    return out


def row_threshold(tables: Iterable[DecisionTable], device_name: str, method: str, role: str, N: int, K: int,
                  margin: float, min_flops: float) -> tuple[int, str]:
    """(row threshold, what decided it) of a product on ``device_name``: the first of ``tables`` made on that GPU
    with a curve at or near (N, K), else the FLOP rule."""
    for t in tables:
        if t.device == device_name:
            thr = t.threshold(method, role, N, K, margin)
            if thr is not None:
                return thr, f"measured ({t.source or t.device})"
    return flop_threshold(N, K, min_flops), f"below {min_flops:.3g} FLOP"
