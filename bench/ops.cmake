# bench/ops.cmake: CPU op benchmarks. bench_sgemm [threads] [min_seconds_per_shape]: sgemm
# GFLOP/s for the matmul shapes of a GPT-2 124M step at 1024 tokens vs the square 2048^3 rate.
add_executable(bench_sgemm ${CMAKE_CURRENT_SOURCE_DIR}/bench_sgemm.c)
target_link_libraries(bench_sgemm PRIVATE loom_cpu loom_util)
# bench_cpu_step [threads] [steps]: one GPT-2 124M step's op sequence on the CPU backend, time per
# op family, step FLOP/s as a fraction of the calibrated sgemm peak (the MFU bar).
add_executable(bench_cpu_step ${CMAKE_CURRENT_SOURCE_DIR}/bench_cpu_step.c)
target_link_libraries(bench_cpu_step PRIVATE loom_cpu loom_util)
# bench_gemm_libs [threads] [rounds] [min_seconds] [model]: sgemm GFLOP/s of OpenBLAS, BLIS and
# oneDNN (each dlopen'd; a missing one is named with its package) alternated on the shapes of
# SmolLM2-135M LoRA, GPT-2 124M and gpt2-small6 steps. Standalone: links no loom library.
add_executable(bench_gemm_libs ${CMAKE_CURRENT_SOURCE_DIR}/bench_gemm_libs.c)
target_link_libraries(bench_gemm_libs PRIVATE ${CMAKE_DL_LIBS} m)
target_include_directories(bench_gemm_libs PRIVATE ${PROJECT_SOURCE_DIR}) # cpu_gemm.h: types only
# bench_skinny [threads] [rounds]: a decode step's products (1-64 rows x SmolLM2-135M's weights) on
# loom's few-rows kernel against OpenBLAS's sgemm, weights in cache and from memory.
add_executable(bench_skinny ${CMAKE_CURRENT_SOURCE_DIR}/bench_skinny.c)
target_link_libraries(bench_skinny PRIVATE loom_cpu loom_util)
# bench_attention [threads] [rounds] [B T H Hkv D]: causal attention forward and backward GFLOP/s
# on the CPU backend against the same threads' sgemm rate (default: a SmolLM2-135M LoRA step's).
add_executable(bench_attention ${CMAKE_CURRENT_SOURCE_DIR}/bench_attention.c)
target_link_libraries(bench_attention PRIVATE loom_cpu loom_util)
