#!/usr/bin/env bash
# Train tcemu's distilled PET (pet-distilled) on one H200 within BUDGET_S seconds of wall time (default 450):
# docs/mlip.md, "A trained PET to validate on". Run from the repository root on the GPU machine:
#
#   OUT=$OUT bash benchmarks/distill_train_h200.sh            (epochs sized to the budget by a calibration run)
#   EPOCHS=20 LR=1e-3 BUDGET_S=1500 OUT=$OUT bash benchmarks/distill_train_h200.sh   (the shipped model: fixed
#                                                             epochs, peak learning rate; about 14 minutes)
#
# A training longer than one call (600 s on the GPU machine) runs over several calls, each continuing the last
# one's output folder (RESUME) through metatrain's restart, toward the first call's EPOCHS on one learning-rate
# schedule. OUT must then survive between the calls: an ignored folder of the checkout such as out/, on a
# machine kept warm between back-to-back calls (the device's own $OUT is emptied before each command); RETURN
# names a folder (the device's $OUT) that gets a copy of the results, all but restart.ckpt (over 16 MB). Two calls:
#
#   EPOCHS=25 LR=1e-3 BUDGET_S=560 OUT=out/train-1 RETURN=$OUT bash benchmarks/distill_train_h200.sh
#   RESUME=out/train-1 BUDGET_S=560 OUT=out/train-2 RETURN=$OUT bash benchmarks/distill_train_h200.sh
#
# Each call stops within BUDGET_S, ships and evaluates the best model so far, and records the chain in
# pet_distilled.json; the second takes EPOCHS and LR from the first's options.yaml. A lost machine loses the chain's
# restart.ckpt (it stays on the machine): start again from the first call.
#
# Needs the committed data (benchmarks/data/pet_distilled/) and, where metatrain is not installed, its wheels in
# .whl/ (Python 3.12 wheels of metatrain 2026.4.1 and its stack, downloaded with pip where there is network; carry .whl).
# Writes into $OUT: pet_distilled.ckpt and pet_distilled.json (-> src/tcemu/mlip/data/), options.yaml,
# train.csv, train.log, errors.csv, training_curves.png, distill_train.log (-> benchmarks/results/h200/mlip/pet_distilled/).
set -euo pipefail
start=$(date +%s)
OUT=${OUT:-distill-out}
BUDGET_S=${BUDGET_S:-450}  # everything below, the wheel install included; the training stops itself within it
mkdir -p "$OUT"
if ! python3 -c "import metatrain" 2>/dev/null; then
  test -d .whl || { echo "metatrain is not installed and there is no .whl/ folder of wheels to install it from" >&2; exit 2; }
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
left=$(( BUDGET_S - ($(date +%s) - start) ))
echo "wheels ready after $(( $(date +%s) - start )) s; training budget ${left} s"
python3 -m tcemu.mlip.distill train --data benchmarks/data/pet_distilled --out "$OUT" --device cuda --budget-s "$left" \
  ${EPOCHS:+--epochs $EPOCHS} ${LR:+--learning-rate $LR} ${RESUME:+--resume $RESUME}
echo "total $(( $(date +%s) - start )) s"
ls -la "$OUT"
if [ -n "${RETURN:-}" ]; then
  mkdir -p "$RETURN"
  find "$OUT" -maxdepth 1 -type f ! -name restart.ckpt -exec cp {} "$RETURN"/ \;
fi
