# runtime/cuda_exec.cmake — the GPU trainer (runtime/cuda_exec.h) and the CUDA
# pipeline executor (runtime/cuda_pipe.h): the launch-list interpreter, the trainer and
# the pipeline interpreter build everywhere (they reach the device only through a
# table of functions); the real-GPU ops and multi-GPU mode (NCCL: cuda_pipe_nccl.c)
# need runtime/cuda's library, which exists only when the CUDA toolkit was found, else
# stand-ins say "built without the toolkit".
# Included from runtime/CMakeLists.txt (after runtime/cuda).
add_library(pd2bw_cuda_exec STATIC
  ${CMAKE_CURRENT_LIST_DIR}/cuda_exec_list.c
  ${CMAKE_CURRENT_LIST_DIR}/cuda_exec_train.c
  ${CMAKE_CURRENT_LIST_DIR}/cuda_exec_ckpt.c
  ${CMAKE_CURRENT_LIST_DIR}/cuda_exec_main.c
  ${CMAKE_CURRENT_LIST_DIR}/cuda_pipe.c
  ${CMAKE_CURRENT_LIST_DIR}/cuda_pipe_run.c
  ${CMAKE_CURRENT_LIST_DIR}/cuda_pipe_dev.c
  ${CMAKE_CURRENT_LIST_DIR}/cuda_pipe_graph.c
  ${CMAKE_CURRENT_LIST_DIR}/cuda_adamw_multi.c
  ${CMAKE_CURRENT_LIST_DIR}/cuda_pipe_link.c
  ${CMAKE_CURRENT_LIST_DIR}/cuda_pipe_drive.c
  ${CMAKE_CURRENT_LIST_DIR}/cuda_pipe_trace.c
  ${CMAKE_CURRENT_LIST_DIR}/cuda_pipe_eval.c
  ${CMAKE_CURRENT_LIST_DIR}/cuda_pipe_main.c)
pd2bw_strict(pd2bw_cuda_exec)
target_link_libraries(pd2bw_cuda_exec PUBLIC pd2bw_pipeline pd2bw_runtime pd2bw_io pd2bw_contract pd2bw_ir cjson ${M_LIB})
if(TARGET pd2bw_cuda)
  target_sources(pd2bw_cuda_exec PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cuda_exec_dev.c
                 ${CMAKE_CURRENT_LIST_DIR}/cuda_pipe_nccl.c
                 ${CMAKE_CURRENT_LIST_DIR}/cuda_pipe_nccl_gather.c)
  target_link_libraries(pd2bw_cuda_exec PUBLIC pd2bw_cuda)
else()
  target_sources(pd2bw_cuda_exec PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cuda_exec_dev_none.c
                 ${CMAKE_CURRENT_LIST_DIR}/cuda_pipe_nccl_none.c)
endif()

# The driver gpu-check.sh uses (pd2bwrun --backend cuda will call cuda_exec_main too).
add_executable(pd2bw-cuda-train ${CMAKE_SOURCE_DIR}/tools/pd2bw-cuda-train.c)
pd2bw_strict(pd2bw-cuda-train)
target_link_libraries(pd2bw-cuda-train PRIVATE pd2bw_cuda_exec)
