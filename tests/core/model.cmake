# tests/core: the model (gradients, overfit) and the training loop (determinism, data).
loom_add_test(test_model ${CMAKE_CURRENT_SOURCE_DIR}/test_model.c loom_core)
loom_add_test(test_generate ${CMAKE_CURRENT_SOURCE_DIR}/test_generate.c loom_core)
loom_add_test(test_train ${CMAKE_CURRENT_SOURCE_DIR}/test_train.c loom_core)
set_tests_properties(test_train PROPERTIES ENVIRONMENT "LOOM_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
add_test(NAME finetune_e2e COMMAND ${PROJECT_SOURCE_DIR}/tests/core/finetune_e2e.sh $<TARGET_FILE:loom> ${LOOM_MPIRUN})
set_tests_properties(finetune_e2e PROPERTIES TIMEOUT 300)
add_test(NAME generate_cli COMMAND ${PROJECT_SOURCE_DIR}/tests/core/generate_cli.sh $<TARGET_FILE:loom>)
set_tests_properties(generate_cli PROPERTIES TIMEOUT 300)
