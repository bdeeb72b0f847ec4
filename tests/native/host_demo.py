"""The C++ host demo end to end, for the record: export an emulated PET (metatomic .pt calling the tcemu:: ops, the
native library among its extensions), run ``tcemu_host`` on a water cluster, and compare its energy and forces with
tcemu's Python path (the same neighbor lists) and with the FP64 model.

    PYTHONPATH=src python tests/native/host_demo.py --build build/native-tests --device cpu --out OUT_DIR

Writes ``host_demo_<device>.json`` (and the host's output) to OUT_DIR; needs the library and host built
(``python -m tcemu.native build --host --dir BUILD``).
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
import _host_inputs  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", required=True, type=Path)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--method", default="tf32x3")
    parser.add_argument("--molecules", type=int, default=8)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    import tcemu.native
    from metatomic.torch import load_atomistic_model
    from tcemu.mlip import models, systems

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    library, host = args.build / "libtcemu_native.so", args.build / "tcemu_host"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pet = models.build_pet("tiny")
        counts = tcemu.native.export_script(copy.deepcopy(pet).export(), args.method, out / "pet_emulated.pt",
                                            native_library=library)
        copy.deepcopy(pet).double().export().save(str(out / "pet64.pt"))
        copy.deepcopy(pet).export().save(str(out / "pet32.pt"))
    water = systems.water_cluster(args.molecules)
    _host_inputs.write_atoms(water, out / "water.txt")
    start = time.perf_counter()
    # bit comparisons on CUDA with torch's deterministic algorithms on both sides (_host_inputs.deterministic)
    done = subprocess.run([str(host), str(out / "pet_emulated.pt"), str(out / "water.txt"), "--device", args.device,
                           "--deterministic", str(int(args.device == "cuda"))],
                          capture_output=True, text=True, timeout=300)
    seconds = time.perf_counter() - start
    (out / f"host_{args.device}.txt").write_text(done.stdout + done.stderr)
    if done.returncode:
        sys.exit(f"tcemu_host failed: {done.stderr[-2000:]}")
    lines = done.stdout.splitlines()
    energy = float(next(line for line in lines if line.startswith("energy")).split()[1])
    forces = np.array([[float(v) for v in line.split()[1:]] for line in lines if line.startswith("force")])
    with warnings.catch_warnings(), _host_inputs.deterministic(args.device):
        warnings.simplefilter("ignore")
        e_py, f_py = _host_inputs.energy_forces(load_atomistic_model(str(out / "pet_emulated.pt")), water, args.device)
        e32, f32 = _host_inputs.energy_forces(load_atomistic_model(str(out / "pet32.pt")), water, args.device)
        e64, f64 = _host_inputs.energy_forces(load_atomistic_model(str(out / "pet64.pt")), water, "cpu")
    record = {
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "torch": torch.__version__, "method": args.method, "deterministic": args.device == "cuda", "atoms": len(water), "rewritten_ops": counts,
        "host_seconds_including_load": round(seconds, 3),
        "energy_host": energy, "energy_python": e_py, "energy_fp32": e32, "energy_fp64": e64,
        "energy_bit_equal": bool(np.float32(energy) == np.float32(e_py)),
        "forces_bit_equal": bool(np.array_equal(forces.astype(np.float32), f_py)),
        "forces_max_abs_diff_vs_python": float(np.abs(forces.astype(np.float32) - f_py).max()),
        "force_error_vs_fp64_mean": float(np.linalg.norm(forces - f64, axis=1).mean()),
        "fp32_force_error_vs_fp64_mean": float(np.linalg.norm(f32 - f64, axis=1).mean()),
        "energy_error_vs_fp64": abs(energy - e64), "fp32_energy_error_vs_fp64": abs(e32 - e64),
    }
    (out / f"host_demo_{args.device}.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
