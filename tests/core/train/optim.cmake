# tests/core/train/optim.cmake: the optimizer's pieces checked on their own (issue 42): the clip
# scale, the weight-decay mask under ZeRO shards, and the logged and clipped gradient norm on real
# MPI ranks (np 1..3). Label numeric: CI reruns them under every OpenBLAS kernel.
loom_add_test(test_optim_clip ${CMAKE_CURRENT_SOURCE_DIR}/test_optim_clip.c loom_core)
set_tests_properties(test_optim_clip PROPERTIES LABELS numeric)
if(LOOM_HAVE_MPI)
  add_executable(test_optim_decay ${CMAKE_CURRENT_SOURCE_DIR}/test_optim_decay.c)
  target_link_libraries(test_optim_decay PRIVATE loom_core)
  add_executable(test_grad_norm ${CMAKE_CURRENT_SOURCE_DIR}/test_grad_norm.c)
  target_link_libraries(test_grad_norm PRIVATE loom_core)
  foreach(np 1 2 3)
    add_test(NAME optim_decay_np${np} COMMAND ${LOOM_MPIRUN} -np ${np} $<TARGET_FILE:test_optim_decay>)
    add_test(NAME optim_grad_norm_np${np} COMMAND ${LOOM_MPIRUN} -np ${np} $<TARGET_FILE:test_grad_norm>)
    set_tests_properties(optim_decay_np${np} optim_grad_norm_np${np} PROPERTIES LABELS numeric ENVIRONMENT
      "LOOM_SOURCE_DIR=${PROJECT_SOURCE_DIR};OMPI_MCA_mpi_yield_when_idle=1" TIMEOUT 300)
  endforeach()
endif()
