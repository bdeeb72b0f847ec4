"""The schedule of an emulated GEMM kernel: what one output element goes through, as data.

An emulated GEMM (:mod:`tcemu.emulation.gemm`) computes each output element by Tensor Core instructions on the
pieces of A and B, K-tile by K-tile, and FP32 operations in registers. :class:`GemmSchedule` writes that down:
the instruction model (:class:`~tcemu.numerics.params.MMAParams` of the instruction the compiler emits), the
K-tile, the registers, the steps of one K-tile (:class:`Step` ``mma``: a chain of instructions over the K-tile
onto a register or from zero; ``scale``, ``add``) and the steps after the K loop (the level combination, the
bias). :func:`tcemu.numerics.emulated.emulated_matmul` executes it, vectorised over outputs.

:func:`derive_schedule` derives the schedule from what the dispatcher decides, not from a copy:

- the configuration: ``pick_config`` for the shape (or the one given), and the launcher's own rules: which kernel
  runs it (a ``g`` configuration runs the Gluon kernels on Hopper where ``emu_mm._wgmma_eligible`` holds, else
  the Triton kernel in mode 1) and the Triton kernel's mode (``emu_mm._constexprs``: BF16x9 has the tile mode
  only, mode 4 is mode 1 for two pieces);
- the products and their order from :attr:`~tcemu.emulation.methods.MethodSpec.levels`, arranged as the
  kernels' documented modes do (``_kernels/_emu_mm.py``): 0 "tile" (per K-tile the levels from the highest,
  each scaled by 2^-s with non-finite values set to 0, onto the L0 tile; then ``acc += t``), 1 "run" (each
  correction level on its own accumulator over all of K, the L0 tile from zero per K-tile, the levels combined
  after the loop), 4 "hybrid" (level 2 running, level 1 per K-tile);
- the instruction per architecture (:data:`KERNEL_INSTRUCTION`) and the FP32 contraction rule
  (:func:`_scale_add`), both read from offline compiles (PTX and SASS; tests/numerics/test_schedule.py
  compiles the kernels for sm_80/sm_90/sm_100 and checks both).

The range check and fix-up (docs/emulation.md, "The top of the range"): every kernel marks the output elements
whose result (before the bias) or a level it zeroes is not finite (:func:`zeroes_nonfinite`, the kernels'
flag rule), and the range fix-up kernel (``_kernels/_range_fixup.py``) recomputes exactly those.
:func:`derive_fixup_schedule` derives its schedule from its launch configuration (``FIX_BM``, ``FIX_BN``,
``FIX_BK``, ``FIX_WARPS``) and code: A's rows and B's columns scaled by exact powers of two
(``split.range_scale_exponents``, ``split.scale_down``, T = ``MethodSpec.range_threshold(K)``), the method's
split and products with every correction level on its own running accumulator over all of K (the L0 tile per
K-tile from zero), the levels combined smallest first, the unscaling ``(C' 2^k_i) 2^l_j`` and the bias, whose
add ptxas contracts with the column scaling (:data:`FIXUP_INSTRUCTION`, the SASS counts: tests). A main
schedule holds its fix-up's (``GemmSchedule.fixup``).

A kernel change that these rules do not see (another product order, another combine) shows up in the tests
that run the Triton kernels (the GEMM and the fix-up) under ``TRITON_INTERPRET=1`` with the Tensor Core model
in their ``tl.dot`` and compare with the twin, and in the H200 replay test.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .params import MMAParams
from .presets import _canon, get_preset

__all__ = ["Step", "GemmSchedule", "derive_schedule", "derive_fixup_schedule", "KERNEL_INSTRUCTION",
           "FIXUP_INSTRUCTION", "FIXUP_KERNEL", "kernel_family", "KERNEL_FAMILIES", "fp_fusion_enabled",
           "zeroes_nonfinite", "B_OPERANDS"]

#: the Tensor Core instruction that ``tl.dot`` (and the Gluon kernels' ``warpgroup_mma``) compiles to, per
#: architecture, from the PTX of offline compiles of the GEMM kernels with Triton 3.9 (tests check it): sm_80
#: ``mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32`` / ``m16n8k16 ... bf16`` (HMMA.1688.F32.TF32 /
#: HMMA.16816.F32.BF16 in SASS); sm_90 ``wgmma.mma_async.sync.aligned.m64nNk8.f32.tf32.tf32`` / ``m64nNk16 ...
#: bf16`` (HGMMA); sm_100 ``tcgen05.mma.cta_group::1.kind::tf32`` / ``kind::f16`` (UTCHMMA). The presets'
#: default shapes are these K (8 for tf32, 16 for bf16). sm_89 (Ada) lowers as sm_80.
KERNEL_INSTRUCTION: dict[str, str] = {"a100": "mma.sync", "ada": "mma.sync", "h100": "wgmma", "b200": "tcgen05"}

#: the kernels (``kernel`` of a schedule): the Triton kernel and the four Gluon kernels of Hopper
KERNEL_FAMILIES = ("triton", "g", "pg", "gw", "pgw")

#: the range fix-up kernel (``kernel`` of a main schedule's ``fixup``), launched after every GEMM
FIXUP_KERNEL = "fixup"

#: the instruction of the range fix-up's ``tl.dot``, per architecture: its 32 x 64 tile over 4 warps compiles to
#: ``mma.sync.aligned.m16n8k8 ... tf32`` / ``m16n8k16 ... bf16`` on sm_80, sm_90 and sm_100 alike (PTX of offline
#: compiles with Triton 3.9: tests check it), not to the main kernels' wgmma or tcgen05
FIXUP_INSTRUCTION: dict[str, str] = {"a100": "mma.sync", "ada": "mma.sync", "h100": "mma.sync", "b200": "mma.sync"}

#: what a schedule's B operand is: ``pieces`` (the main kernels: B's pieces, ``split_t``), ``fp32`` (the fix-up
#: given FP32 B: scaled and split in the kernel), ``recombined`` (the fix-up given only B's pieces: the value
#: they represent, ``split.recombine``, scaled and split in the kernel)
B_OPERANDS = ("pieces", "fp32", "recombined")


@dataclass(frozen=True)
class Step:
    """One operation on per-output registers (bits of FP32 values).

    ``op``:

    - ``mma``: ``dst = MMA(A_i B_j)`` over the K-tile (the instruction chain of the schedule's ``params``,
      blocks chained in increasing k), onto ``srcs[0]``, or from zero with no ``srcs``;
    - ``scale``: ``dst = RN(srcs[0] * 2^-(levels s))``, non-finite values set to 0 if ``zero_nonfinite``;
    - ``add``: ``dst = RN(srcs[0] + srcs[1])``;
    - ``fz``: ``dst = srcs[0]`` with non-finite values set to 0;
    - ``scale_add``: ``dst = srcs[0] * 2^-(levels s) + srcs[1]`` (``srcs[0]`` with non-finite values set to 0 if
      ``zero_nonfinite``), one rounding if ``fused`` (FFMA), else the product rounded first (FMUL, FADD);
    - ``bias``: ``dst = RN(srcs[0] + bias[column])``;
    - ``unscale_rows``: ``dst = RN(srcs[0] * 2^k_row)``, ``unscale_cols``: ``dst = RN(srcs[0] * 2^l_column)``
      (the fix-up's exponents of the output's row of A and column of B);
    - ``unscale_cols_bias``: ``dst = srcs[0] * 2^l_column + bias[column]``, one rounding if ``fused`` (FFMA),
      else the product rounded first.
    """

    op: str
    dst: str
    srcs: tuple[str, ...] = ()
    product: tuple[int, int] | None = None
    levels: int = 0
    zero_nonfinite: bool = False
    fused: bool = False

    def __str__(self) -> str:
        s = self.srcs
        if self.op == "mma":
            onto = f"onto {s[0]}" if s else "from 0"
            return f"{self.dst} = MMA(A{self.product[0]} B{self.product[1]}) over the K-tile, {onto}"
        scale = f"2^-{self.levels}s" if self.levels != 1 else "2^-s"
        x = f"fz({s[0]})" if self.zero_nonfinite and self.op == "scale_add" else (s[0] if s else "")
        if self.op == "scale":
            return f"{self.dst} = fz(RN({x} * {scale}))" if self.zero_nonfinite else f"{self.dst} = RN({x} * {scale})"
        if self.op == "add":
            return f"{self.dst} = RN({s[0]} + {s[1]})"
        if self.op == "fz":
            return f"{self.dst} = fz({s[0]})"
        if self.op == "scale_add":
            return (f"{self.dst} = RN({x} * {scale} + {s[1]})  (FFMA, one rounding)" if self.fused
                    else f"{self.dst} = RN(RN({x} * {scale}) + {s[1]})  (FMUL, FADD)")
        if self.op == "bias":
            return f"{self.dst} = RN({s[0]} + bias)"
        if self.op == "unscale_rows":
            return f"{self.dst} = RN({s[0]} * 2^k_row)"
        if self.op == "unscale_cols":
            return f"{self.dst} = RN({s[0]} * 2^l_col)"
        if self.op == "unscale_cols_bias":
            return (f"{self.dst} = RN({s[0]} * 2^l_col + bias)  (FFMA, one rounding)" if self.fused
                    else f"{self.dst} = RN(RN({s[0]} * 2^l_col) + bias)  (FMUL, FADD)")
        return f"{self.op} {self.dst} {s}"


def zeroes_nonfinite(step: Step) -> bool:
    """Whether ``step`` sets non-finite values of its first source to 0: where it does so for an element, the
    kernels' range check marks that element (with a non-finite result before the bias), and the fix-up
    recomputes it: the steps ``fz`` and ``scale_add`` (the running levels) and, in the tile modes, ``scale`` (each
    level tile). The kernels with the check carry such a level into the result instead, which is then not
    finite: the same elements marked, the same bits elsewhere."""
    return step.op == "fz" or (step.op in ("scale", "scale_add") and step.zero_nonfinite)


@dataclass(frozen=True)
class GemmSchedule:
    """What one output element of an emulated GEMM goes through (see the module docstring).

    Attributes:
        method: the method's name.
        arch, instruction: the preset's architecture and instruction.
        kernel: which kernel runs the product (:data:`KERNEL_FAMILIES`).
        config: the KernelConfig (as the dispatcher names it) the schedule was derived from.
        mode: 0 tile, 1 run, 4 hybrid (the Gluon kernels: 1).
        bk: the K-tile; K is padded with zeros to a multiple of it (masked loads, TMA zero fill).
        shift, piece_format, n_pieces: the method's split.
        params: the model of one instruction (its K divides ``bk``).
        registers: zeroed before the K loop (``acc`` and the running accumulators).
        tile: the steps of each K-tile, in order.
        epilogue: the steps after the K loop; the result is ``acc``.
        range_check: the kernel marks the elements whose result before the bias, or a value a step zeroes
            (:func:`zeroes_nonfinite`), is not finite; ``fixup`` computes those again.
        fixup: the schedule of the range fix-up (``kernel`` :data:`FIXUP_KERNEL`), or None.
        b_operand: what B is (:data:`B_OPERANDS`).
        range_scaled: A's rows and B's columns are scaled by powers of two before the split (the fix-up), and
            the ``unscale_*`` steps undo it.
    """

    method: str
    arch: str
    instruction: str
    kernel: str
    config: str
    mode: int
    bk: int
    shift: int
    piece_format: str
    n_pieces: int
    params: MMAParams
    registers: tuple[str, ...]
    tile: tuple[Step, ...]
    epilogue: tuple[Step, ...]
    range_check: bool = False
    fixup: GemmSchedule | None = None
    b_operand: str = "pieces"
    range_scaled: bool = False
    notes: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.bk % self.params.k_instr:
            raise ValueError(f"the K-tile {self.bk} is not a multiple of the instruction's K {self.params.k_instr}")
        if self.params.input_format != self.piece_format:
            raise ValueError(f"params take {self.params.input_format}, the pieces are {self.piece_format}")
        if self.b_operand not in B_OPERANDS:
            raise ValueError(f"b_operand must be one of {B_OPERANDS}, got {self.b_operand!r}")
        if self.range_check != (self.fixup is not None):
            raise ValueError("a range check needs the fix-up's schedule (and a fix-up a range check)")
        if self.fixup is not None and (self.fixup.kernel != FIXUP_KERNEL or self.fixup.method != self.method):
            raise ValueError(f"the fix-up's schedule is {self.fixup.method} {self.fixup.kernel}")

    @property
    def has_bias(self) -> bool:
        """Whether the epilogue adds the bias."""
        return any(st.op in ("bias", "unscale_cols_bias") for st in self.epilogue)

    def describe(self, fixup: bool = True) -> str:
        """A few lines: kernel, instruction, the steps (and, with ``fixup``, the fix-up's)."""
        lines = [f"{self.method} on {self.arch} {self.instruction}: kernel {self.kernel}, config {self.config}, "
                 f"mode {self.mode}, K-tile {self.bk}",
                 f"  instruction model: {self.params.describe()}"]
        if self.range_scaled:
            b = "B" if self.b_operand == "fp32" else "the value of B's pieces"
            lines.append(f"  operands: A's rows scaled by 2^-k_row, {b}'s columns by 2^-l_col (k, l = max(0, e - T), "
                         "e the exponent of the largest finite magnitude, T = range_threshold(K)), then split")
        lines += [f"  registers zeroed: {', '.join(self.registers)}", "  per K-tile:"]
        lines += [f"    {s}" for s in self.tile]
        lines += ["  after the K loop:"] + [f"    {s}" for s in self.epilogue]
        if self.notes:
            lines.append(f"  ({self.notes})")
        if self.fixup is not None and not fixup:
            lines.append("  range check: an element whose result before the bias, or a value a step sets to 0, is "
                         "not finite is marked and computed again by the range fix-up")
        elif self.fixup is not None:
            lines.append("  range check: an element whose result before the bias, or a value a step sets to 0, is "
                         "not finite is marked and computed again by the range fix-up:")
            lines += ["    " + line for line in self.fixup.describe().splitlines()]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """JSON-ready summary (the instruction model by its label)."""
        return {"method": self.method, "arch": self.arch, "instruction": self.instruction, "kernel": self.kernel,
                "config": self.config, "mode": self.mode, "bk": self.bk, "model": self.params.label,
                "tile": [str(s) for s in self.tile], "epilogue": [str(s) for s in self.epilogue],
                "b_operand": self.b_operand, "range_scaled": self.range_scaled, "range_check": self.range_check,
                "fixup": None if self.fixup is None else self.fixup.to_dict()}

    def without_contraction(self) -> GemmSchedule:
        """The same schedule with every fused multiply-add rounded twice (the fix-up's too): the arithmetic of the
        Triton interpreter (NumPy, no contraction), which the tests run the kernels under."""
        return replace(self, epilogue=tuple(replace(s, fused=False) for s in self.epilogue),
                       fixup=None if self.fixup is None else self.fixup.without_contraction(),
                       notes=(self.notes + "; " if self.notes else "") + "no FMA contraction")


def fp_fusion_enabled() -> bool:
    """Whether this Triton compiles kernels with FP fusion (``mul.f32``/``add.f32`` left for ptxas to contract):
    Triton 3.9 reads ``TRITON_DEFAULT_FP_FUSION`` (default on, to become off in 3.10); earlier versions fuse
    unless ``enable_fp_fusion=False``, which tcemu's kernels do not pass."""
    import warnings  # noqa: PLC0415

    import triton  # noqa: PLC0415

    lang = getattr(getattr(triton, "knobs", None), "language", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if hasattr(lang, "fp_fusion_enabled"):
            return bool(lang.fp_fusion_enabled(None))
        if hasattr(lang, "default_fp_fusion"):
            return bool(lang.default_fp_fusion)
    return True


def _scale_add(dst: str, x: str, y: str, levels: int, zero_nonfinite: bool, fp_fusion: bool = True) -> Step:
    """``dst = fz?(x) * 2^-(levels s) + y`` as the compiled kernels do it.

    The contraction rule, read from the SASS of offline sm_90 (and sm_100) compiles with Triton 3.9 (Triton leaves
    ``mul.f32``/``add.f32`` without a rounding modifier, so ptxas may contract them): where ``x`` passes through
    the non-finite-to-zero select, LLVM moves the select after the multiplication and ptxas keeps FMUL, FSEL,
    FADD (two roundings); where ``x`` is an FADD result (the three-piece run mode's ``corr``), the multiply-add
    is one FFMA (FFMA2 on sm_100). The tests count FFMA in each presplit configuration's SASS against this rule.
    Without FP fusion (``fp_fusion``: :func:`fp_fusion_enabled` where the kernels are compiled) nothing is fused.
    """
    return Step("scale_add", dst, (x, y), levels=levels, zero_nonfinite=zero_nonfinite,
                fused=fp_fusion and not zero_nonfinite)


def _steps_tile_mode(levels) -> tuple[tuple[Step, ...], tuple[Step, ...], tuple[str, ...]]:
    """Mode 0: per K-tile the levels from the highest down, each scaled into the next, then the L0 product
    onto them and ``acc += t``."""
    tile: list[Step] = []
    for lvl in range(len(levels) - 1, 0, -1):
        for p in levels[lvl]:
            tile.append(Step("mma", "t", ("t",) if tile else (), product=p))
        tile.append(Step("scale", "t", ("t",), levels=1, zero_nonfinite=True))
    tile.append(Step("mma", "t", ("t",) if tile else (), product=(0, 0)))
    tile.append(Step("add", "acc", ("acc", "t")))
    return tuple(tile), (), ("acc",)


def _combine_running(top: int) -> tuple[Step, ...]:
    """The running levels ``c1 .. c<top>`` combined smallest first onto ``acc``, as the kernels do:
    ``corr = fz(c<top>) 2^-s + fz(c<top-1>)``, then ``corr = corr 2^-s + fz(c<l>)`` down to level 1, and
    ``acc + corr 2^-s`` (one level: ``acc + fz(c1) 2^-s``)."""
    if top == 1:
        return (_scale_add("acc", "c1", "acc", 1, True),)
    steps = [Step("fz", "corr", (f"c{top - 1}",)), _scale_add("corr", f"c{top}", "corr", 1, True)]
    for lvl in range(top - 2, 0, -1):
        steps += [Step("fz", "z", (f"c{lvl}",)), _scale_add("corr", "corr", "z", 1, False)]
    return tuple(steps) + (_scale_add("acc", "corr", "acc", 1, False),)


def _steps_run_mode(levels, l0_first: bool,
                    max_top: int = 2) -> tuple[tuple[Step, ...], tuple[Step, ...], tuple[str, ...]]:
    """Mode 1: level l >= 1 on the running accumulator ``c<l>``; the L0 tile from zero per K-tile, ``acc += t``;
    after the loop the levels combined (:func:`_combine_running`). The GEMM kernels run it for up to two
    correction levels (``max_top``), the fix-up for all."""
    top = len(levels) - 1
    if top > max_top:
        raise ValueError("the run mode has at most two correction levels (BF16x9 runs the tile mode)")
    corrections = [Step("mma", f"c{lvl}", (f"c{lvl}",), product=p)
                   for lvl in range(top, 0, -1) for p in levels[lvl]]
    l0 = [Step("mma", "t", (), product=(0, 0))]
    tile = tuple((l0 + corrections) if l0_first else (corrections + l0)) + (Step("add", "acc", ("acc", "t")),)
    return tile, _combine_running(top), ("acc",) + tuple(f"c{lvl}" for lvl in range(1, top + 1))


def _steps_hybrid_mode(levels) -> tuple[tuple[Step, ...], tuple[Step, ...], tuple[str, ...]]:
    """Mode 4 (three pieces): level 2 running; per K-tile level 1 from zero, scaled, the L0 product onto it."""
    if len(levels) != 3:
        raise ValueError("the hybrid mode is for three-piece methods with two correction levels")
    tile = [Step("mma", "c2", ("c2",), product=p) for p in levels[2]]
    for i, p in enumerate(levels[1]):
        tile.append(Step("mma", "t", ("t",) if i else (), product=p))
    tile += [Step("scale", "t", ("t",), levels=1, zero_nonfinite=True), Step("mma", "t", ("t",), product=(0, 0)),
             Step("add", "acc", ("acc", "t"))]
    return tuple(tile), (_scale_add("acc", "c2", "acc", 2, True),), ("acc", "c2")


def _gemm():
    import importlib  # noqa: PLC0415

    try:
        emu_mm = importlib.import_module("tcemu.emulation.gemm.launch")
    except ImportError as exc:  # pragma: no cover - the triton extra missing
        raise ImportError(f"deriving a kernel schedule reads tcemu.emulation.gemm's dispatcher, which needs "
                          f"Triton: pip install 'tcemu[triton]' ({exc})") from exc
    return emu_mm


def kernel_family(method, config, arch: str, K: int | None = None):
    """(kernel, configuration that runs, mode) for a configuration on an architecture, by the launcher's rules.

    A ``g`` configuration runs a Gluon kernel on Hopper where the product is eligible (not BF16x9, K times the
    piece's bytes a multiple of 16: ``emu_mm._wgmma_eligible`` for contiguous operands); elsewhere the Triton
    kernel with the same tiles in mode 1 (as ``emu_mm`` replaces it). The Triton kernel's mode is the launcher's
    ``MODE`` constexpr.
    """
    emu_mm = _gemm()
    from tcemu.emulation.methods import get_method  # noqa: PLC0415

    spec = get_method(method)
    cfg = emu_mm.KernelConfig.parse(config) if isinstance(config, str) else config
    key_arch = "h100" if arch in ("h100", "h200") else arch
    elem = 2 if spec.piece_format == "bf16" else 4
    if cfg.wgmma:
        if key_arch == "h100" and spec.name != "bf16x9" and (K is None or (K * elem) % 16 == 0):
            kernel = ("pgw" if cfg.presplit else "gw") if cfg.warp_specialized else ("pg" if cfg.presplit else "g")
            return kernel, cfg, 1
        cfg = replace(cfg, wgmma=False, warp_specialized=False, tma_store=False, mode=1, persistent=False)
    mode = emu_mm._constexprs(spec, cfg, K if K is not None else cfg.bk, False)["MODE"]
    return "triton", cfg, mode


def derive_schedule(
    method,
    config=None,
    *,
    arch: str = "h200",
    instruction: str | None = None,
    M: int | None = None,
    N: int | None = None,
    K: int | None = None,
    has_bias: bool = False,
    variant: str = "measured",
    params: MMAParams | None = None,
    fp_fusion: bool | None = None,
    range_fixup: bool = True,
    fixup_b: str = "fp32",
) -> GemmSchedule:
    """The schedule of the kernel that runs ``method`` with ``config`` on ``arch``, with its range fix-up's.

    Args:
        method: tf32x3, bf16x3, bf16x6 or bf16x9 (a name or MethodSpec).
        config: a KernelConfig or its string; None: the dispatcher's choice for (M, N, K)
            (``emu_mm.pick_config``; the environment's overrides apply as they do for ``emu_mm``).
        arch: a100, ada, h100, h200 or b200.
        instruction: the preset's instruction; None: the one the compiler emits there (:data:`KERNEL_INSTRUCTION`).
            Another one (e.g. ``mma.sync`` on h200) is a what-if.
        M, N, K: the product's shape (K decides the Gluon kernels' eligibility; all three pick the config).
        has_bias: the bias add after the combine.
        variant: the presets' variant (``measured``, ``mmasim``, ``toolbox``).
        params: an explicit instruction model (what-if), instead of the preset.
        fp_fusion: whether the kernels are compiled with FP fusion; None: this Triton's default
            (:func:`fp_fusion_enabled`). A replay of another machine's run passes that run's value.
        range_fixup: the range check and fix-up, as ``emu_mm`` launches them (False: neither, the diagnostic
            ``tcemu.config(range_fixup=False)``).
        fixup_b: what the fix-up reads as B: ``fp32`` (``emu_mm(..., b=)``, as tcemu's matmul and linear layers
            pass it) or ``recombined`` (no ``b``: the value of B's pieces).
    """
    emu_mm = _gemm()
    from tcemu.emulation.methods import get_method  # noqa: PLC0415

    spec = get_method(method)
    if spec.name not in emu_mm.KERNEL_METHODS:
        raise ValueError(f"method {spec.name} has no kernel (have: {', '.join(emu_mm.KERNEL_METHODS)})")
    a, _, _ = _canon(arch, "mma.sync")
    key_arch = "h100" if a == "h200" else a
    if config is None:
        if None in (M, N, K):
            raise ValueError("pass config= or the product's M, N and K (the dispatcher's choice depends on them)")
        config = emu_mm.pick_config(spec, M, N, K)
    cfg = emu_mm.KernelConfig.parse(config) if isinstance(config, str) else config
    kernel, run_cfg, mode = kernel_family(spec, cfg, a, K)
    if instruction is None:
        if key_arch not in KERNEL_INSTRUCTION:
            raise ValueError(f"{a} has no TF32/BF16 Tensor Cores for {spec.name}; use one of "
                             f"{sorted(KERNEL_INSTRUCTION)} (h200 = h100)")
        instruction = KERNEL_INSTRUCTION[key_arch]
    params = params or get_preset(a, instruction, spec.piece_format, "fp32", variant=variant)
    levels = spec.levels
    if mode == 0:
        tile, epilogue, regs = _steps_tile_mode(levels)
    elif mode == 1:
        tile, epilogue, regs = _steps_run_mode(levels, l0_first=kernel != "triton" or run_cfg.l0_first)
        if not (fp_fusion_enabled() if fp_fusion is None else fp_fusion):
            epilogue = tuple(replace(st, fused=False) for st in epilogue)
    elif mode == 4:
        tile, epilogue, regs = _steps_hybrid_mode(levels)
    else:
        raise ValueError(f"unknown kernel mode {mode}")
    if has_bias:
        epilogue = epilogue + (Step("bias", "acc", ("acc",)),)
    fixup = None
    if range_fixup:
        fixup = derive_fixup_schedule(spec, arch=a, has_bias=has_bias, variant=variant, fp_fusion=fp_fusion,
                                      b_operand=fixup_b)
    notes = "tiling, stages, grouping, persistence and the L0 issue order do not change the arithmetic"
    return GemmSchedule(method=spec.name, arch=a, instruction=instruction, kernel=kernel, config=str(cfg), mode=mode,
                        bk=run_cfg.bk, shift=spec.shift, piece_format=spec.piece_format, n_pieces=spec.n_pieces,
                        params=params, registers=regs, tile=tile, epilogue=epilogue, range_check=range_fixup,
                        fixup=fixup, notes=notes)


def derive_fixup_schedule(
    method,
    *,
    arch: str = "h200",
    instruction: str | None = None,
    has_bias: bool = False,
    variant: str = "measured",
    params: MMAParams | None = None,
    fp_fusion: bool | None = None,
    b_operand: str = "fp32",
) -> GemmSchedule:
    """The schedule of the range fix-up kernel (``_kernels/_range_fixup.py``) for ``method`` on ``arch``.

    From its launch configuration: the K-tile ``FIX_BK`` (K padded with zeros to it by the masked loads) and the
    ``FIX_BM`` x ``FIX_BN`` tile over ``FIX_WARPS`` warps, whose ``tl.dot`` compiles to
    :data:`FIXUP_INSTRUCTION`; from its code: the operands scaled (``range_scaled``), every correction level of
    :attr:`~tcemu.emulation.methods.MethodSpec.levels` on its own running accumulator from the highest, then the
    L0 tile from zero, ``acc += t`` (the run mode, here for every method); the levels combined smallest first;
    ``(acc 2^k_row) 2^l_col``, the column scaling and the bias one FFMA with FP fusion (the SASS: tests).
    ``b_operand``: ``fp32`` or ``recombined`` (:data:`B_OPERANDS`); the other arguments as :func:`derive_schedule`.
    """
    from tcemu.emulation.gemm._kernels import _range_fixup as fix  # noqa: PLC0415
    from tcemu.emulation.methods import get_method  # noqa: PLC0415

    spec = get_method(method)
    if b_operand not in ("fp32", "recombined"):
        raise ValueError(f"the fix-up reads B as 'fp32' or 'recombined', not {b_operand!r}")
    a, _, _ = _canon(arch, "mma.sync")
    key_arch = "h100" if a == "h200" else a
    if instruction is None:
        if key_arch not in FIXUP_INSTRUCTION:
            raise ValueError(f"{a} has no TF32/BF16 Tensor Cores for {spec.name}; use one of "
                             f"{sorted(FIXUP_INSTRUCTION)} (h200 = h100)")
        instruction = FIXUP_INSTRUCTION[key_arch]
    params = params or get_preset(a, instruction, spec.piece_format, "fp32", variant=variant)
    fused = fp_fusion_enabled() if fp_fusion is None else fp_fusion
    tile, combine, regs = _steps_run_mode(spec.levels, l0_first=False, max_top=len(spec.levels) - 1)
    epilogue = tuple(st if fused else replace(st, fused=False) for st in combine)
    epilogue += (Step("unscale_rows", "acc", ("acc",)),)
    if has_bias:
        epilogue += (Step("unscale_cols_bias", "acc", ("acc",), fused=fused),)
    else:
        epilogue += (Step("unscale_cols", "acc", ("acc",)),)
    return GemmSchedule(method=spec.name, arch=a, instruction=instruction, kernel=FIXUP_KERNEL,
                        config=f"{fix.FIX_BM}x{fix.FIX_BN}x{fix.FIX_BK}w{fix.FIX_WARPS}", mode=1, bk=fix.FIX_BK,
                        shift=spec.shift, piece_format=spec.piece_format, n_pieces=spec.n_pieces, params=params,
                        registers=regs, tile=tile, epilogue=epilogue, b_operand=b_operand, range_scaled=True,
                        notes="the row scan, the column groups and the tiling do not change the arithmetic")
