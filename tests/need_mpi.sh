# need_mpi MPI_BUILT: sourced by the test scripts whose MPI part is a test of its own.
# Exits 77, which those tests declare as CTest's SKIP_RETURN_CODE, when pd2bwrun was
# built without the MPI transport (MPI_BUILT 0, passed by CMake) or mpirun is not on
# PATH: such a build shows the test as skipped, never as passed.
need_mpi() {
  if [ "${1:-0}" != 1 ]; then
    echo "skipped: pd2bwrun was built without the MPI transport"
    exit 77
  fi
  if ! command -v mpirun >/dev/null; then
    echo "skipped: no mpirun on PATH"
    exit 77
  fi
}
