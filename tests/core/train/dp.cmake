# tests/core/train/dp.cmake: data parallelism and ZeRO on real MPI ranks (np 1..4), and a dead rank.
if(LOOM_HAVE_MPI)
  add_executable(test_dp ${CMAKE_CURRENT_SOURCE_DIR}/test_dp.c)
  target_link_libraries(test_dp PRIVATE loom_core)
  foreach(np 1 2 3 4)
    add_test(NAME dp_np${np} COMMAND ${LOOM_MPIRUN} -np ${np} $<TARGET_FILE:test_dp>)
    set_tests_properties(dp_np${np} PROPERTIES ENVIRONMENT
      "LOOM_SOURCE_DIR=${PROJECT_SOURCE_DIR};OMPI_MCA_mpi_yield_when_idle=1" TIMEOUT 300)
  endforeach()
  # the head in chunks of 37 rows (LOOM_HEAD_CHUNK, model.h): its gradient computed in the forward
  # (the tied embedding's, region 0) must still be reduced and sharded right at every stage
  foreach(np 2 4)
    add_test(NAME dp_np${np}_head_chunk COMMAND ${LOOM_MPIRUN} -np ${np} $<TARGET_FILE:test_dp>)
    set_tests_properties(dp_np${np}_head_chunk PROPERTIES ENVIRONMENT
      "LOOM_SOURCE_DIR=${PROJECT_SOURCE_DIR};OMPI_MCA_mpi_yield_when_idle=1;LOOM_HEAD_CHUNK=37" TIMEOUT 300)
  endforeach()
endif()
