/* runtime/transport/transport_sys.c — what the transports need from the operating system:
 * the SIGINT/SIGTERM flag every wait polls, a monotonic clock, short sleeps, a
 * failure counter, and sizing of a rank's compute threads.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ir/ir.h"
#include "runtime/transport/transport_impl.h"

/* ---- signals --------------------------------------------------------------
 * The handler only records the signal: waits poll the flag (the local
 * transport's condition waits wake at least every 50 ms, the MPI polling loop
 * sleeps at most ~0.2 ms), return TRANSPORT_INTERRUPTED, and the caller shuts down.
 * SA_RESETHAND gives a second signal its default effect, so a process busy in a
 * long computation still dies on the second Ctrl-C. */
/* An atomic, not a volatile sig_atomic_t: the handler runs on whichever thread
 * the signal hits, and other rank threads read the flag. Lock-free atomics are
 * safe in a signal handler. */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the signal flag needs a lock-free atomic int");
static atomic_int caught_signal;

static void on_signal(int sig) { atomic_store(&caught_signal, sig); }

void transport_install_signal_handlers(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  PD_CHECK(sigaction(SIGINT, &sa, NULL) == 0, "(sigaction SIGINT: %s)", strerror(errno));
  PD_CHECK(sigaction(SIGTERM, &sa, NULL) == 0, "(sigaction SIGTERM: %s)", strerror(errno));
}

int transport_interrupted(void) { return atomic_load(&caught_signal); }

void transport_clear_interrupt(void) {
  atomic_store(&caught_signal, 0);
  transport_install_signal_handlers();
}

/* ---- time ---------------------------------------------------------------- */

double transport_now(void) {
  struct timespec ts;
  PD_CHECK(clock_gettime(CLOCK_MONOTONIC, &ts) == 0, "(clock_gettime)");
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void transport_sleep(double seconds) {
  if (seconds <= 0) return;
  struct timespec ts;
  ts.tv_sec = (time_t)seconds;
  ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
  nanosleep(&ts, NULL); /* a signal cuts it short: the caller polls the flag */
}

static atomic_uint_fast64_t fail_counter;

uint64_t transport_next_fail_seq(void) { return (uint64_t)atomic_fetch_add(&fail_counter, 1) + 1; }

/* ---- threads per rank ---------------------------------------------------- */

int transport_host_cores(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

int transport_threads_per_rank(int ranks_on_this_host) {
  int ranks = ranks_on_this_host > 0 ? ranks_on_this_host : 1;
  int per = transport_host_cores() / ranks;
  return per > 0 ? per : 1;
}
