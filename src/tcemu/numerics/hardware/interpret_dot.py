"""The Triton interpreter's ``tl.dot`` replaced by the Tensor Core model, for running tcemu's kernels on a CPU.

Under ``TRITON_INTERPRET=1`` Triton computes ``tl.dot`` with a NumPy float32 matmul. Inside
:func:`tensor_core_dot` each dot is instead the block-FMA model of the given instruction (the rows of a, the
columns of b, chained from the accumulator in increasing k, as the compiled kernel's instructions do), while
the kernel's own register arithmetic stays the interpreter's (NumPy float32, round to nearest, no FMA
contraction). So the kernel itself, loop, order, masking and combine, can be compared with the twin on a CPU.
The range fix-up that ``emu_mm`` launches after every GEMM compiles its dots to another instruction
(:data:`~tcemu.numerics.schedule.FIXUP_INSTRUCTION`): its dots take that instruction's model.
"""

from __future__ import annotations

import contextlib
import importlib

import numpy as np

__all__ = ["tensor_core_dot"]


@contextlib.contextmanager
def tensor_core_dot(piece_format: str, arch: str = "h200", instruction: str = "wgmma",
                    fixup_instruction: str | None = None):
    """Within the block, the interpreter's ``tl.dot`` on ``piece_format`` operands (``tf32``, or ``bf16`` widened
    to FP32 as the kernels do under the interpreter) is the preset's Tensor Core model; during ``emu_mm``'s range
    fix-up, ``fixup_instruction``'s (default: the fix-up's instruction on ``arch``). Yields a dict counting the
    dots (``"dots"``, of which ``"fixup_dots"`` in the fix-up)."""
    from triton.runtime import interpreter  # noqa: PLC0415

    from ..model import chain_kmajor_bits, table_index  # noqa: PLC0415
    from ..presets import _canon, get_preset  # noqa: PLC0415
    from ..schedule import FIXUP_INSTRUCTION  # noqa: PLC0415

    if fixup_instruction is None:
        a, _, _ = _canon(arch, "mma.sync")
        fixup_instruction = FIXUP_INSTRUCTION["h100" if a == "h200" else a]
    models = {"gemm": get_preset(arch, instruction, piece_format, "fp32"),
              "fixup": get_preset(arch, fixup_instruction, piece_format, "fp32")}
    if piece_format == "tf32":
        def index(bits):
            return table_index(bits, "tf32")
    else:
        def index(bits):
            return (bits >> 16).astype(np.uint16)
    state = {"dots": 0, "fixup_dots": 0, "kernel": "gemm"}

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        bits_a = np.ascontiguousarray(np.asarray(a.data, np.float32).T).view(np.uint32)  # (K, M)
        bits_b = np.ascontiguousarray(np.asarray(b.data, np.float32)).view(np.uint32)  # (K, N)
        m, n = bits_a.shape[1], bits_b.shape[1]
        rows, cols = np.divmod(np.arange(m * n), n)
        c = np.ascontiguousarray(d.data, np.float32).reshape(-1).view(np.uint32)
        out = chain_kmajor_bits(index(bits_a)[:, rows], index(bits_b)[:, cols], c, models[state["kernel"]])
        state["dots"] += 1
        state["fixup_dots"] += state["kernel"] == "fixup"
        return interpreter.TensorHandle(out.view(np.float32).reshape(m, n), d.dtype.scalar)

    emu_mm = importlib.import_module("tcemu.emulation.gemm.launch")
    fixup = emu_mm._range_fixup

    def range_fixup(*args, **kwargs):  # emu_mm's launch of the fix-up: its dots by the fix-up's model
        state["kernel"] = "fixup"
        try:
            return fixup(*args, **kwargs)
        finally:
            state["kernel"] = "gemm"

    original = interpreter.InterpreterBuilder.create_dot
    interpreter.InterpreterBuilder.create_dot = create_dot
    emu_mm._range_fixup = range_fixup
    try:
        yield state
    finally:
        interpreter.InterpreterBuilder.create_dot = original
        emu_mm._range_fixup = fixup
