/* tests/frontend/fuzz_parser.c — libFuzzer harness for the front end.
 *
 * Each input goes through everything a user's file can reach: parse and lower as
 * a model (once plain, once with a -D override), as a cluster, and the AST dump.
 * Diagnostics go to /dev/null; a crash, sanitizer report, leak or timeout is a
 * finding. Built only with -DPD2BW_FUZZ=ON (clang); scripts/fuzz.sh runs it with
 * models/ and tests/errors/ as the seed corpus.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "frontend/frontend.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static FILE *devnull;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!devnull) devnull = fopen("/dev/null", "w");
  PD_CHECK(devnull != NULL, "(fopen /dev/null)");
  const char *text = (const char *)data;
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, devnull);
  Graph *g = frontend_load_model_buffer(a, &d, "fuzz.model", text, size, NULL, 0);
  graph_destroy(g);
  static const char *const overrides[] = {"layers=3"};
  diag_init(&d, devnull);
  g = frontend_load_model_buffer(a, &d, "fuzz.model", text, size, overrides, 1);
  graph_destroy(g);
  diag_init(&d, devnull);
  Cluster c;
  frontend_load_cluster_buffer(a, &d, "fuzz.cluster", text, size, &c);
  diag_init(&d, devnull);
  frontend_dump_ast_buffer(a, &d, "fuzz.model", text, size, devnull);
  arena_destroy(a);
  return 0;
}
