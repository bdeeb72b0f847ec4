"""Names as a reader of the report should see them: potentials say whether their weights are random or trained,
systems say what they are and how many atoms they have (``water_192`` is "water, 192 atoms")."""

from __future__ import annotations

import re

__all__ = ["case_label", "potential_label", "system_label"]

_NAMED = {"ani1x": "ANI-1x", "chgnet": "CHGNet", "mace-random": "MACE (random weights)"}

#: System name patterns (``tcemu.mlip.systems``) and what they are.
_SYSTEMS = (
    (r"water_cluster_(\d+)", "water cluster"),
    (r"water_(\d+)", "water"),
    (r"pt111_co(?:_(\d+))?", "CO on Pt(111)"),
    (r"cantor_(\d+)", "Co-Cr-Fe-Mn-Ni slab"),
    (r"pt_fcc_(\d+)", "fcc Pt (bulk)"),
)


def _distilled_label(short: bool) -> str:
    from tcemu.mlip.distilled import metadata

    meta = metadata()
    status = meta.get("status", "-")
    if status == "h200":
        return "PET distilled from CHGNet (trained, for validation)"
    training = meta.get("training", {})
    if short:
        return f"PET distilled from CHGNet ({status} checkpoint, not trained to use)"
    err = meta.get("errors", {}).get("test", {}).get("all", {})
    rel = ""
    if err.get("force_rms_label_meV_per_A"):
        rel = (f", test force RMSE {100 * err['force_rmse_meV_per_A'] / err['force_rms_label_meV_per_A']:.0f} % "
               "of the labels' RMS")
    return (f"PET distilled from CHGNet ({status} checkpoint: a pipeline check, "
            f"{training.get('epochs_done', '?')} epoch(s){rel}; not trained to use)")


def potential_label(potential_name: str, short: bool = False) -> str:
    """``pet-s`` is "PET-S (random weights)", ``pet-distilled`` "PET distilled from CHGNet (trained, for
    validation)" (a checkpoint that is not the trained one says so), ``ani1x`` "ANI-1x"; others as given.
    ``short`` keeps plot titles short."""
    from tcemu.mlip.distilled import is_random_weights

    name = potential_name.lower()
    compiled = name.endswith("-compiled")
    key = name.removesuffix("-compiled")
    if key == "pet-distilled":
        text = _distilled_label(short)
    elif key == "pet-distilled-random":
        text = "PET, pet-distilled's architecture (random weights)"
    elif is_random_weights(key):
        shape, *rest = key[4:].split("-")
        text = "PET-" + "-".join([shape.upper() if len(shape) <= 2 else shape, *rest]) + " (random weights)"
    else:
        text = _NAMED.get(key, potential_name.removesuffix("-compiled") if compiled else potential_name)
    if compiled:
        text = text.replace(" (", " with torch.compile (", 1) if " (" in text else text + " with torch.compile"
    return text


def system_label(system_name: str, n_atoms: int | None = None) -> str:
    """``water_192`` is "water, 192 atoms", ``pt111_co_38`` "CO on Pt(111), 38 atoms"; others as given."""
    for pattern, what in _SYSTEMS:
        if match := re.fullmatch(pattern, system_name):
            n = n_atoms if n_atoms is not None else (int(match.group(1)) if match.group(1) else None)
            return what if n is None else f"{what}, {n:,} atoms"
    return system_name if n_atoms is None else f"{system_name}, {n_atoms:,} atoms"


def case_label(potential_name: str, system_name: str, n_atoms: int | None = None, short: bool = False) -> str:
    """"<potential> on <system>", both as :func:`potential_label` and :func:`system_label` write them."""
    return f"{potential_label(potential_name, short)} on {system_label(system_name, n_atoms)}"
