#!/usr/bin/env bash
# One GPU call (BUDGET seconds, default 585): the direct-launch GPU test (tests/emulation/gemm/test_direct_launch.py:
# the same bits as Triton's launch path on every kernel path), the GPU test that the small-shape decision holds
# under torch.compile (tests/emulation/gemm/test_decision.py), the host and GPU time of the library path with and
# without direct launches (benchmarks/gemm_small_m.py, PET S's 192-atom edge shapes), then PET S's 192-atom MD
# step under CUDA graphs and compiled, FP32, TF32 and TF32x3 with attention, 3 interleaved rounds
# (benchmarks/md_step.py). Needs the PET stack as .site.tgz (benchmarks/pet_stack_archive.sh; an ignored file:
# carry it). On a GPU without a shipped small-shape table, the host-path timing gives way to measuring that GPU's
# table (benchmarks/gemm_decision.py), which the step then uses. Writes under $OUT: gpu.txt (versions and a
# summary), direct_gpu.log, decision_modes_gpu.log, small_m.log, gemm_small_m_direct.csv (H100), decision/ and decision.log (other GPUs),
# md192.log, pet-s_192_<rule>.csv.
#   usage: OUT=... bash benchmarks/host_path_and_pet192.sh [BUDGET]
set -u
T0=$(date +%s)
BUDGET=${1:-585}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
OUT=${OUT:-out}
mkdir -p "$OUT"
tar xzf .site.tgz -C /tmp
export PYTHONPATH=/tmp/pet_site:$PWD/src
N=""; python -c "import xdist" 2>/dev/null && N="-n 8"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  git rev-parse --short HEAD 2>/dev/null; } > "$OUT/gpu.txt" 2>&1
python -c "import metatomic.torch, metatrain; print('PET stack ok')" >> "$OUT/gpu.txt" 2>&1
s=$(date +%s)
timeout 130 python -m pytest -q -p no:cacheprovider -m gpu $N -rfE tests/emulation/gemm/test_direct_launch.py \
  > "$OUT/direct_gpu.log" 2>&1
echo "direct tests rc=$? $(( $(date +%s) - s )) s: $(tail -1 "$OUT/direct_gpu.log")" >> "$OUT/gpu.txt"
grep -E "FAILED|Error" "$OUT/direct_gpu.log" | head -10 >> "$OUT/gpu.txt"
# the small-shape decision holds eagerly and under torch.compile (a layer above its thresholds runs tcemu's kernels)
timeout 120 python -m pytest -q -p no:cacheprovider -m gpu -rfE -k runs_the_emulated_kernels \
  tests/emulation/gemm/test_decision.py > "$OUT/decision_modes_gpu.log" 2>&1
echo "decision modes rc=$?: $(tail -1 "$OUT/decision_modes_gpu.log")" >> "$OUT/gpu.txt"
grep -E "^FAILED|^E  " "$OUT/decision_modes_gpu.log" | head -6 | cut -c1-400 >> "$OUT/gpu.txt"
s=$(date +%s)
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$GPU" in *H100*) SMALL_M=100;; *) SMALL_M=0;; esac
[ "$SMALL_M" -gt 0 ] && timeout $SMALL_M python benchmarks/gemm_small_m.py --rows 7680 --shapes 256x1024,256x256 --methods tf32x3,bf16x6 \
  --configs-rows 0 --rounds 3 --out "$OUT/gemm_small_m_direct.csv" > "$OUT/small_m.log" 2>&1
echo "small_m rc=$? $(( $(date +%s) - s )) s" >> "$OUT/gpu.txt"
grep -E "linear|sgemm graph" "$OUT/small_m.log" >> "$OUT/gpu.txt"
RULE=table
case "$GPU" in
  *H100*) ;;
  *) # no shipped table for this GPU: measure one (benchmarks/gemm_decision.py), then the step uses it
    s=$(date +%s)
    timeout 200 python benchmarks/gemm_decision.py --out-dir "$OUT/decision" --budget-s 120 > "$OUT/decision.log" 2>&1
    echo "decision rc=$? $(( $(date +%s) - s )) s" >> "$OUT/gpu.txt"
    TABLE=$(ls "$OUT"/decision/decision_*.json 2>/dev/null | head -1)
    if [ -n "$TABLE" ]; then export TCEMU_SMALL_SHAPE_TABLE=$TABLE; RULE=measured
    else export TCEMU_SMALL_SHAPE_FALLBACK=0; RULE=nofallback; fi;;
esac
echo "md192 small-shape rule: $RULE" >> "$OUT/gpu.txt"
s=$(date +%s)
timeout $(( $(left) - 5 )) python benchmarks/md_step.py --shapes s --systems water_192 \
  --configs fp32:graph,tf32:graph,tf32x3+attn:graph,fp32:compile,tf32x3+attn:compile \
  --interleave-steps --rounds 3 --repeats 20 --warmup 3 --traceback \
  --out "$OUT/pet-s_192_${RULE}.csv" > "$OUT/md192.log" 2>&1
echo "md192 rc=$? $(( $(date +%s) - s )) s" >> "$OUT/gpu.txt"
grep -E "^  |^==" "$OUT/md192.log" | tail -30 >> "$OUT/gpu.txt"
cat "$OUT/gpu.txt"
