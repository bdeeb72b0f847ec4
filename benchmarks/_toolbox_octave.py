"""Runs the Khattak & Mikaitis toolbox's MATLAB models under GNU Octave in batches (helper of
benchmarks/toolbox_diff.py).

The toolbox is a throwaway checkout outside the repository (none of its code is part of tcemu). Each batch
writes the operands as float64 to a file in a temporary directory, generates a small driver ``.m`` there that
calls one model entry point (``H100TC(1, A, B, 1, C, informat, outformat)`` etc.) per tile or per row, runs
``octave --eval`` on it, and reads back the results (float64, as the models return them) and, per tile, whether
the model raised and its first error message. Without CPFloat on the path the models take the operands as
already rounded to their formats (GEMM.m says so), which they are here.

``compat=True`` puts three MATLAB built-ins that Octave 7 lacks or treats differently on the path first
(:data:`COMPAT_SHIMS`): ``string`` (MI100MC's exact accumulation indexes a string array of bit rows), ``fma``
(MI210MC's pairwise sums; only ``fma(x, 1, z)`` occurs, one rounding of x + z) and ``bitshift`` (MATLAB gives 0 for
a shift by the integer's width or more, and an empty result for empty operands; Octave shifts a uint64 by
``n mod 64`` and raises on empty shift lists).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "COMPAT_SHIMS",
    "Batch",
    "OctaveError",
    "call_signature",
    "octave_version",
    "run_batches",
    "run_model",
    "run_with_fallback",
]

#: the models' argument lists: those without informat (V100TC) or without outformat (AMD, always binary32)
_NO_INFORMAT = {"V100TC"}
_NO_OUTFORMAT = {"MI100MC", "MI210MC", "MI250MC", "MI300MC", "MI300XMC", "MI300AMC"}


#: MATLAB semantics of the built-ins the models use where Octave 7 lacks them or differs (file name -> source)
COMPAT_SHIMS = {
    "bitshift.m": """function r = bitshift(a, n)
  % MATLAB: a shift by the integer class's width or more gives 0; empty operands give an empty result
  if isempty(a) || isempty(n), r = a([]); return; end
  r = builtin('bitshift', a, n);
  if isinteger(a)
    big = abs(double(n)) >= 8 * numel(typecast(zeros(1, 1, class(a)), 'uint8'));
    if any(big(:)), if isscalar(n), r(:) = 0; else, r(big) = 0; end, end
  end
end
""",
    "fma.m": """function r = fma(x, y, z)
  % MATLAB's fma as the toolbox calls it, fma(x, 1, z): x + z rounded once (to single if an operand is single:
  % the double sum of two singles, rounded to single, is the correctly rounded sum as 53 >= 2 * 24 + 2)
  if any(double(y(:)) ~= 1), error('fma shim: only fma(x, 1, z) is provided'); end
  if isa(x, 'single') || isa(z, 'single'), r = single(double(single(x)) + double(single(z)));
  else, r = x + z; end
end
""",
    "string.m": """function s = string(x)
  % a string array of the rows of a char matrix, as the toolbox indexes it (s{i}): a cell of the rows
  s = cellstr(x);
end
""",
}


class OctaveError(RuntimeError):
    """Octave itself failed (not a model raising on one input, which is counted per tile)."""


@dataclass
class Batch:
    """The models' outputs for one batch: ``d`` (T, M, N) float64; ``raised`` (T,) bool; ``message`` the first."""

    d: np.ndarray
    raised: np.ndarray
    message: str


