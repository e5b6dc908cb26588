/* tests/cudaexec/emu_module_build.c — emu_module_build: a module compiled once per
 * distinct preprocessed text, across test processes (see emu_module.h). */
#include "emu_module.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "contract/contract.h"
#include "runtime/io/io.h"
#include "runtime/core/runtime.h"

#ifndef PD2BW_TEST_CXX
#define PD2BW_TEST_CXX "c++"
#endif

/* Runs argv (no shell, rt_run_capture); true on exit status 0, else the tool's
 * output, cut to fit, in err. */
static bool run(char *const argv[], char *err, size_t errlen) {
  int status;
  char *out = rt_run_capture(argv, 0, &status);
  bool ok = out && status == 0;
  if (!ok) snprintf(err, errlen, "%s failed: %.600s", argv[0], out ? out : "cannot start");
  free(out);
  return ok;
}

/* The cache folder: $PD2BW_TEST_EMU_CACHE, else /tmp/pd2bw-test-cache-emu-UID. */
static bool cache_dir(char *out, size_t n) {
  const char *env = getenv("PD2BW_TEST_EMU_CACHE");
  if (env && *env) snprintf(out, n, "%s", env);
  else snprintf(out, n, "/tmp/pd2bw-test-cache-emu-%ld", (long)getuid());
  return mkdir(out, 0700) == 0 || errno == EEXIST;
}

/* `so` becomes the cached module: a hard link, else nothing (the caller builds). */
static bool link_cached(const char *cached, const char *so) {
  unlink(so);
  return link(cached, so) == 0;
}

/* The key is the preprocessed text without line markers (they name the per-process
 * work folder) and the compile flags, so a kernel, emulator or generated-source edit
 * makes a new module and identical modules of other test processes are reused. The
 * module is compiled to a temporary name in the cache and renamed, so parallel test
 * processes never load a half-written file. */
bool emu_module_build(const char *cpp, const char *so, const char *incdir, char *err, size_t errlen) {
  static const char *const flags[] = {"-std=c++17", "-O1", "-w", "-fPIC", "-shared"};
  char cwd[512], inc_root[600], inc_dir[600], ii[600], dir[512], cached[700], tmp[760];
  if (!getcwd(cwd, sizeof cwd)) return snprintf(err, errlen, "getcwd failed"), false;
  snprintf(inc_root, sizeof inc_root, "-I%s", cwd);
  snprintf(inc_dir, sizeof inc_dir, "-I%s", incdir);
  snprintf(ii, sizeof ii, "%s.ii", so);
  char *pre[] = {PD2BW_TEST_CXX, "-std=c++17", "-E", "-P", inc_root, inc_dir, (char *)cpp, "-o", ii, NULL};
  if (!run(pre, err, errlen)) return false;
  size_t n;
  char *text = io_read_all(ii, &n, err, errlen);
  if (!text) return false;
  for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) {
    size_t fl = strlen(flags[i]);
    char *more = realloc(text, n + fl + 2);
    if (!more) return free(text), snprintf(err, errlen, "out of memory"), false;
    text = more;
    text[n++] = '\n';
    memcpy(text + n, flags[i], fl);
    n += fl;
  }
  char key[17];
  codegen_hash_hex(text, n, key);
  free(text);
  if (!cache_dir(dir, sizeof dir)) return snprintf(err, errlen, "%s: cannot create", dir), false;
  snprintf(cached, sizeof cached, "%s/emu-%s.so", dir, key);
  if (access(cached, R_OK) == 0 && link_cached(cached, so)) return true;
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", cached, (long)getpid());
  char *cc[] = {PD2BW_TEST_CXX, "-std=c++17", "-O1", "-w", "-fPIC", "-shared", "-x", "c++", ii, "-o", tmp, NULL};
  if (!run(cc, err, errlen)) return unlink(tmp), false;
  if (rename(tmp, cached) != 0) return unlink(tmp), snprintf(err, errlen, "%s: cannot rename", tmp), false;
  if (!link_cached(cached, so)) return snprintf(err, errlen, "%s: cannot link to %s", so, cached), false;
  return true;
}
