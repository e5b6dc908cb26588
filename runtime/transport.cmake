# runtime/transport.cmake — pd2bw_transport: the local transport (threads, always)
# and the MPI transport (when CMake finds Open MPI; see runtime/transport.h).
# Included from runtime/CMakeLists.txt.
#
# MPI is optional: -DPD2BW_WITH_MPI=OFF, or no Open MPI on the machine, builds the
# library without it (transport_mpi_available() is then false). A binary that uses
# only the local transport never initialises MPI and needs no launcher.
option(PD2BW_WITH_MPI "Build the MPI transport when Open MPI is found" ON)
set(PD2BW_HAVE_MPI OFF)
if(PD2BW_WITH_MPI)
  find_package(MPI COMPONENTS C QUIET)
  if(MPI_C_FOUND)
    # Open MPI's mpi.h says `#define OPEN_MPI 1`; the tests' launcher flags and the
    # failure handling (how a dead process ends the job) are Open MPI's.
    set(_pd2bw_open_mpi "")
    foreach(dir ${MPI_C_HEADER_DIR} ${MPI_C_INCLUDE_DIRS})
      if(NOT _pd2bw_open_mpi AND EXISTS ${dir}/mpi.h)
        file(STRINGS ${dir}/mpi.h _pd2bw_open_mpi REGEX "define OPEN_MPI 1")
      endif()
    endforeach()
    if(_pd2bw_open_mpi)
      set(PD2BW_HAVE_MPI ON)
    else()
      message(STATUS "pd2bw transport: an MPI other than Open MPI was found; "
                     "building without the mpi transport")
    endif()
  endif()
endif()

add_library(pd2bw_transport STATIC
  ${CMAKE_CURRENT_LIST_DIR}/transport.c
  ${CMAKE_CURRENT_LIST_DIR}/transport_coll.c
  ${CMAKE_CURRENT_LIST_DIR}/transport_sys.c
  ${CMAKE_CURRENT_LIST_DIR}/transport_local.c)
pd2bw_strict(pd2bw_transport)
target_link_libraries(pd2bw_transport PUBLIC pd2bw_ir Threads::Threads)
if(PD2BW_HAVE_MPI)
  message(STATUS "pd2bw transport: local + mpi (${MPIEXEC_EXECUTABLE})")
  target_sources(pd2bw_transport PRIVATE ${CMAKE_CURRENT_LIST_DIR}/transport_mpi.c)
  # Global, so that tests and tools elsewhere in the tree can name it too.
  set_target_properties(MPI::MPI_C PROPERTIES IMPORTED_GLOBAL TRUE)
  target_link_libraries(pd2bw_transport PUBLIC MPI::MPI_C)
else()
  message(STATUS "pd2bw transport: local only (no Open MPI)")
  target_sources(pd2bw_transport PRIVATE ${CMAKE_CURRENT_LIST_DIR}/transport_mpi_none.c)
endif()
# tests/transport reads this to decide whether to run the MPI cases.
set_property(GLOBAL PROPERTY PD2BW_HAVE_MPI ${PD2BW_HAVE_MPI})
