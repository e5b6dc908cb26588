/* runtime/transport/transport_mpi_none.c — the MPI transport's entry points in a build
 * without MPI: they say so, and nothing else links against MPI. */
#include <stdio.h>

#include "runtime/transport/transport.h"

bool transport_mpi_available(void) { return false; }

Transport *transport_mpi_create(int *argc, char ***argv, double timeout_s, char *err,
                                size_t errlen) {
  (void)argc;
  (void)argv;
  (void)timeout_s;
  snprintf(err, errlen,
           "mpi transport: this pd2bw was built without MPI (install Open MPI — "
           "scripts/deps.sh — and reconfigure), or use --transport local");
  return NULL;
}
