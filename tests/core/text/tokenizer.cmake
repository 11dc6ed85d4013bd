# tests/core/text/tokenizer.cmake: the tokenizers (byte, tokenizer.json BPE, SentencePiece) against the fixtures
# tests/fixtures/tokenizers/make_fixtures.py made with the `tokenizers` library (no Python here).
loom_add_test(test_tokenizer ${CMAKE_CURRENT_SOURCE_DIR}/test_tokenizer.c loom_text)
set_tests_properties(test_tokenizer PROPERTIES ENVIRONMENT "LOOM_SOURCE_DIR=${PROJECT_SOURCE_DIR}")

# SentencePiece (.model) against the `sentencepiece` library (fixtures by
# tests/fixtures/needle/make_tokenizer_fixtures.py): ids and decode, and the files it refuses.
loom_add_test(test_spm ${CMAKE_CURRENT_SOURCE_DIR}/test_spm.c loom_text)
set_tests_properties(test_spm PROPERTIES ENVIRONMENT "LOOM_SOURCE_DIR=${PROJECT_SOURCE_DIR}")

# The CLI: a tokenizer.json loom cannot read ends `loom tokenize` with one line, non-zero exit;
# a token file made by another tokenizer is refused by a job whose model uses a different one.
set(TOK_EXPECT ${PROJECT_SOURCE_DIR}/tests/launch/expect_fail.sh)
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/wordpiece.json "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}")
add_test(NAME cli_tokenizer_unsupported COMMAND ${TOK_EXPECT} "wordpiece.json: unsupported model type"
         $<TARGET_FILE:loom> tokenize ${PROJECT_SOURCE_DIR}/configs/data/corpus.txt tok_out.bin
         --tokenizer ${CMAKE_CURRENT_BINARY_DIR}/wordpiece.json)
# A .model that is not a SentencePiece proto (here a JSON file), and one cut short: one line each.
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/notspm.model "{\"model\": {\"type\": \"BPE\"}}")
add_test(NAME cli_tokenizer_spm_bad COMMAND ${TOK_EXPECT} "notspm.model: not a SentencePiece model"
         $<TARGET_FILE:loom> tokenize ${PROJECT_SOURCE_DIR}/configs/data/corpus.txt tok_out.bin
         --tokenizer ${CMAKE_CURRENT_BINARY_DIR}/notspm.model)
add_test(NAME cli_tokenizer_spm_cut COMMAND sh -c
         "head -c 3000 \"$1\" > cut.model && shift && exec \"$@\"" sh ${PROJECT_SOURCE_DIR}/tests/fixtures/needle/plain.model
         ${TOK_EXPECT} "cut.model: truncated SentencePiece model"
         $<TARGET_FILE:loom> tokenize ${PROJECT_SOURCE_DIR}/configs/data/corpus.txt tok_out.bin --tokenizer cut.model)
add_test(NAME cli_tokenizer_mismatch COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer_mismatch.sh
         $<TARGET_FILE:loom> ${PROJECT_SOURCE_DIR})

# Chat formats against transformers' apply_chat_template (fixtures by chat_fixtures.py).
loom_add_test(test_chat ${CMAKE_CURRENT_SOURCE_DIR}/test_chat.c loom_text)
set_tests_properties(test_chat PROPERTIES ENVIRONMENT "LOOM_SOURCE_DIR=${PROJECT_SOURCE_DIR}")

# A fine-tune on OpenAI-style rows with a tokenizer.json, end to end, in ChatML (Hermes tool calls)
# and in Mistral v0.3's format (tool call ids, [TOOL_RESULTS]), and on Needle's rows with its
# SentencePiece model (the needle format picked by the tokenizer), and in Qwen3's (think blocks,
# reasoning rows); each with a row it refuses.
foreach(fmt chatml:qwen2.5 qwen3:qwen3 mistral:mistral needle:needle)
  string(REPLACE ":" ";" pair ${fmt})
  list(GET pair 0 name)
  list(GET pair 1 format)
  add_test(NAME finetune_${name} COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/finetune_chat.sh
           $<TARGET_FILE:loom> ${PROJECT_SOURCE_DIR} ${format})
  set_tests_properties(finetune_${name} PROPERTIES TIMEOUT 300)
endforeach()

# A resume compares the tokenizer's content hash, not the model.tokenizer path.
add_test(NAME tokenizer_resume COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer_resume.sh
         $<TARGET_FILE:loom> ${PROJECT_SOURCE_DIR})
set_tests_properties(tokenizer_resume PROPERTIES TIMEOUT 300)
