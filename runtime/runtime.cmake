# runtime/runtime.cmake — pd2bw_runtime: plan reader, stage compiler + cache (cc,
# dlopen), the one-stage trainer (see runtime/runtime.h). Included from
# runtime/CMakeLists.txt.
add_library(pd2bw_runtime STATIC
  ${CMAKE_CURRENT_LIST_DIR}/stage_cc.c
  ${CMAKE_CURRENT_LIST_DIR}/run_capture.c
  ${CMAKE_CURRENT_LIST_DIR}/plan_read.c
  ${CMAKE_CURRENT_LIST_DIR}/json_read.c
  ${CMAKE_CURRENT_LIST_DIR}/trainer.c
  ${CMAKE_CURRENT_LIST_DIR}/log.c
  ${CMAKE_CURRENT_LIST_DIR}/console.c)
pd2bw_strict(pd2bw_runtime)
target_link_libraries(pd2bw_runtime PUBLIC pd2bw_io pd2bw_blas pd2bw_contract pd2bw_ir ${CMAKE_DL_LIBS} ${M_LIB})
# The trainer's optimizer and norm loops (cpu_kernels.h) run with OpenMP when the
# compiler has it, like the stage programs do.
find_package(OpenMP COMPONENTS C)
if(OpenMP_C_FOUND)
  target_link_libraries(pd2bw_runtime PUBLIC OpenMP::OpenMP_C)
endif()
