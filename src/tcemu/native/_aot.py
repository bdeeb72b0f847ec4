"""The GEMM kernels compiled ahead of time for the native library (``python -m tcemu.native build``).

The installed Triton compiles tcemu's split kernel, the pointer-load GEMM kernel (``_kernels/_emu_mm.py``, A split
beforehand) and the range fix-up kernel for sm_80 and sm_90a, for tf32x3, bf16x3, bf16x6 and bf16x9, without a GPU.
:func:`generate` writes the cubins (one blob) and a C++ source that embeds them (``.incbin``) with what the
launcher needs: kernel name, warps, shared memory, the parameter list (Triton's trailing scratch pointers
included, read from the PTX) and the tiles. Where Triton cannot be imported or a compile fails, the source holds no
kernel and says why: the library then runs the reference on CUDA.

The bits: a GEMM kernel's result depends on its K-tile (``BK``) and its correction-level mode, not on the tile of C,
warps or stages; the configurations below keep the K-tile and mode of every configuration the Python path picks
(:mod:`tcemu.emulation.gemm.configs`): BK = 32 and mode 1 for tf32x3, BK = 64 and mode 1 for bf16x3 and bf16x6,
BK = 64 and mode 0 for bf16x9.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

#: the architectures compiled for (Triton's target: 90 is sm_90a)
ARCHS = (80, 90)
#: the methods with kernels
METHODS = ("tf32x3", "bf16x3", "bf16x6", "bf16x9")
#: files written by :func:`generate`
SOURCE, BLOB, INDEX = "aot_kernels.cpp", "aot_kernels.bin", "aot_kernels.json"


@dataclass(frozen=True)
class Tiles:
    """A GEMM configuration: tile of C, K-tile, mode, warps, stages."""

    bm: int
    bn: int
    bk: int
    mode: int
    warps: int
    stages: int


#: (arch, method) -> GEMM tiles. K-tile and mode as the Python path's (module docstring); the tiles of C those of
#: its Triton kernel on Hopper, smaller on sm_80 (the general kernels within the 99 KiB of shared memory of sm_86
#: and sm_89, with room to spare)
GEMM_TILES: dict[tuple[int, str], Tiles] = {
    (90, "tf32x3"): Tiles(128, 128, 32, 1, 8, 3), (90, "bf16x3"): Tiles(128, 128, 64, 1, 8, 3),
    (90, "bf16x6"): Tiles(128, 64, 64, 1, 8, 3), (90, "bf16x9"): Tiles(128, 64, 64, 0, 8, 3),
    (80, "tf32x3"): Tiles(64, 64, 32, 1, 4, 3), (80, "bf16x3"): Tiles(128, 64, 64, 1, 4, 3),
    (80, "bf16x6"): Tiles(128, 64, 64, 1, 8, 3), (80, "bf16x9"): Tiles(128, 64, 64, 0, 8, 3),
}
#: the split kernel's tile (rows, columns) and warps, as ``launch.split_t`` launches it
SPLIT_TILE, SPLIT_WARPS = (64, 64), 4

_GEMM_PTRS = ("a_ptr", "a1_ptr", "a2_ptr", "b0_ptr", "b1_ptr", "b2_ptr", "bias_ptr", "c_ptr", "flag_ptr")
_GEMM_STRIDES = ("stride_az", "stride_am", "stride_bz", "stride_bn", "stride_cz", "stride_cm")
#: GEMM arguments fixed to 1: A's pieces, B's pieces and C are contiguous along K and N
_GEMM_UNIT = ("stride_ak", "stride_bk", "stride_cn")


@dataclass
class Compiled:
    """One compiled kernel and its launch contract."""

    key: str
    arch: int
    method: str
    kind: str
    variant: str
    name: str
    cubin: bytes
    num_warps: int
    num_ctas: int
    shared: int
    args: list[tuple[str, str]]  # the launcher's arguments: (name, Triton type), constexprs left out
    params: list[str]  # the cubin's parameters from the PTX: "ptr", "u32", "u64"
    extra: list[str]  # the parameters Triton appends after the arguments: "global_scratch", "profile_scratch"
    scratch: dict[str, int]
    tiles: tuple[int, int, int]
    cooperative: bool
    pdl: bool

    def index_entry(self) -> dict:
        """What the JSON index lists (all but the cubin)."""
        d = {k: v for k, v in self.__dict__.items() if k != "cubin"}
        d["cubin_bytes"] = len(self.cubin)
        return d


def _piece_type(method: str) -> str:
    return "*fp32" if method == "tf32x3" else "*bf16"


def _fmt(method: str) -> int:
    return 0 if method == "tf32x3" else 1


def _ptx_params(ptx: str, name: str) -> list[str]:
    """The entry's parameters in order, as "ptr", "u32", "u64" (or the PTX type)."""
    m = re.search(r"\.entry\s+" + re.escape(name) + r"\s*\((.*?)\)", ptx, re.S)
    if not m:
        raise RuntimeError(f"no .entry {name} in the PTX")
    out = []
    for line in m.group(1).split(","):
        line = line.strip()
        if not line:
            continue
        t = re.match(r"\.param\s+\.(\w+)(\s+\.ptr)?", line)
        if not t:
            raise RuntimeError(f"unreadable PTX parameter {line!r}")
        width = re.sub(r"^[bsu]", "u", t.group(1))
        out.append("ptr" if t.group(2) else width)
    return out


