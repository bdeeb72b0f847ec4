"""The linear-layer products of PET S and PET M (``tcemu.mlip.models.build_pet``) on water, by system size: what
``benchmarks/gemm_decision.py`` measures and the decision's GPU tests re-time.

Recorded with forward hooks on every ``nn.Linear`` of PET S and M in one energy+forces step of the 192-atom water
box (CPU, metatrain 2026.4.1): rows are atoms times a per-class count, the padded neighbours per atom
(``edge``: 40 for S, cutoff 8.0 A; 47 for M, 8.5 A), those plus the centre (``token``), or one per atom (``node``).
A supercell of the box keeps every atom's neighbourhood, so the counts per atom hold at every size. The layers
with one output (energy heads) and the 4-wide embedding are left out: the FLOP rule sends them to SGEMM.
"""

from __future__ import annotations

#: water systems of ``tcemu.mlip.systems``: the 192-atom box and its supercells
ATOMS = (192, 1536, 5184, 17280)

#: model -> class -> (rows per atom, [(in features K, out features N), ...])
LAYERS: dict[str, dict[str, tuple[int, list[tuple[int, int]]]]] = {
    "pet-s": {
        "edge": (40, [(256, 256), (256, 1024), (512, 256), (512, 512), (768, 256)]),
        "token": (41, [(256, 256), (256, 768)]),
        "node": (1, [(256, 256), (256, 1024), (1024, 256), (1024, 4096), (2048, 1024)]),
    },
    "pet-m": {
        "edge": (47, [(384, 384), (384, 1536), (768, 384), (768, 768), (1152, 384)]),
        "token": (48, [(384, 384), (384, 1152)]),
        "node": (1, [(384, 384), (384, 1536), (1536, 384), (1536, 6144), (3072, 1536)]),
    },
}


def products(models: tuple[str, ...] = ("pet-s", "pet-m")) -> dict[tuple[str, int, int], list[tuple[str, int]]]:
    """(role, N, K) -> [(label, M), ...] of each product of ``models``'s layers at every size of ``ATOMS``.

    ``fwd`` is ``x @ W^T`` (N outputs, contraction K: the layer's out and in features); ``bwd_input`` is
    ``dy @ W`` (N = the layer's in features, contraction over its out features)."""
    out: dict[tuple[str, int, int], list[tuple[str, int]]] = {}
    for model in models:
        for cls, (per_atom, layers) in LAYERS[model].items():
            for k_in, n_out in layers:
                for role, N, K in (("fwd", n_out, k_in), ("bwd_input", k_in, n_out)):
                    for atoms in ATOMS:
                        out.setdefault((role, N, K), []).append((f"{model} {cls} {atoms}", per_atom * atoms))
    return out
