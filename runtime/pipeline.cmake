# runtime/pipeline.cmake — pipelined training (runtime/pipeline.h): the executor of the
# plan's instruction streams on the local (threads) or MPI transport. Included from
# runtime/CMakeLists.txt.
# pipeline_ref.c checks a run against the sequential references: the one-stage trainer
# (gpipe, 1f1b, 2bw) or pipeline_seq.c, the plan's stage programs run one after another
# on one thread (pipedream's per-stage delay rule).
# (The compile-side list of what crosses each stage boundary is codegen/cgen_boundary.c.)

add_library(pd2bw_pipeline STATIC
  ${CMAKE_CURRENT_LIST_DIR}/pipeline.c
  ${CMAKE_CURRENT_LIST_DIR}/pipeline_plan.c
  ${CMAKE_CURRENT_LIST_DIR}/pipeline_run.c
  ${CMAKE_CURRENT_LIST_DIR}/pipeline_trace.c
  ${CMAKE_CURRENT_LIST_DIR}/pipeline_ref.c
  ${CMAKE_CURRENT_LIST_DIR}/pipeline_seq.c)
pd2bw_strict(pd2bw_pipeline)
target_link_libraries(pd2bw_pipeline PUBLIC pd2bw_runtime pd2bw_transport pd2bw_contract pd2bw_ir cjson Threads::Threads ${M_LIB})

# the validation loss through the pipeline (pd2bwrun --val-data; runtime/pipeline_eval.h)
target_sources(pd2bw_pipeline PRIVATE ${CMAKE_CURRENT_LIST_DIR}/pipeline_eval.c)

# pd2bwrun --trace rewrites the plan's report.html with the run (runtime/plan_report.h)
target_link_libraries(pd2bw_pipeline PRIVATE pd2bw_report)

# the interpreter of the instruction streams and its seams (runtime/exec/exec.h)
target_sources(pd2bw_pipeline PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/exec/exec_interp.c
  ${CMAKE_CURRENT_LIST_DIR}/exec/exec_cpu.c
  ${CMAKE_CURRENT_LIST_DIR}/exec/exec_link_transport.c
  ${CMAKE_CURRENT_LIST_DIR}/exec/exec_one.c
  ${CMAKE_CURRENT_LIST_DIR}/exec/exec_one_main.c)
