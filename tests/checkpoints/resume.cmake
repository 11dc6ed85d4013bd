# tests/checkpoints/resume.cmake: end-to-end checkpoint tests through the real `loom` binary, real
# mpirun ranks and real HDF5 files: exact resume, resharding over world sizes and ZeRO stages,
# refused configs, corrupt and unsealed files. Each script runs loom under `timeout`, so a hang fails.
add_executable(ckpt_compare ${CMAKE_CURRENT_SOURCE_DIR}/ckpt_compare.c)
target_link_libraries(ckpt_compare PRIVATE loom_ckpt loom_util loom_deps m)

set(LOOM_RESUME_ARGS $<TARGET_FILE:loom> $<TARGET_FILE:ckpt_compare>)
set(LOOM_RESUME_DIR ${CMAKE_CURRENT_SOURCE_DIR})

# 1. exact resume: 2k steps straight == k steps, crash, resume, k steps (bitwise, same world size)
add_test(NAME exact_resume_np1 COMMAND ${LOOM_RESUME_DIR}/exact_resume.sh ${LOOM_RESUME_ARGS} 1 0 ${LOOM_MPIRUN})
set_tests_properties(exact_resume_np1 PROPERTIES TIMEOUT 120)
if(LOOM_HAVE_MPI)
  add_test(NAME exact_resume_np2 COMMAND ${LOOM_RESUME_DIR}/exact_resume.sh ${LOOM_RESUME_ARGS} 2 0 ${LOOM_MPIRUN})
  add_test(NAME exact_resume_np2_z3 COMMAND ${LOOM_RESUME_DIR}/exact_resume.sh ${LOOM_RESUME_ARGS} 2 3 ${LOOM_MPIRUN})
  set_tests_properties(exact_resume_np2 exact_resume_np2_z3 PROPERTIES TIMEOUT 180)
endif()

# 2. resharding: saved on N ranks with ZeRO 0 or 3, loaded on 1..4 ranks (and another stage)
if(LOOM_HAVE_MPI)
  # (a) runs for every M; (b) continues on M = N and M = N % 4 + 1 only ("subset", ~90 s suite on
  # 2 cores) unless this is "all" (every M: 16 more multi-rank runs)
  set(LOOM_RESHARD_CONTINUE subset CACHE STRING "reshard tests: continue on every M (all) or a subset")
  foreach(stage 0 3)
    foreach(np 1 2 3 4)
      add_test(NAME reshard_z${stage}_np${np} COMMAND ${LOOM_RESUME_DIR}/reshard.sh ${LOOM_RESUME_ARGS}
               ${stage} ${np} ${LOOM_RESHARD_CONTINUE} ${LOOM_MPIRUN})
      set_tests_properties(reshard_z${stage}_np${np} PROPERTIES TIMEOUT 300)
    endforeach()
  endforeach()
endif()

# 3. refused: another model config, flipped tensor bytes, a truncated file (1 and 2 ranks)
if(LOOM_HAVE_MPI)
  add_test(NAME resume_refused COMMAND ${LOOM_RESUME_DIR}/refuse.sh ${LOOM_RESUME_ARGS} ${LOOM_MPIRUN})
else()
  add_test(NAME resume_refused COMMAND ${LOOM_RESUME_DIR}/refuse.sh ${LOOM_RESUME_ARGS})
endif()
# 4. `loom ckpt info`: a sound file (exit 0, step, every tensor), a flipped byte, a truncated file
add_test(NAME ckpt_info_cli COMMAND ${LOOM_RESUME_DIR}/ckpt_info.sh ${LOOM_RESUME_ARGS})
# a damaged link table (tensor names): clean errors, no crash, from the seal and (sealed anyway)
# from the HDF5-level checks (ckpt_info.c walks links by index: HDF5 1.10's H5Lvisit crashed here)
add_test(NAME ckpt_damaged_links COMMAND ${LOOM_RESUME_DIR}/damaged_links.sh ${LOOM_RESUME_ARGS})
# 5. the whole-file seal: a byte flipped mid-file refused by `ckpt info` and a resume (file left
# as it was), `loom ckpt seal` after an edit through HDF5 (and h5py when installed)
add_test(NAME ckpt_seal_cli COMMAND ${LOOM_RESUME_DIR}/seal.sh ${LOOM_RESUME_ARGS})
# 6. issue 18.3: every state attribute range-checked and checked against the rest of the file
# (edited copies, accepted by `loom ckpt seal`), each refused by name; a version 1 file resumes
add_test(NAME ckpt_state_attrs COMMAND ${LOOM_RESUME_DIR}/state_attrs.sh ${LOOM_RESUME_ARGS})
# 7. issue 18.6: LoRA adapters bound to their base (digest): resume / eval / merge on another base
# refused unless allowed explicitly; a copy of the base is the same base
add_test(NAME ckpt_lora_base COMMAND ${LOOM_RESUME_DIR}/lora_base.sh ${LOOM_RESUME_ARGS})
# 8. issue 39: `ckpt info`'s verdict is the load's (edited, re-sealed copies a resume refuses)
add_test(NAME ckpt_info_verdict COMMAND ${LOOM_RESUME_DIR}/info_verdict.sh ${LOOM_RESUME_ARGS})
set_tests_properties(resume_refused ckpt_info_cli ckpt_damaged_links ckpt_seal_cli ckpt_state_attrs ckpt_lora_base
                     ckpt_info_verdict PROPERTIES TIMEOUT 120)
