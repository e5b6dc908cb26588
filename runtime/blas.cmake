# runtime/blas.cmake — pd2bw_blas: pd_sgemm over BLIS, else OpenBLAS (runtime/blas.h),
# the GEMM the CPU kernels (kernels/cpu_kernels.h) call through their pk_sgemm_fn hook.
# Included from runtime/CMakeLists.txt.
# BLIS first (bench/sgemm/RESULTS.md says why); a BLIS build may still switch to
# OpenBLAS through dlopen at run time on AVX-512 CPUs (runtime/blas.c). Debian
# puts blis.h in /usr/include/<multiarch>/ (an update-alternatives link to the
# openmp, pthread or serial variant); other installs use /usr/include/blis/.
find_path(PD2BW_BLIS_INCLUDE_DIR blis.h PATH_SUFFIXES blis)
find_library(PD2BW_BLIS_LIBRARY blis)
add_library(pd2bw_blas STATIC ${CMAKE_CURRENT_LIST_DIR}/blas.c)
pd2bw_strict(pd2bw_blas)
if(PD2BW_BLIS_INCLUDE_DIR AND PD2BW_BLIS_LIBRARY)
  message(STATUS "pd2bw BLAS: BLIS (${PD2BW_BLIS_LIBRARY})")
  target_compile_definitions(pd2bw_blas PRIVATE PD_BLAS_BLIS)
  target_include_directories(pd2bw_blas SYSTEM PRIVATE ${PD2BW_BLIS_INCLUDE_DIR})
  target_link_libraries(pd2bw_blas PUBLIC ${PD2BW_BLIS_LIBRARY})
else()
  find_path(PD2BW_OPENBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas openblas-pthread)
  find_library(PD2BW_OPENBLAS_LIBRARY openblas)
  if(NOT PD2BW_OPENBLAS_INCLUDE_DIR OR NOT PD2BW_OPENBLAS_LIBRARY)
    message(FATAL_ERROR "pd2bw needs BLIS or OpenBLAS: run scripts/deps.sh "
                        "(Debian: libblis-dev or libopenblas-dev)")
  endif()
  message(STATUS "pd2bw BLAS: OpenBLAS (${PD2BW_OPENBLAS_LIBRARY}); BLIS not found")
  target_compile_definitions(pd2bw_blas PRIVATE PD_BLAS_OPENBLAS)
  target_include_directories(pd2bw_blas SYSTEM PRIVATE ${PD2BW_OPENBLAS_INCLUDE_DIR})
  target_link_libraries(pd2bw_blas PUBLIC ${PD2BW_OPENBLAS_LIBRARY})
endif()
target_link_libraries(pd2bw_blas PUBLIC pd2bw_ir Threads::Threads ${CMAKE_DL_LIBS} ${M_LIB})
