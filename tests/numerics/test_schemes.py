"""FMA chains (FP64 DMMA, AMD fp32/fp64 MFMA) and AMD MFMA schemes: the fast model equals the exact oracle.

Every preset with a scheme (FP64 DMMA on a100/ada/h100/b200, AMD CDNA1-3 ``v_mfma_*``) x every input kind of
tcemu.numerics.inputs_schemes, bit for bit, fixed seeds; what-if scheme parameters; a sensitivity check that the
comparison can fail.
"""

import zlib
from dataclasses import replace

import numpy as np
import pytest

from tcemu.numerics import block_fma_bits, get_preset, list_presets
from tcemu.numerics.inputs_schemes import SCHEME_KINDS, scheme_operands
from tcemu.numerics.oracle import oracle_bits

KEYS = [k for k in list_presets() if get_preset(*k).scheme is not None]


def _seed(*parts) -> int:
    return zlib.crc32(repr(parts).encode())


def _compare(p, a, b, c, what):
    got = block_fma_bits(a, b, c, p)
    want = oracle_bits(a, b, c, p)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, (
        f"{what}: {bad.size}/{len(c)} differ; row {bad[0]}: model {int(got[bad[0]]):#x} oracle {int(want[bad[0]]):#x}; "
        f"a={a[bad[0]].tolist()} b={b[bad[0]].tolist()} c={int(c[bad[0]]):#x}; {p.describe()}"
    )


def test_scheme_presets_listed():
    archs = {k[0] for k in KEYS}
    assert {"mi100", "mi250", "mi300", "a100", "h100"} <= archs
    assert len([k for k in KEYS if k[0].startswith("mi")]) == 15 + 22 + 27  # MMA-Sim's v_mfma lists


@pytest.mark.parametrize("key", KEYS, ids=lambda k: "-".join(k))
@pytest.mark.parametrize("kind", SCHEME_KINDS)
def test_scheme_model_equals_oracle(key, kind):
    p = get_preset(*key)
    rng = np.random.default_rng(_seed(key, kind))
    a, b, c = scheme_operands(p, 24, 2 * p.k_instr, kind, rng)
    _compare(p, a, b, c, f"{key} {kind}")
