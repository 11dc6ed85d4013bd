# bench/lora.cmake: bench_lora B T RANK STEPS LOSS_FRAC [THREADS] [tiny]: one LoRA fine-tune step
# on SmolLM2-135M shapes on the CPU backend (bench/lora.sh runs it next to transformers + PEFT).
add_executable(bench_lora ${CMAKE_CURRENT_SOURCE_DIR}/bench_lora.c)
target_link_libraries(bench_lora PRIVATE loom_core)