_SIZES = {"ptr": 8, "u64": 8, "s64": 8, "u32": 4, "s32": 4}
_ARG_SIZE = {"i32": 4, "i64": 8}


def _compile(fn, arch: int, args: list[tuple[str, str]], constexprs: dict, warps: int, stages: int | None,
             divisible: tuple[str, ...], key: str, method: str, kind: str, variant: str,
             tiles: tuple[int, int, int]) -> Compiled:
    import triton  # noqa: PLC0415
    from triton.backends.compiler import GPUTarget  # noqa: PLC0415
    from triton.compiler import ASTSource, make_backend  # noqa: PLC0415

    target = GPUTarget("cuda", arch, 32)
    names = fn.arg_names
    signature = dict(args) | dict.fromkeys(constexprs, "constexpr")
    signature = {n: signature[n] for n in names if n in signature}
    backend = make_backend(target)  # Triton's own spelling of "divisible by 16" (its launches' specialisation)
    parsed = backend.parse_attr("D") if hasattr(backend, "parse_attr") else [["tt.divisibility", 16]]
    attrs = {(names.index(n),): parsed for n in divisible}
    options = {"num_warps": warps} | ({"num_stages": stages} if stages is not None else {})
    k = triton.compile(ASTSource(fn, signature, constexprs=constexprs, attrs=attrs), target=target, options=options)
    md = k.metadata
    params = _ptx_params(k.asm["ptx"], md.name)
    launch_args = [(n, signature[n]) for n in names if n in signature and signature[n] != "constexpr"]
    if len(params) < len(launch_args):
        raise RuntimeError(f"{key}: the cubin takes {len(params)} parameters, fewer than its {len(launch_args)} "
                           "arguments")
    for (n, ty), p in zip(launch_args, params):
        want = "ptr" if ty.startswith("*") else {"i32": "u32", "i64": "u64"}[ty]
        if _SIZES.get(p) != _SIZES[want] or (want == "ptr") != (p == "ptr"):
            raise RuntimeError(f"{key}: argument {n} ({ty}) is a PTX .{p} parameter")
    extra = ["global_scratch", "profile_scratch"][: len(params) - len(launch_args)]
    if len(params) - len(launch_args) > 2 or any(p != "ptr" for p in params[len(launch_args):]):
        raise RuntimeError(f"{key}: unknown trailing parameters {params[len(launch_args):]} (Triton's launcher ABI)")
    scratch = {f: int(getattr(md, f, 0) or 0) for f in ("global_scratch_size", "global_scratch_align",
                                                       "profile_scratch_size", "profile_scratch_align")}
    return Compiled(key, arch, method, kind, variant, md.name, k.asm["cubin"], md.num_warps,
                    getattr(md, "num_ctas", 1), md.shared, launch_args, params, extra, scratch, tiles,
                    bool(getattr(md, "launch_cooperative_grid", False)), bool(getattr(md, "launch_pdl", False)))


def _split(arch: int, method: str) -> Compiled:
    from tcemu.emulation.gemm._kernels._split import _split_t_kernel  # noqa: PLC0415
    from tcemu.emulation.methods import get_method  # noqa: PLC0415

    spec = get_method(method)
    pd = _piece_type(method)
    args = [("b_ptr", "*fp32"), ("p0_ptr", pd), ("p1_ptr", pd), ("p2_ptr", pd), ("R", "i32"), ("C", "i32"),
            ("stride_br", "i64"), ("stride_bc", "i64")]
    consts = dict(FMT=_fmt(method), NP=spec.n_pieces, SHIFT=spec.shift, BR=SPLIT_TILE[0], BC=SPLIT_TILE[1])
    return _compile(_split_t_kernel, arch, args, consts, SPLIT_WARPS, None, (), f"sm{arch}/{method}/split/-",
                    method, "split", "-", (SPLIT_TILE[0], SPLIT_TILE[1], 0))


