#!/usr/bin/env bash
# Pack the PET stack (metatrain, metatomic, metatensor, vesin, ASE and their pure-Python dependencies) for a GPU
# machine with no network, small enough to travel with the repository in one device call: the wheels in WHEELS
# (Python 3.12 builds for the GPU machine, e.g. `pip download --only-binary=:all: --python-version 3.12 ...`) are
# unpacked into one folder, the compiled libraries kept only for TORCH's version (metatomic-torch and
# metatensor-torch ship one per torch release) and ASE's test suite dropped, then archived as ARCHIVE.
# There: tar xzf ARCHIVE -C /tmp && export PYTHONPATH=/tmp/pet_site:$PWD/src
#   usage: benchmarks/pet_stack_archive.sh WHEELS [ARCHIVE (.site.tgz)] [TORCH (2.11)]
set -euo pipefail
wheels=$1
archive=${2:-.site.tgz}
torch_version=${3:-2.11}
work=$(mktemp -d)
site=$work/pet_site
mkdir -p "$site"
for w in "$wheels"/*.whl; do
  case $w in *nvidia_cutlass*) continue;; esac
  python3 -m zipfile -e "$w" "$site"
done
find "$site" -type d -name 'torch-2.*' ! -name "torch-$torch_version" -prune -exec rm -rf {} +
rm -rf "$site/ase/test"
[ -d "$site/metatomic/torch/torch-$torch_version" ] || { echo "no metatomic-torch build for torch $torch_version" >&2; exit 1; }
tar czf "$archive" -C "$work" pet_site
rm -rf "$work"
ls -l "$archive"
