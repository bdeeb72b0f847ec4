"""Physics validation of emulated-FP32 interatomic potentials (part 3 of tcemu).

- :mod:`tcemu.mlip.models`: potentials (PET random/checkpoint) as ASE calculators per method (``fp64``,
  ``fp32``, or an emulation method via :func:`tcemu.emulate_`), each run's coverage measured;
- :mod:`tcemu.mlip.calculators`: ANI-1x, CHGNet, MACE and any ASE calculator factory (the factory protocol);
- :mod:`tcemu.mlip.systems`: named structures (water box, supercell, CO on Pt(111), Cantor slab);
- :mod:`tcemu.mlip.tasks`: the checks (single point, energy curve, NVE, relaxation), frozen results;
- :mod:`tcemu.mlip.fire2`: FIRE2 in PyTorch with the NVIDIA ALCHEMI update and defaults;
- :mod:`tcemu.mlip.report`: the suite and report; :mod:`tcemu.mlip.criteria`: the verdicts (none without 99 %
  coverage); :mod:`tcemu.mlip.plots`: figures.

Needs the ``mlip`` extra (``pip install 'tcemu[mlip]'``).
"""

from __future__ import annotations

import importlib

__all__ = ["calculators", "criteria", "fire2", "models", "plots", "report", "systems", "tasks"]


def __getattr__(name: str):
    if name in __all__:
        return importlib.import_module(f"tcemu.mlip.{name}")
    raise AttributeError(f"module 'tcemu.mlip' has no attribute {name!r}")