def _gemm(arch: int, method: str, bias: bool, aligned: bool) -> Compiled:
    from tcemu.emulation.gemm._kernels._emu_mm import _emu_mm_kernel  # noqa: PLC0415
    from tcemu.emulation.methods import get_method  # noqa: PLC0415

    spec, t = get_method(method), GEMM_TILES[arch, method]
    pd = _piece_type(method)
    args = [(n, pd) for n in _GEMM_PTRS[:6]] + [("bias_ptr", "*fp32"), ("c_ptr", "*fp32"), ("flag_ptr", "*i8")]
    args += [("M", "i32"), ("N", "i32"), ("K", "i32")] + [(n, "i64") for n in _GEMM_STRIDES]
    consts = dict.fromkeys(_GEMM_UNIT, 1) | dict(
        FMT=_fmt(method), NP=spec.n_pieces, SHIFT=spec.shift, METHOD=METHODS.index(method), MODE=t.mode,
        DOT_FMT=_fmt(method), HAS_BIAS=bias, EVEN_K=False, BM=t.bm, BN=t.bn, BK=t.bk, GROUP_M=8, FAST_SPLIT=False,
        A_PRESPLIT=True, L0_FIRST=False, PERSISTENT=False, RANGE_CHECK=True)
    divisible = (*_GEMM_PTRS, "N", "K", *_GEMM_STRIDES) if aligned else ()
    variant = f"bias{int(bias)}.align{int(aligned)}"
    return _compile(_emu_mm_kernel, arch, args, consts, t.warps, t.stages, divisible,
                    f"sm{arch}/{method}/gemm/{variant}", method, "gemm", variant, (t.bm, t.bn, t.bk))


def _fixup(arch: int, method: str, bias: bool, pieces: bool) -> Compiled:
    from tcemu.emulation.gemm import range_fixup as rf  # noqa: PLC0415
    from tcemu.emulation.gemm._kernels import _range_fixup as fx  # noqa: PLC0415
    from tcemu.emulation.methods import get_method  # noqa: PLC0415

    spec = get_method(method)
    bt = _piece_type(method) if pieces else "*fp32"
    args = [("a_ptr", "*fp32"), ("b_ptr", bt), ("b1_ptr", bt), ("b2_ptr", bt), ("bias_ptr", "*fp32"),
            ("c_ptr", "*fp32"), ("flag_ptr", "*i8"), ("M", "i32"), ("N", "i32"), ("K", "i32"), ("T", "i32")]
    args += [(f"stride_{o}{d}", "i64") for o, dims in (("a", "zmk"), ("b", "znk"), ("c", "zmn")) for d in dims]
    consts = {k: v for k, v in rf._constexprs(spec, bias, pieces, False).items() if k != "num_warps"}
    variant = f"bias{int(bias)}.pieces{int(pieces)}"
    return _compile(fx._range_fixup_kernel, arch, args, consts, fx.FIX_WARPS, None, (),
                    f"sm{arch}/{method}/fixup/{variant}", method, "fixup", variant,
                    (fx.SCAN_ROWS, fx.FIX_BN, fx.FIX_BK))


def compile_all() -> list[Compiled]:
    """Every kernel the native library launches, for every architecture and method."""
    out = []
    for arch in ARCHS:
        for method in METHODS:
            out.append(_split(arch, method))
            out += [_gemm(arch, method, bias, aligned) for bias in (False, True) for aligned in (False, True)]
            out += [_fixup(arch, method, bias, pieces) for bias, pieces in ((False, False), (True, False),
                                                                            (False, True))]
    return out


def _fingerprint() -> str:
    """Triton's version and the kernels' sources: what the compiled kernels depend on."""
    import triton  # noqa: PLC0415

    gemm = Path(__file__).resolve().parents[1] / "emulation" / "gemm"
    h = hashlib.sha256(triton.__version__.encode())
    for f in [Path(__file__), gemm / "range_fixup.py", *sorted((gemm / "_kernels").glob("*.py"))]:
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _cxx_string(s: str) -> str:
    return json.dumps(s)  # a JSON string of ASCII is a valid C++ string literal


def _asm_path(path: Path) -> str:
    text = str(path.resolve())
    if any(c in text for c in '"\\\n'):
        raise RuntimeError(f"tcemu: the build directory's path {text!r} holds a quote, backslash or newline")
    return text


