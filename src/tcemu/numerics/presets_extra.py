"""Presets beyond the measured NVIDIA set: Turing (sm_75), FP64 DMMA (sm_80+), and the AMD CDNA hook.

Literature-based (no hardware data here); :func:`tcemu.numerics.presets.get_preset` asks :func:`extra_preset`
first and falls back to its own table when it answers None.

- **Turing** (``turing``, ``sm_75``, ``t4``): ``mma.m16n8k8`` fp16 -> fp32/fp16 (one block of 8) and the
  ``mma.m8n8k4`` it keeps from Volta (one block of 4; also c fp16 -> d fp32, output ``"fp32.fp16"``); F = 24
  (MMA-Sim ``arch_accum_fractional_bits["Turing"]``, no split-k on Turing; Fasi et al. tested a T4 through
  WMMA only). The disputed floors take MMA-Sim's choices (c = 0 at -126 for fp32 out, none for fp16 out; c
  aligned at least at -126 / -14) for every variant: the toolbox has no Turing model, and tcemu's measured
  floors are Hopper's.
- **FP64 DMMA** (``input_format="fp64"``): ``mma.m8n8k4.f64`` on a100, ada, h100, b200, sm120 and
  ``mma.m16n8k{4,8,16}.f64`` on h100 (sm_90): a chain of fp64 FMAs in increasing k from c, each rounded to
  nearest even (PTX ISA, ``mma`` with ``.f64``: "fused multiply-add"; MMA-Sim ``nv_ptx.mma`` for ``float64``).
  The chain does not depend on how K is split into instructions.
"""

from __future__ import annotations

from .model_fma import FMAChain
from .params import MMAParams
from .rounding import Rounding

#: the .f32.f16.f16.f16 presets (c fp16, d fp32) of V100 and Turing mma.m8n8k4
C16_SRC = ("c fp16 -> d fp32 (mma.m8n8k4 .f32.f16.f16.f16): c converted exactly to fp32, then the "
           "fp32-output model: MMA-Sim nv_ptx.mma (C.to(d_type)) and its Volta/Turing qualifier lists; no "
           "hardware data (the public measurements take c in d's format)")


def canon_output(output_format: str) -> str:
    """The key form of an output format: ``"fp32"``, ``"fp16"``, ``"e8m13"``, ``"fp64"``; ``"fp32.fp16"``
    (d.c, as PTX's .dtype ... .ctype) for fp32 d with c in fp16."""
    from .formats import get_format

    parts = [get_format(x).name for x in str(output_format).lower().split(".")]
    if len(parts) not in (1, 2):
        raise ValueError(f"tcemu: output format {output_format!r}: give d's format, or d.c, e.g. fp32.fp16")
    return parts[0] if parts[0] == parts[-1] else ".".join(parts)


__all__ = ["extra_preset", "extra_keys", "TURING_ALIASES", "C16_SRC", "canon_output"]

TURING_ALIASES = ("turing", "sm_75", "t4", "sm75")
_NV = {"a100": "a100", "sm_80": "a100", "a30": "a100", "a2": "a100", "ada": "ada", "sm_89": "ada", "l40s": "ada",
       "h100": "h100", "h200": "h200", "sm_90": "h100", "sm_90a": "h100", "b200": "b200", "sm_100": "b200",
       "sm_100a": "b200", **{a: "sm120" for a in ("sm120", "sm_120", "sm_120a", "rtx_blackwell", "rtx5090",
                                                   "rtx_pro_6000")}}
# shapes' K per architecture (m8n8k4; m16n8k4/8/16 on sm_90 only, as MMA-Sim's lists)
_DMMA_K = {"a100": (4,), "ada": (4,), "h100": (4, 8, 16), "h200": (4, 8, 16), "b200": (4,), "sm120": (4,)}
_DMMA_SRC = ("chain of fp64 FMAs (RNE) in k order: PTX ISA mma .f64; MMA-Sim @ c785138 nv_ptx.mma (libm fma per k); "
             "NaN results: a NaN operand's payload quieted (b's, else the running sum's, else a's), 0xFFF8000000000000 "
             "for invalid operations (measured on the H100, docs/hardware/h100-dmma.json)")
_SM120_DMMA_SRC = ("sm_120: m8n8k4.f64 is in MMA-Sim's 'RTX Blackwell' list (it takes Ampere's qualifiers), "
                   "as on B200; no hardware data")
_TURING_SRC = ("MMA-Sim @ c785138 nv_ptx.mma Turing: F=24 (arch_accum_fractional_bits), one block per instruction "
               "(no split-k), c=0 at -126, zero factors left out (tcemu's H100 measurement, not Turing's); "
               "literature-based, no Turing hardware data")


