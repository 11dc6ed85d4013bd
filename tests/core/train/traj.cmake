# tests/core/train/traj.cmake: loom's training step against PyTorch's (issue 42): 5 steps of GPT-2 and
# Llama, full and LoRA, through finetune_run, against tests/fixtures/traj (make_traj.py). Label
# numeric: CI reruns it under every OpenBLAS kernel.
loom_add_test(test_traj ${CMAKE_CURRENT_SOURCE_DIR}/test_traj.c loom_core)
set_tests_properties(test_traj PROPERTIES LABELS numeric TIMEOUT 300
                     ENVIRONMENT "LOOM_SOURCE_DIR=${PROJECT_SOURCE_DIR};LOOM_GEMM=openblas")
