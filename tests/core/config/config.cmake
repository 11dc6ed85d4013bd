# tests/core/config/config.cmake: the job-config test, the docs/config.md generator and its drift check.
# Included by tests/core/config/CMakeLists.txt; also run as a script (cmake -P) by config_docs_drift,
# which regenerates the docs and compares them with the committed docs/config.md.
if(CMAKE_SCRIPT_MODE_FILE)
  get_filename_component(generated_dir ${GENERATED} DIRECTORY)
  file(MAKE_DIRECTORY ${generated_dir})
  execute_process(COMMAND ${GENERATOR} ${GENERATED} RESULT_VARIABLE gen_rc)
  if(NOT gen_rc EQUAL 0)
    message(FATAL_ERROR "config_docs_drift: ${GENERATOR} failed (${gen_rc})")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${COMMITTED} ${GENERATED}
                  RESULT_VARIABLE differ)
  if(differ)
    find_program(DIFF_TOOL diff)
    if(DIFF_TOOL)
      execute_process(COMMAND ${DIFF_TOOL} -u ${COMMITTED} ${GENERATED})
    endif()
    message(FATAL_ERROR "docs/config.md is out of date with the field table in "
            "core/config/config_table.c (diff above). Regenerate it:\n  cp ${GENERATED} ${COMMITTED}")
  endif()
  return()
endif()

# The config room alone (loom_config: no backends/comm/ckpt).
add_executable(loom_config_docs ${PROJECT_SOURCE_DIR}/core/config/config_docs_main.c)
target_link_libraries(loom_config_docs PRIVATE loom_config)
add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/docs/config.md
  COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/docs
  COMMAND loom_config_docs ${CMAKE_BINARY_DIR}/docs/config.md
  DEPENDS loom_config_docs
  COMMENT "Generating docs/config.md from the config field table"
  VERBATIM)
add_custom_target(config_docs ALL DEPENDS ${CMAKE_BINARY_DIR}/docs/config.md)

loom_add_test(test_config ${PROJECT_SOURCE_DIR}/tests/core/config/test_config.c loom_config)
add_test(NAME config_docs_drift
  COMMAND ${CMAKE_COMMAND} -DGENERATOR=$<TARGET_FILE:loom_config_docs>
          -DGENERATED=${CMAKE_BINARY_DIR}/docs/config.md
          -DCOMMITTED=${PROJECT_SOURCE_DIR}/docs/config.md
          -P ${CMAKE_CURRENT_LIST_FILE})
