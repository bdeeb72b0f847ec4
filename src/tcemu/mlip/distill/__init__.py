"""A trained PET to validate on: distilled from CHGNet with metatrain, shipped as ``pet-distilled``.

The physics checks need a PET with trained weights (a random-weight PET has no physical energy surface, and its
weights and activations are not those of a trained model), and none can be downloaded here. This package makes one
from what ships offline: a universal potential whose weights are inside its wheel (CHGNet) labels the benchmark
systems and their neighbourhoods, and metatrain (``mtt train``) trains a small PET on those labels.

- :mod:`tcemu.mlip.distill.dataset`: the structures, their labels and the train/val/test files (seeded);
- :mod:`tcemu.mlip.distill.train`: the metatrain options, the training run with a wall-clock budget, the
  shipped checkpoint and its errors against the labels;
- ``python -m tcemu.mlip.distill data|train|evaluate``: the command line of both.

The result is a distilled model for validating emulated FP32 arithmetic, not a production potential: it knows
the benchmark systems and nothing else, and it is as good as its teacher at best.
"""

from __future__ import annotations

import importlib

__all__ = ["dataset", "train"]


def __getattr__(name: str):
    if name in __all__:
        return importlib.import_module(f"tcemu.mlip.distill.{name}")
    raise AttributeError(f"module 'tcemu.mlip.distill' has no attribute {name!r}")
