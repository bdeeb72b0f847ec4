"""``pet-distilled``: a PET with trained weights, shipped in the package, and its random-weight twin.

The checkpoint ``data/pet_distilled.ckpt`` is a PET trained with metatrain on CHGNet labels of the benchmark
systems (:mod:`tcemu.mlip.distill`); ``data/pet_distilled.json`` records how (teacher, data, GPU, versions, epochs,
time), its errors against the labels, and FP64 reference energies. It is a distilled model for validating
emulated FP32 arithmetic on trained weights, not a production potential: it knows water, CO on Pt(111) and
Co-Cr-Fe-Mn-Ni slabs near the structures it was trained on, and is at best as good as CHGNet.

``pet-distilled-random`` has the same architecture, hypers and elements with random weights (seeded, untrained
composition baseline and scale, as every random PET here): the suite runs both, so that the difference between
their rows is the weights alone.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from importlib import resources
from pathlib import Path

__all__ = [
    "CHECKPOINT_FILE",
    "METADATA_FILE",
    "NAMES",
    "checkpoint_path",
    "get",
    "is_random_weights",
    "metadata",
    "pet_distilled",
    "pet_distilled_random",
]

CHECKPOINT_FILE = "pet_distilled.ckpt"
METADATA_FILE = "pet_distilled.json"
#: The names :func:`get` knows.
NAMES = ("pet-distilled", "pet-distilled-random")


def _data_file(name: str) -> Path:
    return Path(str(resources.files("tcemu.mlip") / "data" / name))


def checkpoint_path() -> Path:
    """The shipped checkpoint; a clear error if this installation lacks it."""
    path = _data_file(CHECKPOINT_FILE)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: this tcemu installation has no distilled PET; train one with "
            "`python -m tcemu.mlip.distill train` (docs/mlip.md, 'A trained PET') and copy its pet_distilled.ckpt there"
        )
    return path


@cache
def metadata() -> dict:
    """``pet_distilled.json``: status (``h200`` or ``cpu-smoke``), teacher, data, training, errors, references."""
    path = _data_file(METADATA_FILE)
    return json.loads(path.read_text()) if path.is_file() else {}


def _description(meta: dict) -> str:
    text = meta.get("description") or "PET distilled from CHGNet labels of the benchmark systems; not a production potential"
    err = meta.get("errors", {}).get("test", {}).get("all")
    if err:
        text += (f"; test errors vs CHGNet: energy {err['energy_mae_meV_per_atom']:.1f} meV/atom (MAE), forces "
                 f"{err['force_rmse_meV_per_A']:.0f} meV/A (RMSE)")
    return text


def pet_distilled(compile: bool = False):
    """The shipped distilled PET (trained weights), loaded offline from the package."""
    from tcemu.mlip.pet import pet_checkpoint

    meta = metadata()
    pot = pet_checkpoint(checkpoint_path(), compile=compile)
    return replace(pot, name="pet-distilled" + ("-compiled" if compile else ""), description=_description(meta),
                   extra={**pot.extra, "status": meta.get("status", "-"), "weights": "trained"})


def _random_twin(seed: int):
    """The checkpoint's architecture (hypers, elements, energy target) with seeded random weights."""
    import torch
    from metatrain.pet import PET

    ckpt = torch.load(checkpoint_path(), weights_only=False, map_location="cpu")
    data = ckpt["model_data"]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = PET(data["model_hypers"], data["dataset_info"])
    return model.float().eval()


def pet_distilled_random(seed: int = 0, compile: bool = False):
    """``pet-distilled``'s architecture with random weights (seed ``seed``): the same GEMM shapes, no training."""
    from tcemu.mlip.pet import pet_checkpoint

    pot = pet_checkpoint(checkpoint_path(), compile=compile)
    return replace(pot, name="pet-distilled-random" + ("-compiled" if compile else ""),
                   build_module=lambda: _random_twin(seed),
                   description=f"pet-distilled's architecture with random weights (seed {seed}), untrained",
                   extra={**pot.extra, "weights": "random", "seed": seed})


def get(name: str, compile: bool = False):
    """A potential of :data:`NAMES` by name."""
    key = name.lower()
    if key == "pet-distilled":
        return pet_distilled(compile=compile)
    if key == "pet-distilled-random":
        return pet_distilled_random(compile=compile)
    raise ValueError(f"unknown distilled potential {name!r}; choose one of {', '.join(NAMES)}")


def is_random_weights(potential_name: str) -> bool:
    """Whether a suite potential name (``pet-xs``, ``pet-distilled-random``, ...) runs random weights."""
    from tcemu.mlip.pet import PET_SHAPES

    key = potential_name.lower().removesuffix("-compiled")
    return key == "pet-distilled-random" or (key.startswith("pet-") and key[4:] in PET_SHAPES)