def _turing(instruction: str, fin: str, fout: str, variant: str) -> MMAParams:
    ins = str(instruction).lower().replace("mma.sync", "mma")
    if ins in ("mma", "mma.m16n8k8"):
        k = 8
    elif ins == "mma.m8n8k4":
        k = 4
    else:
        raise ValueError(f"tcemu: turing has mma.m16n8k8 and mma.m8n8k4 (fp16), not {instruction!r}")
    if fin != "fp16" or fout not in ("fp32", "fp16") + (("fp32.fp16",) if k == 4 else ()):
        raise ValueError(f"tcemu: turing mma takes fp16 -> fp32 or fp16 (m8n8k4 also fp32.fp16: c fp16), not "
                         f"{fin} -> {fout}")
    if variant not in ("measured", "mmasim", "toolbox"):  # all MMA-Sim's choices: no toolbox Turing model
        raise ValueError(f"tcemu: variant must be 'measured', 'mmasim' or 'toolbox', got {variant!r}")
    c16 = fout == "fp32.fp16"  # .f32.f16.f16.f16: c fp16, converted exactly to fp32 first (MMA-Sim)
    fout = "fp32" if c16 else fout
    fp16_out = fout == "fp16"
    return MMAParams("fp16", fout, k, k, 24, Rounding.RNE if fp16_out else Rounding.RZ,
                     czero_floor=None if fp16_out else -126, c_exp_floor=-14 if fp16_out else -126,
                     c_input_format="fp16" if c16 else None,
                     label=f"turing mma.m{16 if k == 8 else 8}n8k{k} fp16->{fout}" + (" (c fp16)" * c16),
                     sources=_TURING_SRC + ("; " + C16_SRC if c16 else ""),
                     # MMA-Sim's zero input at exponent -126 (a zero factor's product in E_max) for its variant; the
                     # default leaves zero products out, as the H100 does (docs/hardware/h100-zero-factor.json)
                     zero_factor_exp=-126 if variant == "mmasim" else None)


def _dmma(arch: str, instruction: str, fout: str, variant: str = "measured") -> MMAParams:
    ins = str(instruction).lower().replace("mma.sync", "mma")
    valid = {"m8n8k4": 4}
    if arch in ("h100", "h200"):
        valid.update({f"m16n8k{k}": k for k in _DMMA_K[arch]})
    shape = "m8n8k4" if ins == "mma" else ins.removeprefix("mma.")
    if shape not in valid:
        raise ValueError(f"tcemu: fp64 mma on {arch} has shapes {sorted(valid)}, not {instruction!r}")
    if fout != "fp64":
        raise ValueError(f"tcemu: fp64 mma returns fp64, not {fout}")
    if variant not in ("measured", "mmasim", "toolbox"):
        raise ValueError(f"tcemu: variant must be 'measured', 'mmasim' or 'toolbox', got {variant!r}")
    # the H100's NaNs (h100-dmma.json): where NaNs meet in one FMA, b's, the sum's, then a's; MMA-Sim's host fma
    # (x86's FMA instruction through glibc; its variant) takes b's, then a's, then the sum's
    scheme = FMAChain(nan_bits=0xFFF8000000000000, nan_rule="propagate",
                      nan_order="bad" if variant == "mmasim" else "bda")
    return MMAParams("fp64", "fp64", valid[shape], 1, 0, Rounding.RNE, scheme=scheme,
                     label=f"{arch} mma.{shape} fp64->fp64",
                     sources=(_SM120_DMMA_SRC + "; " if arch == "sm120" else "") + _DMMA_SRC)


def extra_preset(arch: str, instruction: str, input_format: str, output_format: str,
                 variant: str) -> MMAParams | None:
    """The preset if this module covers the combination (Turing, FP64, AMD), else None."""
    from .formats import get_format
    from .presets_amd import amd_preset, canon_amd_arch

    a = str(arch).lower()
    if canon_amd_arch(a) is not None:
        return amd_preset(a, instruction, input_format, output_format, variant)
    if a in TURING_ALIASES:
        return _turing(instruction, get_format(input_format).name, canon_output(output_format), variant)
    if str(input_format).lower() in ("fp64", "f64", "float64") and a in _NV:
        return _dmma(_NV[a], instruction, canon_output(output_format), variant)
    return None


def extra_keys() -> list[tuple[str, str, str, str]]:
    """(arch, instruction, input, output) of every preset here."""
    from .presets_amd import amd_keys

    keys = [("turing", f"mma.{s}", "fp16", o) for s in ("m16n8k8", "m8n8k4") for o in ("fp32", "fp16")]
    keys += [("turing", "mma.m8n8k4", "fp16", "fp32.fp16")]
    for arch, ks in _DMMA_K.items():
        keys += [(arch, "mma.m8n8k4", "fp64", "fp64")]
        keys += [(arch, f"mma.m16n8k{k}", "fp64", "fp64") for k in ks if arch in ("h100", "h200")]
    return sorted(keys) + amd_keys()
