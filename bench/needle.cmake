# bench/needle.cmake: bench_needle BASE.safetensors [B T STEPS QAT]: the needle family's loss and
# gradient pass on a Needle base checkpoint (bench/needle.sh runs it next to Needle's own step).
add_executable(bench_needle ${CMAKE_CURRENT_SOURCE_DIR}/bench_needle.c)
target_link_libraries(bench_needle PRIVATE loom_core)
# bench_needle_decode BASE.safetensors [N P NEW BATCH UNCACHED]: the needle family's KV-cached greedy
# decoding (and the cache-less one) in tokens/s: the loom side of bench/needle_decode.sh.
add_executable(bench_needle_decode ${CMAKE_CURRENT_SOURCE_DIR}/bench_needle_decode.c)
target_link_libraries(bench_needle_decode PRIVATE loom_core)
# bench_needle_ops [THREADS [ROUNDS]]: the needle family's element-wise and mixing ops at the
# default config's step shapes, each against the bytes it moves at the same run's copy rate.
add_executable(bench_needle_ops ${CMAKE_CURRENT_SOURCE_DIR}/bench_needle_ops.c)
target_link_libraries(bench_needle_ops PRIVATE loom_cpu loom_util)
