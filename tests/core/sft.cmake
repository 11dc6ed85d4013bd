# tests/core/sft.cmake: fine-tuning data: chat rendering and loss masks, JSONL loading and its
# errors, the train/val split, length buckets, deterministic batches, tool-call grading, and the
# shipped configs/data/tools.jsonl. Built from the sources alone so it does not wait on loom_core.
add_library(loom_sft_only STATIC
  ${PROJECT_SOURCE_DIR}/core/chat.c
  ${PROJECT_SOURCE_DIR}/core/chat_format.c
  ${PROJECT_SOURCE_DIR}/core/sft_data.c
  ${PROJECT_SOURCE_DIR}/core/toolcall.c)
target_link_libraries(loom_sft_only PUBLIC loom_tokenizer loom_util loom_deps)

loom_add_test(test_sft ${PROJECT_SOURCE_DIR}/tests/core/test_sft.c loom_sft_only)
set_tests_properties(test_sft PROPERTIES ENVIRONMENT "LOOM_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
# batches by length (data.bucket): order, rank splits, padding share, the model at T' < T
loom_add_test(test_sft_bucket ${PROJECT_SOURCE_DIR}/tests/core/test_sft_bucket.c loom_core)
add_test(NAME finetune_bucket_resume COMMAND ${PROJECT_SOURCE_DIR}/tests/core/finetune_bucket_resume.sh
         $<TARGET_FILE:loom> $<TARGET_FILE:ckpt_compare> ${LOOM_MPIRUN})
set_tests_properties(finetune_bucket_resume PROPERTIES TIMEOUT 600)
