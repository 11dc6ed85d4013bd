# bench/generate.cmake: bench_generate BATCH PROMPT NEW [THREADS] [tiny]: batched greedy decoding
# through model_gen on the CPU backend, SmolLM2-135M shapes (bench/generate.sh runs it next to HF).
add_executable(bench_generate ${CMAKE_CURRENT_SOURCE_DIR}/bench_generate.c)
target_link_libraries(bench_generate PRIVATE loom_core)
