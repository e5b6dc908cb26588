# runtime/io.cmake — pd2bw_io: token data files, the BPE tokenizer, safetensors
# and checkpoint import, atomic file writes and output path checks (see runtime/io.h). Included from
# runtime/CMakeLists.txt.
find_library(CJSON_LIB cjson REQUIRED)
# utf8proc: the Unicode categories of GPT-2's pre-tokenizer (bpe.c); Debian's
# libutf8proc-dev, installed by scripts/deps.sh.
find_package(PkgConfig REQUIRED)
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
add_library(pd2bw_io STATIC
  ${CMAKE_CURRENT_LIST_DIR}/atomic_file.c
  ${CMAKE_CURRENT_LIST_DIR}/output_path.c
  ${CMAKE_CURRENT_LIST_DIR}/read_file.c
  ${CMAKE_CURRENT_LIST_DIR}/stale_tmp.c
  ${CMAKE_CURRENT_LIST_DIR}/cache_seal.c
  ${CMAKE_CURRENT_LIST_DIR}/data.c
  ${CMAKE_CURRENT_LIST_DIR}/bpe.c
  ${CMAKE_CURRENT_LIST_DIR}/safetensors.c
  ${CMAKE_CURRENT_LIST_DIR}/ckpt_import.c)
pd2bw_strict(pd2bw_io)
target_link_libraries(pd2bw_io PUBLIC pd2bw_contract pd2bw_ir ${CJSON_LIB} PRIVATE PkgConfig::UTF8PROC)
