#!/usr/bin/env bash
# One GPU call: build quant_gemm_bench (build-gpu), the tile against dequantize + cuBLASLt at
# real shapes, the diagnostic variants of the tile (FERRITE_TILE_DIAG, q4_k only), then ncu
# sections of one tile launch. Output: $OUT/tile_probe.txt (and the end on stdout).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:-$ROOT/out}"
mkdir -p "$OUT"
. "$ROOT/scripts/gpu_env.sh"
BUILD="${BUILD:-$ROOT/build-gpu}"
T="$OUT/tile_probe.txt"
T0=$(date +%s)
[ -f "$BUILD/build.ninja" ] || gpu_configure "$BUILD" > "$OUT/build.log" 2>&1
ninja -C "$BUILD" quant_gemm_bench >> "$OUT/build.log" 2>&1
echo "build rc=$? in $(( $(date +%s) - T0 )) s" | tee "$T"
QB="$BUILD/bench/cuda/quant_gemm_bench"
"$QB" --formats ${FORMATS:-q4_k,q8_0,u4_g128} --shapes 4096x4096,12288x4096,4096x12288,1024x4096 \
  --tokens 16,32,64,128 2>&1 | tee -a "$T"
for d in 1 2 3 4; do
  echo "== FERRITE_TILE_DIAG=$d" | tee -a "$T"
  FERRITE_TILE_DIAG=$d "$QB" --formats q4_k --shapes 12288x4096,4096x4096 --tokens 16,64 \
    --paths tile 2>&1 | tee -a "$T"
done
NCU="$(command -v ncu || echo /usr/local/cuda/bin/ncu)"
timeout 200 "$NCU" --clock-control none --kernel-name regex:quant_tile --launch-skip 3 \
  --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
  --section Occupancy --section MemoryWorkloadAnalysis --section LaunchStats \
  "$QB" --formats q4_k --shapes 12288x4096 --tokens 64 --paths tile --iters 2 --warmup 2 \
  > "$OUT/ncu.txt" 2>&1
grep -vE "^==PROF==|^\s*$|----" "$OUT/ncu.txt" | tail -120
