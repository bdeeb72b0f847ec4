#!/usr/bin/env bash
# One GPU call (at most 9 minutes: each step has its timeout): the small-shape decision table of this GPU, the GPU
# tests of the decision against it, and the GEMM anchors (cuBLAS SGEMM/TF32/BF16, Triton's built-in tl.dot modes,
# XLA's presets, CUTLASS's 3xTF32 GEMM, tcemu's kernels) on a handful of PET S and M products. Writes under $OUT:
#   decision/decision_<gpu>.json, decision/gemm_decision.csv, decision.log   (benchmarks/gemm_decision.py)
#   decision_tests.log                                                       (pytest -m gpu, the decision tests)
#   anchors.csv, anchors.png, anchors.log, cutlass_3xtf32/                   (benchmarks/gemm.py)
# CUTLASS's headers come from the nvidia-cutlass wheel at $CUTLASS_WHEEL (default below; without it the other
# anchors still run): pip download nvidia-cutlass==4.2.0.0 --no-deps -d .whl (an ignored folder: carry it)
set -u
OUT=${OUT:-out}
WHEEL=${CUTLASS_WHEEL:-.whl/nvidia_cutlass-4.2.0.0-py3-none-any.whl}
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv > "$OUT/gpu.txt" 2>&1

# CUTLASS's kernel compiles on the CPU while the GPU measures the table
CUTLASS_ARG=()
BUILD=
if [ -f "$WHEEL" ]; then
  python benchmarks/cutlass_3xtf32/build.py --cutlass "$WHEEL" --out "$OUT/cutlass_3xtf32" > "$OUT/cutlass_build.log" 2>&1 &
  BUILD=$!
  CUTLASS_ARG=(--cutlass "$WHEEL")
else
  echo "no $WHEEL: CUTLASS 3xTF32 left out" | tee "$OUT/cutlass_build.log"
fi

timeout 290 python benchmarks/gemm_decision.py --out-dir "$OUT/decision" --budget-s 210 2>&1 | tee "$OUT/decision.log"
TABLE=$(ls "$OUT"/decision/decision_*.json 2>/dev/null | head -1)
if [ -n "$TABLE" ]; then
  TCEMU_SMALL_SHAPE_TABLE="$TABLE" timeout 60 python -m pytest -q -p no:cacheprovider -m gpu -s \
    tests/emulation/gemm/test_decision.py > "$OUT/decision_tests.log" 2>&1
  tail -3 "$OUT/decision_tests.log"
fi

if [ -n "$BUILD" ]; then wait "$BUILD"; fi
# PET S: edge layers at 192 and 5,184 atoms, a node layer at 5,184; PET M: an edge layer at 1,536 atoms
SHAPES=7680x256x1024,7680x512x256,207360x256x1024,207360x512x256,5184x1024x4096,72192x384x1536
timeout 180 python benchmarks/gemm.py --out "$OUT/anchors.csv" --shapes "$SHAPES" --methods tf32x3,bf16x6,bf16x3 \
  --no-autotune --xla-all --xla-presets TF32_TF32_F32_X3,BF16_BF16_F32_X6 --rep 50 ${CUTLASS_ARG[@]+"${CUTLASS_ARG[@]}"} \
  2>&1 | tee "$OUT/anchors.log"
