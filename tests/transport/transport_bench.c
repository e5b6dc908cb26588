/* tests/transport/transport_bench.c — latency and bandwidth of the transports
 * (measured, never asserted; not a CTest test).
 *
 *   transport_bench local [ranks]           threads of this process (default 2)
 *   mpirun -np 2 transport_bench mpi        MPI processes
 *
 * Prints, for ranks 0 and 1: the round-trip time of an 8-byte message, the
 * one-way bandwidth of 8 MiB messages, and the time of an all-reduce of 4 Mi
 * floats over all ranks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/transport/transport.h"
#include "runtime/transport/transport_impl.h" /* transport_now */

enum { SMALL_ROUNDS = 2000, BIG_BYTES = 8 << 20, BIG_ROUNDS = 20, AR_N = 4 << 20, AR_ROUNDS = 5 };

static int bench(Transport *t, void *arg) {
  (void)arg;
  int me = transport_rank(t), n = transport_size(t);
  char small[8] = {0};
  char *big = calloc(BIG_BYTES, 1);
  float *v = calloc(AR_N, sizeof *v);
  int *all = malloc((size_t)n * sizeof *all);
  for (int r = 0; r < n; r++) all[r] = r;
  TransportGroup *g;
  transport_group_create(t, all, n, &g);
  transport_barrier(g, "start");

  double t0 = transport_now();
  for (int i = 0; i < SMALL_ROUNDS && me < 2; i++) {
    if (me == 0) {
      transport_send(t, 1, 0, small, 8, "ping");
      transport_recv(t, 1, 0, small, 8, "pong");
    } else {
      transport_recv(t, 0, 0, small, 8, "ping");
      transport_send(t, 0, 0, small, 8, "pong");
    }
  }
  double rtt = (transport_now() - t0) / SMALL_ROUNDS;

  t0 = transport_now();
  for (int i = 0; i < BIG_ROUNDS && me < 2; i++) {
    if (me == 0)
      transport_send(t, 1, 1, big, BIG_BYTES, "block");
    else
      transport_recv(t, 0, 1, big, BIG_BYTES, "block");
  }
  double bw = (double)BIG_BYTES * BIG_ROUNDS / (transport_now() - t0);

  transport_barrier(g, "all-reduce");
  t0 = transport_now();
  for (int i = 0; i < AR_ROUNDS; i++) transport_allreduce_sum_f32(g, v, AR_N, "bench");
  double ar = (transport_now() - t0) / AR_ROUNDS;

  if (me == 0 && transport_status(t) == TRANSPORT_OK)
    printf("%s, %d ranks: round trip 8 B %.1f us; one-way 8 MiB %.2f GB/s; "
           "all-reduce 4 Mi floats %.2f ms\n",
           transport_kind(t) == TRANSPORT_LOCAL ? "local" : "mpi", n, rtt * 1e6, bw / 1e9,
           ar * 1e3);
  if (transport_status(t) != TRANSPORT_OK) fprintf(stderr, "%s\n", transport_error(t));
  transport_group_destroy(g);
  free(all);
  free(v);
  free(big);
  return transport_status(t) == TRANSPORT_OK ? 0 : 1;
}

int main(int argc, char **argv) {
  const char *kind = argc > 1 ? argv[1] : "local";
  char err[TRANSPORT_ERR_LEN];
  if (strcmp(kind, "mpi") == 0) {
    Transport *t = transport_mpi_create(&argc, &argv, 60, err, sizeof err);
    if (!t) {
      fprintf(stderr, "transport_bench: %s\n", err);
      return 1;
    }
    int rc = bench(t, NULL);
    transport_destroy(t);
    return rc;
  }
  int n = argc > 2 ? atoi(argv[2]) : 2;
  if (n < 2) n = 2;
  TransportWorld *w = transport_local_create_world(n, 60);
  int rc = transport_local_run(w, bench, NULL, err, sizeof err);
  if (rc) fprintf(stderr, "transport_bench: %s\n", err);
  transport_local_destroy_world(w);
  return rc;
}
