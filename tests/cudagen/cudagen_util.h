/* tests/cudagen/cudagen_util.h — small helpers the cudagen tests share: reading a
 * generated file whole, comparing with a golden file, and walking a launch list's
 * entries (forward, then backward) in one loop. No checks here (test.h counts per
 * file): the helpers report, the tests assert.
 */
#ifndef PD2BW_TESTS_CUDAGEN_UTIL_H
#define PD2BW_TESTS_CUDAGEN_UTIL_H

#include <cjson/cJSON.h>
#include <stdbool.h>

/* The whole file, NUL-terminated (malloc'd; the caller frees); NULL when it cannot be
 * opened. */
char *cg_read_all(const char *path);

/* Golden file `path` against the generated text `got`: whether they are the same
 * (where they differ printed). With PD2BW_REGEN set it rewrites the file instead and
 * says whether that worked. */
bool cg_golden(const char *path, const char *got);

/* The launch-list entry after `en` (NULL: the first), forward's then backward's;
 * NULL after the last. Each is a kernel launch ("kernel", "module", ...) or a GEMM
 * ("gemm"). */
const cJSON *cg_next_launch(const cJSON *list, const cJSON *en);
#define CG_FOR_EACH_LAUNCH(en, list) \
  for (const cJSON *en = cg_next_launch(list, NULL); en; en = cg_next_launch(list, en))

#endif
