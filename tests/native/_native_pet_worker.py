"""Energy and forces of an exported emulated model in a process where only the native library provides the
``tcemu::`` ops (tcemu is never imported):
``python _native_pet_worker.py MODE LIBRARY MODEL.pt ATOMS.xyz OUT.npy DEVICE``.

MODE ``load_library``: ``torch.ops.load_library(LIBRARY)`` then metatomic's ASE calculator; ``extensions``: the
library is not loaded here, metatomic loads it from the model's extensions metadata (as LAMMPS's pair style does).
Three evaluations: the first (TorchScript's profiling run), the second (its optimized graphs), one without graph
optimizations."""

import sys
import warnings

import numpy as np
import torch

torch.set_num_threads(1)  # as the test process (tests/conftest.py)
mode, library, model, atoms_path, out, device = sys.argv[1:7]
if device == "cuda":  # as the test's side (_host_inputs.deterministic: PET's index_add adds with atomics on CUDA)
    torch.use_deterministic_algorithms(True, warn_only=True)
if mode == "load_library":
    torch.ops.load_library(library)

import ase.io  # noqa: E402
from metatomic_ase import MetatomicCalculator  # noqa: E402

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    calc = MetatomicCalculator(model, device=device)
    atoms = ase.io.read(atoms_path)
    results = []
    for optimized in (True, True, False):
        calc.reset()
        a = atoms.copy()
        a.calc = calc
        with torch.jit.optimized_execution(optimized):
            results.append(np.concatenate([[a.get_potential_energy()], np.asarray(a.get_forces()).ravel()]))
assert "tcemu" not in sys.modules, "the native worker imported tcemu"
np.save(out, np.stack(results))
