"""The public Tensor Core hardware data bundled with tcemu (Khattak & Mikaitis toolbox, BSD-2-Clause).

48 cases (GPU x input format x output format), 5,000 hardware dot products each, stored as exact
bit patterns in ``data/toolbox_hw.npz`` (notice: ``data/LICENSE-toolbox-data.txt``). Caveats that
the tests make explicit (docs/numerics.md, "Public hardware data"):

- H100/H200 ``e4m3_fp32`` / ``e5m2_fp32``: d does not contain c (``c_applied`` False); the H100 and
  H200 d arrays are byte-identical although their c differ.
- L40S is the same data as Ada.
- fp16/bf16/tf32 rows were recorded through WMMA with zero padding up to the instruction's K.

Usage::

    for case in load_cases():
        case.gpu, case.name, case.a, case.b, case.c, case.d
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

__all__ = ["HardwareCase", "load_cases", "DATA_FILE", "GPU_ARCH"]

DATA_FILE = Path(__file__).with_name("data") / "toolbox_hw.npz"

# the data's GPU folder -> the preset arch that models it
GPU_ARCH = {"V100": "v100", "A100": "a100", "A2": "a100", "Ada": "ada", "L40S": "ada", "H100": "h100",
            "H200": "h200", "B200": "b200"}


@dataclass(frozen=True)
class HardwareCase:
    """One (GPU, input, output) set of hardware dot products: d = a . b + c, as bits."""

    gpu: str  # the data's folder name: V100, A100, A2, Ada, L40S, H100, H200, B200
    name: str  # "<in>_<out>", e.g. "fp16_fp32"
    input_format: str
    output_format: str
    api: str  # what the harness issued (WMMA or inline-PTX mma.sync)
    c_applied: bool  # False where d evidently lacks c (H100/H200 FP8 -> fp32)
    a: np.ndarray  # (5000, K) input bits
    b: np.ndarray  # (5000, K)
    c: np.ndarray  # (5000,) bits of the c the instruction received: fp32, or fp16 (RNE of the fp32 c) for fp16 out
    c_fp32: np.ndarray  # (5000,) fp32 bits of c as recorded
    d: np.ndarray  # (5000,) hardware result bits (uint32 fp32, uint16 fp16)

    @property
    def arch(self) -> str:
        return GPU_ARCH[self.gpu]


@lru_cache(maxsize=1)
def _archive():
    z = np.load(DATA_FILE)
    return z, json.loads(str(z["index"]))


def load_cases() -> list[HardwareCase]:
    """Every bundled case, in a stable order."""
    z, meta = _archive()
    out = []
    for key, e in sorted(meta["cases"].items()):
        gpu, name = key.split("/")
        fin, fout = name.split("_")
        c_fp32 = z[e["c"]]
        c = z[e["c_as_fp16"]] if fout == "fp16" else c_fp32
        out.append(HardwareCase(gpu, name, fin, fout, e["api"], e["c_applied"], z[e["a"]], z[e["b"]], c, c_fp32,
                                z[e["d"]]))
    return out
