#!/usr/bin/env bash
# One GPU call (BUDGET seconds): PET's MD step (energy and forces) at the given water sizes, each configuration
# against FP32 in the same mode, interleaved rounds (benchmarks/md_step.py --interleave-steps). Needs the PET
# stack as .site.tgz (benchmarks/pet_stack_archive.sh; an ignored file: carry it). Writes under $OUT: gpu.txt
# (versions, commit, a summary), md.log and <name>.csv (with its figure).
#   usage: OUT=... bash benchmarks/pet_sizes.sh BUDGET SHAPES SYSTEMS CONFIGS NAME [ROUNDS] [REPEATS]
#   e.g.   OUT=out bash benchmarks/pet_sizes.sh 580 s water_1536,water_5184 \
#              fp32:compile,tf32:compile,tf32x3+attn:compile,bf16x6+attn:compile pet-s_1536_5184
set -u
T0=$(date +%s)
BUDGET=$1 SHAPES=$2 SYSTEMS=$3 CONFIGS=$4 NAME=$5 ROUNDS=${6:-3} REPEATS=${7:-15}
OUT=${OUT:-out}
mkdir -p "$OUT"
tar xzf .site.tgz -C /tmp
export PYTHONPATH=/tmp/pet_site:$PWD/src
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  git rev-parse --short HEAD 2>/dev/null
  env | grep '^TCEMU_' ; } > "$OUT/gpu.txt" 2>&1
left=$(( BUDGET - ($(date +%s) - T0) - 5 ))
timeout "$left" python benchmarks/md_step.py --shapes "$SHAPES" --systems "$SYSTEMS" --configs "$CONFIGS" \
  --interleave-steps --rounds "$ROUNDS" --repeats "$REPEATS" --warmup 3 --traceback \
  --out "$OUT/$NAME.csv" > "$OUT/md.log" 2>&1  # (the CSV is written after every round: a timeout keeps them)
echo "md rc=$? $(( $(date +%s) - T0 )) s" >> "$OUT/gpu.txt"
grep -E "^  |^==" "$OUT/md.log" | tail -40 >> "$OUT/gpu.txt"
cat "$OUT/gpu.txt"
