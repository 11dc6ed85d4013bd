# tests/core/text/sft.cmake: fine-tuning data: chat rendering and loss masks, JSONL loading and its
# errors, the train/val split, length buckets, deterministic batches, tool-call grading, and the
# shipped configs/data/tools.jsonl. Links the text room alone.
loom_add_test(test_sft ${CMAKE_CURRENT_SOURCE_DIR}/test_sft.c loom_text)
set_tests_properties(test_sft PROPERTIES ENVIRONMENT "LOOM_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
# the grader's verdicts apart: right arguments under a wrong name are not an exact call
loom_add_test(test_toolcall_grade ${CMAKE_CURRENT_SOURCE_DIR}/test_toolcall_grade.c loom_text)

# Needle's data (chat format "needle") against needle.model.finetune's own rendering (fixtures by
# tests/fixtures/needle/make_tokenizer_fixtures.py): ids, masks, the length bucket, refusals.
loom_add_test(test_needle_rows ${CMAKE_CURRENT_SOURCE_DIR}/test_needle_rows.c loom_text)
set_tests_properties(test_needle_rows PROPERTIES ENVIRONMENT "LOOM_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