def octave_version(octave: str = "octave") -> str:
    """``GNU Octave 7.3.0`` or raises OctaveError where Octave does not run."""
    try:
        out = subprocess.run([octave, "--version"], capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise OctaveError(f"octave does not run: {e}") from e
    return out.splitlines()[0].replace("GNU Octave, version", "GNU Octave").strip()


def call_signature(model: str, informat: str, outformat: str) -> str:
    """The Octave call of one model on the tile ``A``, ``B``, ``C`` (alpha = beta = 1)."""
    args = ["1", "A", "B", "1", "C"]
    if model not in _NO_INFORMAT:
        args.append(f"'{informat}'")
    if model not in _NO_OUTFORMAT:
        args.append(f"'{outformat}'")
    return f"{model}({', '.join(args)})"


_DRIVER = r"""
warning('off', 'all');
addpath('{models}'); addpath('{tools}');{extra}{compat}
fid = fopen('{inp}', 'r'); h = fread(fid, 4, 'double'); T = h(1); M = h(2); K = h(3); N = h(4);
AA = reshape(fread(fid, T*M*K, 'double'), [K, M, T]);
BB = reshape(fread(fid, T*K*N, 'double'), [N, K, T]);
CC = reshape(fread(fid, T*M*N, 'double'), [N, M, T]);
fclose(fid);
out = zeros(N, M, T); raised = zeros(T, 1); msg = '';
for t = 1:T
  A = AA(:, :, t).'; B = BB(:, :, t).'; C = CC(:, :, t).';
  try
    D = {call};
    out(:, :, t) = reshape(double(D), [M, N]).';
  catch err
    raised(t) = 1; out(:, :, t) = NaN;
    if isempty(msg), msg = err.message; end
  end
end
fid = fopen('{outp}', 'w'); fwrite(fid, out(:), 'double'); fwrite(fid, raised, 'double'); fclose(fid);
fid = fopen('{msgp}', 'w'); fprintf(fid, '%s', msg); fclose(fid);
"""


def run_model(toolbox: str | Path, model: str, informat: str, outformat: str, a: np.ndarray, b: np.ndarray,
              c: np.ndarray, extra_path: str | Path | None = None, compat: bool = False, octave: str = "octave",
              timeout: float = 3600) -> Batch:
    """Run ``model`` on tiles: ``a`` (T, M, K), ``b`` (T, K, N), ``c`` (T, M, N) float64 values; one model call per
    tile (rows: M = N = 1). ``extra_path``: a folder added to Octave's path after the toolbox's (e.g. a model file
    the toolbox no longer ships); ``compat``: the MATLAB shims of :data:`COMPAT_SHIMS` first on the path."""
    a, b, c = (np.ascontiguousarray(x, dtype=np.float64) for x in (a, b, c))
    t, m, k = a.shape
    n = b.shape[2]
    root = Path(toolbox)
    with tempfile.TemporaryDirectory(prefix="toolbox_diff_") as tmp:
        inp, outp, msgp = (os.path.join(tmp, f) for f in ("in.bin", "out.bin", "msg.txt"))
        with open(inp, "wb") as f:
            np.array([t, m, k, n], dtype=np.float64).tofile(f)
            for x in (a, b, c):  # C-order (T, M, K), (T, K, N), (T, M, N) = Octave's [K, M, T], [N, K, T], [N, M, T]
                x.tofile(f)
        extra = f" addpath('{Path(extra_path).resolve()}');" if extra_path else ""
        shims = ""
        if compat:
            os.mkdir(os.path.join(tmp, "compat"))
            for name, text in COMPAT_SHIMS.items():
                Path(tmp, "compat", name).write_text(text)
            shims = f" addpath('{os.path.join(tmp, 'compat')}');"
        driver = _DRIVER.format(models=(root / "models").resolve(), tools=(root / "models" / "tools").resolve(),
                                extra=extra, compat=shims, inp=inp, outp=outp, msgp=msgp, call=call_signature(model, informat,
                                                                                                 outformat))
        script = os.path.join(tmp, "driver.m")
        Path(script).write_text(driver)
        proc = subprocess.run([octave, "--no-gui", "--no-window-system", "--quiet", "--norc", script],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout, cwd=tmp,
                              check=False)
        if not os.path.exists(outp):
            raise OctaveError(f"octave produced no output ({model} {informat}->{outformat}): "
                              f"{proc.stderr.strip()[-2000:]}")
        raw = np.fromfile(outp, dtype=np.float64)
        d = raw[: t * m * n].reshape(t, m, n)
        raised = raw[t * m * n:] != 0
        message = Path(msgp).read_text() if os.path.exists(msgp) else ""
    return Batch(d, raised, message)


def run_batches(toolbox, model: str, informat: str, outformat: str, a, b, c, workers: int = 1, extra_path=None,
                compat: bool = False) -> Batch:
    """:func:`run_model` on tiles split over ``workers`` Octave processes at once; one Batch (the first message)."""
    from concurrent.futures import ThreadPoolExecutor

    chunks = np.array_split(np.arange(len(a)), max(1, min(workers, len(a))))
    with ThreadPoolExecutor(len(chunks)) as pool:
        res = list(pool.map(lambda ix: run_model(toolbox, model, informat, outformat, a[ix], b[ix], c[ix],
                                                 extra_path=extra_path, compat=compat), chunks))
    msg = next((r.message for r in res if r.message), "")
    return Batch(np.concatenate([r.d for r in res]), np.concatenate([r.raised for r in res]), msg)


def run_with_fallback(toolbox, model: str, informat: str, outformat: str, a, b, c, workers: int = 1,
                      extra_path=None, compat: bool = False) -> tuple[np.ndarray, np.ndarray, dict]:
    """The model's outputs (T, M, N) and which raised (T, M, N): tiles that raise are rerun output by output with
    the MATLAB shims (:data:`COMPAT_SHIMS`); ``info`` counts both steps and keeps the first messages."""
    first = run_batches(toolbox, model, informat, outformat, a, b, c, workers, extra_path, compat)
    d = first.d
    raised = np.zeros(d.shape, bool)
    info = {"raised_tiles": int(first.raised.sum()), "message": first.message, "shim_rows": 0, "raised_rows": 0,
            "shim_message": ""}
    if first.raised.any():
        m, n = d.shape[1:]
        idx = [(t, i, j) for t in np.nonzero(first.raised)[0] for i in range(m) for j in range(n)]
        again = run_batches(toolbox, model, informat, outformat, np.stack([a[t, i:i + 1] for t, i, j in idx]),
                            np.stack([b[t, :, j:j + 1] for t, i, j in idx]),
                            np.stack([c[t, i:i + 1, j:j + 1] for t, i, j in idx]), workers, extra_path, True)
        for (t, i, j), v, bad in zip(idx, again.d[:, 0, 0], again.raised):
            d[t, i, j], raised[t, i, j] = v, bad
        info.update(shim_rows=len(idx), raised_rows=int(again.raised.sum()), shim_message=again.message)
    return d, raised, info
