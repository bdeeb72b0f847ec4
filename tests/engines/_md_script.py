"""A small ASE MD script that never imports tcemu (run by test_autoload.py in a subprocess).

usage: python _md_script.py WATER_XYZ STEPS   -> prints the final energy and one force component (repr)
"""

import sys

import numpy as np
import torch
from ase import units
from ase.io import read
from ase.md.verlet import VelocityVerlet
from metatomic_ase import MetatomicCalculator
from metatrain.pet import PET
from metatrain.utils.architectures import get_default_hypers
from metatrain.utils.data import DatasetInfo
from metatrain.utils.data.target_info import get_energy_target_info

try:
    from ase.md.velocitydistribution import thermalize_momenta
except ImportError:  # ase < 3.29: the same draw by its former name
    from ase.md.velocitydistribution import MaxwellBoltzmannDistribution as thermalize_momenta

torch.set_num_threads(1)
hypers = get_default_hypers("pet")["model"]
hypers.update(d_node=64, d_pet=32, d_feedforward=64, d_head=32, num_gnn_layers=1, num_attention_layers=1,
              cutoff=5.0, num_neighbors_adaptive=8)
info = DatasetInfo(length_unit="Angstrom", atomic_types=[1, 8],
                   targets={"energy": get_energy_target_info("energy", {"quantity": "energy", "unit": "eV"})})
torch.manual_seed(0)
model = PET(hypers, info).float().eval()

atoms = read(sys.argv[1])[:24]
atoms.calc = MetatomicCalculator(model.export(), device="cpu")
thermalize_momenta(atoms, temperature_K=300, rng=np.random.default_rng(0))
VelocityVerlet(atoms, 0.5 * units.fs).run(int(sys.argv[2]))
print(repr(atoms.get_potential_energy()), repr(float(atoms.get_forces()[0, 0])))
print("tcemu imported by the script itself:", "tcemu.ase" in sys.modules)
