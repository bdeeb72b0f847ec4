"""The Tensor Core instructions that the H200 runners issue: one :class:`Case` per (instruction, shape, formats).

Each case names its PTX instruction, the tile shape of one instruction, the input and output formats (tcemu
names: ``fp16``, ``bf16``, ``tf32``, ``e4m3``, ``e5m2``; ``fp32``, ``fp16``), the SASS opcode family that must
appear in its kernel (checked by ``cuobjdump -sass``), and whether ``tcemu validate`` runs it by default.
``id`` indexes the C++ case table in :mod:`._cuda_source`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Case", "CASES", "VALIDATION_CASES", "WMMA_CASES", "ALL_CASES", "get_case", "BITS_DTYPE"]

# container dtype of each format's raw bits
BITS_DTYPE = {"fp16": np.uint16, "bf16": np.uint16, "tf32": np.uint32, "e4m3": np.uint8, "e5m2": np.uint8,
              "fp32": np.uint32}


@dataclass(frozen=True)
class Case:
    id: int  # index into the C++ case table
    name: str  # short unique name, e.g. "mma.k16.fp16.fp32"
    instruction: str  # "mma.sync" or "wgmma"
    ptx: str  # the PTX instruction issued
    M: int
    N: int
    K: int
    input_format: str  # a and b
    output_format: str  # c and d: "fp32" or "fp16"
    kernel_tag: str  # the C++ struct that issues it (appears in the mangled kernel name)
    sass: str  # opcode prefix that must appear in the kernel's SASS: HMMA, HGMMA or QGMMA
    validate: bool = True  # part of the default validation set
    sass_exact: str = ""  # if set: every HMMA of the kernel is this opcode, e.g. HMMA.1684.F32.TF32 (wmma)
    sass_count: int = 0  # with sass_exact: how many of them per tile and K-slice (the compiler's lowering)

    @property
    def in_dtype(self) -> type:
        return BITS_DTYPE[self.input_format]

    @property
    def out_dtype(self) -> type:
        return BITS_DTYPE[self.output_format]

    @property
    def samples_per_tile(self) -> int:
        return self.M * self.N


def _c(i, name, instr, ptx, m, n, k, fin, fout, tag, sass, validate=True) -> Case:
    return Case(i, name, instr, ptx, m, n, k, fin, fout, tag, sass, validate)


CASES: tuple[Case, ...] = (
    _c(0, "mma.k16.fp16.fp32", "mma.sync", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", 16, 8, 16, "fp16", "fp32", "MmaF16K16F32", "HMMA"),
    _c(1, "mma.k16.fp16.fp16", "mma.sync", "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16", 16, 8, 16, "fp16", "fp16", "MmaF16K16F16", "HMMA"),
    _c(2, "mma.k16.bf16.fp32", "mma.sync", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", 16, 8, 16, "bf16", "fp32", "MmaBf16K16F32", "HMMA"),
    _c(3, "mma.k8.tf32.fp32", "mma.sync", "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", 16, 8, 8, "tf32", "fp32", "MmaTf32K8F32", "HMMA"),
    _c(4, "mma.k32.e4m3.fp32", "mma.sync", "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32", 16, 8, 32, "e4m3", "fp32", "MmaE4m3F32", "HMMA"),
    _c(5, "mma.k32.e5m2.fp32", "mma.sync", "mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32", 16, 8, 32, "e5m2", "fp32", "MmaE5m2F32", "HMMA"),
    _c(6, "mma.k32.e4m3.fp16", "mma.sync", "mma.sync.aligned.m16n8k32.row.col.f16.e4m3.e4m3.f16", 16, 8, 32, "e4m3", "fp16", "MmaE4m3F16", "HMMA"),
    _c(7, "mma.k32.e5m2.fp16", "mma.sync", "mma.sync.aligned.m16n8k32.row.col.f16.e5m2.e5m2.f16", 16, 8, 32, "e5m2", "fp16", "MmaE5m2F16", "HMMA"),
    _c(8, "mma.k8.fp16.fp32", "mma.sync", "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32", 16, 8, 8, "fp16", "fp32", "MmaF16K8F32", "HMMA", False),
    _c(9, "mma.k8.bf16.fp32", "mma.sync", "mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32", 16, 8, 8, "bf16", "fp32", "MmaBf16K8F32", "HMMA", False),
    _c(10, "mma.k8.fp16.fp16", "mma.sync", "mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16", 16, 8, 8, "fp16", "fp16", "MmaF16K8F16", "HMMA", False),
    _c(11, "mma.k4.tf32.fp32", "mma.sync", "mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32", 16, 8, 4, "tf32", "fp32", "MmaTf32K4F32", "HMMA", False),
    _c(12, "wgmma.k16.fp16.fp32", "wgmma", "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16", 64, 8, 16, "fp16", "fp32", "WgF16F32", "HGMMA"),
    _c(13, "wgmma.k16.fp16.fp16", "wgmma", "wgmma.mma_async.sync.aligned.m64n8k16.f16.f16.f16", 64, 8, 16, "fp16", "fp16", "WgF16F16", "HGMMA"),
    _c(14, "wgmma.k16.bf16.fp32", "wgmma", "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16", 64, 8, 16, "bf16", "fp32", "WgBf16F32", "HGMMA"),
    _c(15, "wgmma.k8.tf32.fp32", "wgmma", "wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32", 64, 8, 8, "tf32", "fp32", "WgTf32F32", "HGMMA"),
    _c(16, "wgmma.k32.e4m3.fp32", "wgmma", "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3", 64, 8, 32, "e4m3", "fp32", "WgE4m3F32", "QGMMA"),
    _c(17, "wgmma.k32.e5m2.fp32", "wgmma", "wgmma.mma_async.sync.aligned.m64n8k32.f32.e5m2.e5m2", 64, 8, 32, "e5m2", "fp32", "WgE5m2F32", "QGMMA"),
    _c(18, "wgmma.k32.e4m3.fp16", "wgmma", "wgmma.mma_async.sync.aligned.m64n8k32.f16.e4m3.e4m3", 64, 8, 32, "e4m3", "fp16", "WgE4m3F16", "QGMMA"),
    _c(19, "wgmma.k32.e5m2.fp16", "wgmma", "wgmma.mma_async.sync.aligned.m64n8k32.f16.e5m2.e5m2", 64, 8, 32, "e5m2", "fp16", "WgE5m2F16", "QGMMA"),
)

VALIDATION_CASES: tuple[Case, ...] = tuple(c for c in CASES if c.validate)

#: CUDA's WMMA API on 16 x 16 tiles (``tcemu probe --wmma``, ``tcemu validate --wmma``): not instructions; the
#: compiler lowers them (presets.WMMA_LOWERING). On sm_90a (nvcc 13.0): 2 x HMMA.16816 per m16n16k16 and
#: 4 x HMMA.1684.F32.TF32 per m16n16k8, which the SASS check asserts. Kept out of CASES (and the replay set's
#: coverage) until H200 data exists.
WMMA_CASES: tuple[Case, ...] = (
    Case(20, "wmma.k16.fp16.fp32", "wmma", "wmma.mma_sync m16n16k16 f16 -> f32", 16, 16, 16, "fp16", "fp32",
         "wmma_kernelI6__halfS0_fLi16ELi16ELi16E", "HMMA", True, "HMMA.16816.F32", 2),
    Case(21, "wmma.k16.fp16.fp16", "wmma", "wmma.mma_sync m16n16k16 f16 -> f16", 16, 16, 16, "fp16", "fp16",
         "wmma_kernelI6__halfS0_S0_Li16ELi16ELi16E", "HMMA", True, "HMMA.16816.F16", 2),
    Case(22, "wmma.k16.bf16.fp32", "wmma", "wmma.mma_sync m16n16k16 bf16 -> f32", 16, 16, 16, "bf16", "fp32",
         "wmma_kernelI13__nv_bfloat16S0_fLi16ELi16ELi16E", "HMMA", True, "HMMA.16816.F32.BF16", 2),
    Case(23, "wmma.k8.tf32.fp32", "wmma", "wmma.mma_sync m16n16k8 tf32 -> f32", 16, 16, 8, "tf32", "fp32",
         "wmma_kernelIN6nvcuda4wmma9precision4tf32EffLi16ELi16ELi8E", "HMMA", True, "HMMA.1684.F32.TF32", 4),
)
ALL_CASES: tuple[Case, ...] = CASES + WMMA_CASES


def get_case(name: str | int) -> Case:
    """A case by name (``mma.k16.fp16.fp32``, ``wmma.k8.tf32.fp32``) or id."""
    for c in ALL_CASES:
        if c.name == name or c.id == name:
            return c
    raise KeyError(f"unknown case {name!r}; known: {', '.join(c.name for c in ALL_CASES)}")
