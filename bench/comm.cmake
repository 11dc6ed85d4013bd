# bench/comm.cmake: bench_allreduce (raw MPI_Allreduce vs comm_allreduce in 25 MB buckets).
# Run: mpirun --allow-run-as-root --oversubscribe -np 2 bench/bench_allreduce [max_mb] [bucket_mb]
if(LOOM_HAVE_MPI)
  add_executable(bench_allreduce ${CMAKE_CURRENT_LIST_DIR}/allreduce.c)
  target_link_libraries(bench_allreduce PRIVATE loom_comm)
endif()
