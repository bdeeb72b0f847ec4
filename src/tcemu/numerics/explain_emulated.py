"""The explain view of one output element of an emulated GEMM: the pieces, each instruction, each FP32 step.

:func:`explain_emulated` follows the twin's schedule for one row of A and one column of B: the pieces of every
nonzero input (exact values and bits), then K-tile by K-tile each step: an ``mma`` step shows its instruction
chain with :func:`tcemu.numerics.explain.explain` (every aligned addend, the bits truncated, the sum, the
rounding; or, with ``brief``, only its result), an FP32 step its operands, the exact value and the rounded
result. Where the kernel's range check marks the element (a non-finite result or level), the range fix-up's steps
follow, on A's row and B's column scaled by their powers of two. It ends with the result, the fast twin's result
beside it (they must agree), the exact ``a . b`` and the error.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .emulated import _ref_step, emulated_matmul_bits, piece_indices
from .explain import _POW, explain
from .oracle import oracle_dot, value_of
from .schedule import GemmSchedule, derive_schedule, zeroes_nonfinite

__all__ = ["explain_emulated", "parse_fp32_values"]


def parse_fp32_values(text: str) -> np.ndarray:
    """Comma-separated values (``1.5``, ``-2^-24``, ``1.5*2^-3``, hex floats, ``inf``, ``nan``, or bits
    ``0x3F800000`` / ``bits:0x...``), rounded to FP32 (nearest even); returns float32."""
    out = []
    for tok in (t.strip().lower() for t in text.split(",") if t.strip()):
        if tok.startswith("bits:") or (tok.startswith("0x") and "p" not in tok and "." not in tok):
            out.append(np.array([int(tok.removeprefix("bits:"), 16)], np.uint32).view(np.float32)[0])
            continue
        m = _POW.match(tok)
        if m:
            sign, mant, exp = m.groups()
            v = (float(mant) if mant else 1.0) * 2.0 ** int(exp) * (-1 if sign == "-" else 1)
        elif tok.lstrip("+-").startswith("0x"):
            v = float.fromhex(tok)
        else:
            v = float(tok)
        out.append(np.float32(v))
    return np.array(out, np.float32)


def _show(bits: int) -> str:
    v = value_of(bits, "fp32")
    return f"0x{bits:08X} ({v!r})"


def _trace(s: GemmSchedule, pa: list[list[int]], pb: list[list[int]], brief: bool, lines: list[str],
           exponents: tuple[int, int] | None = None) -> tuple[int, bool]:
    """Append each step of schedule ``s`` on the piece containers ``pa``, ``pb`` (zero-padded to its K-tile) to
    ``lines``; return (the result's bits, whether the range check marks it)."""
    regs = {name: 0 for name in s.registers}

    def nonfinite(bits: int) -> bool:
        return (bits & 0x7F800000) == 0x7F800000

    marked = False
    for k0 in range(0, len(pa[0]), s.bk):
        lines += ["", f"=== K-tile k {k0}..{k0 + s.bk - 1} ==="]
        for st in s.tile:
            if st.op != "mma":
                marked |= s.range_check and zeroes_nonfinite(st) and nonfinite(regs[st.srcs[0]])
                before = {x: regs[x] for x in st.srcs}
                regs[st.dst] = _ref_step(st, regs, s.shift, None)
                lines.append(f"{st}:  " + ", ".join(f"{x} = {_show(v)}" for x, v in before.items())
                             + f"  ->  {st.dst} = {_show(regs[st.dst])}")
                continue
            i, j = st.product
            ab, bb = pa[i][k0:k0 + s.bk], pb[j][k0:k0 + s.bk]
            cin = regs[st.srcs[0]] if st.srcs else 0
            new = oracle_dot(ab, bb, cin, s.params)
            lines.append(f"{st}:  c in = {_show(cin)}  ->  {st.dst} = {_show(new)}")
            if not brief and (any(x for x in ab) and any(x for x in bb) or cin):
                lines += ["    " + x for x in explain(ab, bb, cin, s.params).splitlines()[1:]]
            regs[st.dst] = new
    lines += ["", "=== after the K loop ==="]
    for st in s.epilogue:
        marked |= s.range_check and zeroes_nonfinite(st) and nonfinite(regs[st.srcs[0]])
        before = {x: regs[x] for x in st.srcs}
        regs[st.dst] = _ref_step(st, regs, s.shift, None, exponents)
        lines.append(f"{st}:  " + ", ".join(f"{x} = {_show(v)}" for x, v in before.items())
                     + f"  ->  {st.dst} = {_show(regs[st.dst])}")
    marked |= s.range_check and nonfinite(regs["acc"])  # (no bias here: the result is checked as it is)
    return regs["acc"], marked


def explain_emulated(a_row, b_col, method: str, *, arch: str = "h200", instruction: str | None = None,
                     config=None, schedule: GemmSchedule | None = None, shape: tuple[int, int] = (4096, 1024),
                     brief: bool = False) -> str:
    """Step-by-step account of ``a_row . b_col`` (float32, length K) as the kernel computes that output element.

    ``config`` (or ``schedule``) names the kernel; by default the dispatcher's choice for an (M, K, N) product
    with ``shape = (M, N)``.
    """
    a = np.asarray(a_row, np.float32).reshape(1, -1)
    b = np.asarray(b_col, np.float32).reshape(-1, 1)
    k = a.shape[1]
    if b.shape[0] != k:
        raise ValueError(f"a has {k} values, b has {b.shape[0]}")
    if schedule is None:
        schedule = derive_schedule(method, config, arch=arch, instruction=instruction, M=shape[0], N=shape[1], K=k)
    s = schedule
    kp = max(1, -(-k // s.bk)) * s.bk
    tf32 = s.piece_format == "tf32"
    pa = [np.pad(p[0].astype(np.uint32), (0, kp - k)) for p in piece_indices(a, method)]
    pb = [np.pad(p[:, 0].astype(np.uint32), (0, kp - k)) for p in piece_indices(b, method)]
    cont = (lambda x: int(x) << 13) if tf32 else int  # piece container bits (tf32: in an fp32 container)
    fmt = s.piece_format
    third = f" + 2^-{2 * s.shift} p2" if s.n_pieces > 2 else ""
    lines = [s.describe(fixup=False), "", f"pieces (x = p0 + 2^-{s.shift} p1{third}; {fmt}):"]
    for kk in range(k):
        if a[0, kk] == 0 and b[kk, 0] == 0:
            continue
        ap = ", ".join(repr(value_of(cont(p[kk]), fmt)) for p in pa)
        bp = ", ".join(repr(value_of(cont(p[kk]), fmt)) for p in pb)
        lines.append(f"  k={kk:<4d} a={float(a[0, kk])!r:<22} -> [{ap}]   b={float(b[kk, 0])!r:<22} -> [{bp}]")
    lines.append("  (other k: a and b zero; K padded with zeros to the K-tile)")
    res, marked = _trace(s, [[cont(x) for x in p] for p in pa], [[cont(x) for x in p] for p in pb], brief, lines)
    if marked and s.fixup is not None:
        from .emulated import _ref_fixup_operands  # noqa: PLC0415

        fa, fb, kr, lc = _ref_fixup_operands(s.fixup, a, b)
        lines += ["", f"=== range check: marked (a non-finite result or level); the range fix-up computes it again, "
                  f"A's row scaled by 2^-{int(kr[0])}, B's column by 2^-{int(lc[0])} ==="]
        lines += [s.fixup.describe()]
        res, _ = _trace(s.fixup, [[int(x) for x in p[0]] for p in fa], [[int(x) for x in p[:, 0]] for p in fb], brief,
                        lines, (int(kr[0]), int(lc[0])))
    fast = int(emulated_matmul_bits(a, b, method, schedule=s)[0, 0])
    lines += ["", f"result: {_show(res)}   fast twin: 0x{fast:08X}" + ("  (agrees)" if fast == res else
                                                                     "  (DISAGREES: please report)")]
    if np.all(np.isfinite(a)) and np.all(np.isfinite(b)) and math.isfinite(value_of(res, "fp32")):
        exact = sum((Fraction(float(x)) * Fraction(float(y)) for x, y in zip(a[0], b[:, 0])), Fraction(0))
        err = Fraction(value_of(res, "fp32")) - exact
        scale = sum((abs(Fraction(float(x)) * Fraction(float(y))) for x, y in zip(a[0], b[:, 0])), Fraction(0))
        rel = f"; |error| / (|a| . |b|) = {float(abs(err) / scale) / 2.0**-24:.3g} u" if scale else ""
        lines.append(f"exact a . b = {float(exact)!r}; result - exact = {float(err)!r}{rel}")
    return "\n".join(lines)
