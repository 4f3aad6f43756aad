. scripts/gpu_env.sh; T0=$(date +%s)
gpu_configure build-gpu > $OUT/build.log 2>&1; ninja -C build-gpu ferrite cuda_test >> $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 ))s"; grep -E "error" $OUT/build.log | head
build-gpu/tests/cuda/cuda_test --gtest_filter='CudaQuantMma*' > $OUT/cuda_test.log 2>&1; echo "cuda_test rc=$? $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' $OUT/cuda_test.log | tr '\n' ' ')"; grep -E "^\[  FAILED  \] [A-Z]|Failure|differ" $OUT/cuda_test.log | head
AB='qwen3-8b:fp8:FERRITE_CUDA_QUANT_MMA_SMEM_KIB=108,0 qwen3-8b:gptq-int4:FERRITE_CUDA_QUANT_MMA_SMEM_KIB=108,0' BATCHES='1 2 8' RUN_TIMEOUT=80 STAGE=ab bash bench/cuda/mma_probe.sh > /dev/null 2>&1; cat $OUT/mma_probe_ab.txt; cp $OUT/mma_probe_ab.txt $OUT/ab8b.txt
echo "t=$(( $(date +%s)-T0 ))s"
AB='qwen3.5-35b-a3b:gptq-int4:FERRITE_CUDA_MOE_MMA_U4=9' BATCHES='1 8 32 128' RUN_TIMEOUT=120 STAGE=ab bash bench/cuda/mma_probe.sh > /dev/null 2>&1; cat $OUT/mma_probe_ab.txt
echo "total $(( $(date +%s)-T0 ))s"
