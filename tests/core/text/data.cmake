# tests/core/text/data.cmake: inputs that must be refused in one line (bad UTF-8, a max_len with no
# answer token, unparsable token files, FIFOs, devices and oversized files, unbounded fields).
loom_add_test(test_inputs ${CMAKE_CURRENT_SOURCE_DIR}/test_inputs.c loom_core)
