# bench/fuzz/fuzz.cmake: libFuzzer binaries for loom's input parsers (see fuzz_targets.h). Never
# part of the normal build: bench/fuzz.sh configures the tree with clang, every loom library under
# -fsanitize=fuzzer-no-link,address,undefined (so the fuzzer sees loom's coverage), and injects
# this file with -DCMAKE_PROJECT_loom_INCLUDE (it runs right after project(loom); loom_core is
# resolved when the targets are generated).
foreach(t config jsonl ckpt safetensors needle tokenizer spm text hf gguf)
  add_executable(fuzz_${t} ${CMAKE_CURRENT_LIST_DIR}/fuzz_main.c ${CMAKE_CURRENT_LIST_DIR}/fuzz_targets.c)
  target_compile_definitions(fuzz_${t} PRIVATE FUZZ_TARGET=${t} _POSIX_C_SOURCE=200809L
                             LOOM_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  target_link_libraries(fuzz_${t} PRIVATE loom_core)
  target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
endforeach()
