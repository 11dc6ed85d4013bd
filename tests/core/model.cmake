# tests/core: the model (gradients, overfit) and the training loop (determinism, data).
loom_add_test(test_model ${CMAKE_CURRENT_SOURCE_DIR}/test_model.c loom_core)
loom_add_test(test_train ${CMAKE_CURRENT_SOURCE_DIR}/test_train.c loom_core)
set_tests_properties(test_train PROPERTIES ENVIRONMENT "LOOM_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