def _write_if_changed(path: Path, data: bytes) -> None:
    if not path.exists() or path.read_bytes() != data:
        path.write_bytes(data)


def _render(kernels: list[Compiled], blob: Path, status: str, version: str) -> str:
    lines = ["// Generated by tcemu.native._aot (python -m tcemu.native build): Triton's cubins of tcemu's GEMM "
             "kernels.", '#include "aot.h"', "", "namespace tcemu::aot {", ""]
    offsets, pos = [], 0
    for k in kernels:
        offsets.append(pos)
        pos += (len(k.cubin) + 15) // 16 * 16
    if kernels:
        lines += ["asm(\".section .rodata\\n.balign 16\\n.global tcemu_aot_blob\\n.hidden tcemu_aot_blob\\n"
                  f"tcemu_aot_blob:\\n.incbin \\\"{_asm_path(blob)}\\\""
                  "\\n.previous\\n\");",
                  'extern "C" const unsigned char tcemu_aot_blob[];', ""]
    lines.append("const KernelImage kKernels[] = {")
    for k, off in zip(kernels, offsets):
        arg_codes = "".join("p" if t.startswith("*") else ("i" if t == "i32" else "l") for _, t in k.args)
        extra = "".join("g" if e == "global_scratch" else "r" for e in k.extra)
        s = k.scratch
        lines.append(
            f"    {{{_cxx_string(k.key)}, {k.arch}, {_cxx_string(k.method)}, {_cxx_string(k.kind)}, "
            f"{_cxx_string(k.variant)}, {_cxx_string(k.name)}, {off}, {len(k.cubin)}, {k.num_warps}, {k.num_ctas}, "
            f"{k.shared}, {_cxx_string(arg_codes)}, {_cxx_string(extra)}, {s['global_scratch_size']}, "
            f"{max(1, s['global_scratch_align'])}, {s['profile_scratch_size']}, {max(1, s['profile_scratch_align'])}, "
            f"{k.tiles[0]}, {k.tiles[1]}, {k.tiles[2]}, {str(k.cooperative).lower()}, {str(k.pdl).lower()}}},")
    if not kernels:
        lines.append("    {}")
    lines += ["};", f"const int kKernelCount = {len(kernels)};",
              f"const char* const kStatus = {_cxx_string(status)};",
              f"const char* const kTritonVersion = {_cxx_string(version)};",
              "const unsigned char* blob() { return " + ("tcemu_aot_blob" if kernels else "nullptr") + "; }",
              "", "}  // namespace tcemu::aot", ""]
    return "\n".join(lines)


def generate(out: Path) -> Path:
    """Compile the kernels into ``out`` (the blob, the JSON index, the C++ source) unless they are up to date
    (same Triton and kernel sources); returns the C++ source. Never raises for a missing or failing Triton: the
    source then holds no kernel and its status says why."""
    out.mkdir(parents=True, exist_ok=True)
    source, blob, index = out / SOURCE, out / BLOB, out / INDEX
    try:
        import triton  # noqa: PLC0415

        version, stamp = triton.__version__, _fingerprint()
    except Exception as exc:  # noqa: BLE001 - any import failure: no kernels, and why
        version, stamp = "", ""
        status = f"Triton was not importable when the library was built ({type(exc).__name__}: {exc})"
    if stamp and index.exists() and source.exists():
        try:
            if json.loads(index.read_text()).get("fingerprint") == stamp:
                return source
        except (OSError, ValueError):
            pass
    kernels: list[Compiled] = []
    if stamp:
        try:
            kernels = compile_all()
            archs = ", ".join(f"sm_{a}{'a' if a == 90 else ''}" for a in ARCHS)
            status = f"{len(kernels)} kernels compiled by Triton {version} for {archs}"
        except Exception as exc:  # noqa: BLE001 - a compile failure: no kernels, and why
            kernels = []
            status = f"compiling the kernels with Triton {version} failed ({type(exc).__name__}: {str(exc)[:300]})"
    data = b"".join(k.cubin + b"\0" * (-len(k.cubin) % 16) for k in kernels)
    _write_if_changed(blob, data)
    entries = [k.index_entry() for k in kernels]
    _write_if_changed(index, json.dumps({"fingerprint": stamp, "triton": version, "status": status,
                                         "blob_sha256": hashlib.sha256(data).hexdigest(), "kernels": entries},
                                        indent=1).encode())
    text = _render(kernels, blob, status, version)
    text += f"// blob sha256 {hashlib.sha256(data).hexdigest()}\n"  # a new blob recompiles this source
    _write_if_changed(source, text.encode())
    return source
