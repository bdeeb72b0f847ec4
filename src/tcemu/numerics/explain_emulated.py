"""The explain view of one output element of an emulated GEMM: the pieces, each instruction, each FP32 step.

:func:`explain_emulated` follows the twin's schedule for one row of A and one column of B: the pieces of every
nonzero input (exact values and bits), then K-tile by K-tile each step: an ``mma`` step shows its instruction
chain with :func:`tcemu.numerics.explain.explain` (every aligned addend, the bits truncated, the sum, the
rounding; or, with ``brief``, only its result), an FP32 step its operands, the exact value and the rounded
result. It ends with the result, the fast twin's result beside it (they must agree), the exact ``a . b`` and
the error.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .emulated import _ref_step, emulated_matmul_bits, piece_indices
from .explain import _POW, explain
from .oracle import oracle_dot, value_of
from .schedule import GemmSchedule, derive_schedule

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
    lines = [s.describe(), "", f"pieces (x = p0 + 2^-{s.shift} p1" + (f" + 2^-{2 * s.shift} p2" if s.n_pieces > 2
                                                                        else "") + f"; {fmt}):"]
    for kk in range(k):
        if a[0, kk] == 0 and b[kk, 0] == 0:
            continue
        ap = ", ".join(repr(value_of(cont(p[kk]), fmt)) for p in pa)
        bp = ", ".join(repr(value_of(cont(p[kk]), fmt)) for p in pb)
        lines.append(f"  k={kk:<4d} a={float(a[0, kk])!r:<22} -> [{ap}]   b={float(b[kk, 0])!r:<22} -> [{bp}]")
    lines.append("  (other k: a and b zero; K padded with zeros to the K-tile)")
    regs = {name: 0 for name in s.registers}
    for k0 in range(0, kp, s.bk):
        lines += ["", f"=== K-tile k {k0}..{k0 + s.bk - 1} ==="]
        for st in s.tile:
            if st.op != "mma":
                before = {x: regs[x] for x in st.srcs}
                regs[st.dst] = _ref_step(st, regs, s.shift, None)
                lines.append(f"{st}:  " + ", ".join(f"{x} = {_show(v)}" for x, v in before.items())
                             + f"  ->  {st.dst} = {_show(regs[st.dst])}")
                continue
            i, j = st.product
            ab = [cont(x) for x in pa[i][k0:k0 + s.bk]]
            bb = [cont(x) for x in pb[j][k0:k0 + s.bk]]
            cin = regs[st.srcs[0]] if st.srcs else 0
            new = oracle_dot(ab, bb, cin, s.params)
            lines.append(f"{st}:  c in = {_show(cin)}  ->  {st.dst} = {_show(new)}")
            if not brief and (any(x for x in ab) and any(x for x in bb) or cin):
                lines += ["    " + x for x in explain(ab, bb, cin, s.params).splitlines()[1:]]
            regs[st.dst] = new
    lines += ["", "=== after the K loop ==="]
    for st in s.epilogue:
        before = {x: regs[x] for x in st.srcs}
        regs[st.dst] = _ref_step(st, regs, s.shift, None)
        lines.append(f"{st}:  " + ", ".join(f"{x} = {_show(v)}" for x, v in before.items())
                     + f"  ->  {st.dst} = {_show(regs[st.dst])}")
    res = regs["acc"]
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
