# runtime/report.cmake — pd2bw_report: plan/report.html (runtime/plan_report.h),
# linked by pd2bwc (which writes it into every plan) and by the pipeline runtime
# (pd2bwrun --trace rewrites it with the run). It reads plan.json and needs only
# cJSON and pd2bw_io, so neither side pulls in the other's code. Included from
# runtime/CMakeLists.txt.
#
# The page's HTML, CSS and script live in plan_report.html, edited as a web page;
# embed_text.cmake turns it into plan_report_page.c (its bytes as a C array) at
# build time.
set(report_page_c ${CMAKE_CURRENT_BINARY_DIR}/plan_report_page.c)
add_custom_command(
  OUTPUT ${report_page_c}
  COMMAND ${CMAKE_COMMAND} -DINPUT=${CMAKE_CURRENT_LIST_DIR}/plan_report.html -DOUTPUT=${report_page_c}
          -DNAME=plan_report_page -P ${CMAKE_CURRENT_LIST_DIR}/embed_text.cmake
  DEPENDS ${CMAKE_CURRENT_LIST_DIR}/plan_report.html ${CMAKE_CURRENT_LIST_DIR}/embed_text.cmake
  COMMENT "Embedding runtime/plan_report.html")
add_library(pd2bw_report STATIC ${CMAKE_CURRENT_LIST_DIR}/plan_report.c ${report_page_c})
pd2bw_strict(pd2bw_report)
target_include_directories(pd2bw_report PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(pd2bw_report PUBLIC pd2bw_io ${CJSON_LIB})
