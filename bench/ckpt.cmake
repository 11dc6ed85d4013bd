# bench_ckpt_io: checkpoint save/load MB/s vs raw write()+fsync/read() (bench/ckpt_io.c).
# Run: bench_ckpt_io [DIR] [--fletcher32]   (DIR defaults to /tmp; needs ~3 GB free disk, 1.5 GB RAM)
add_executable(bench_ckpt_io ${CMAKE_CURRENT_LIST_DIR}/ckpt_io.c)
target_link_libraries(bench_ckpt_io PRIVATE loom_ckpt loom_util loom_deps)
