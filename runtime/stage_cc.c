/* runtime/stage_cc.c — turning a generated stageN.c into loaded code.
 *
 * Compiling costs seconds; loading a cached .so costs milliseconds. The cache key
 * covers everything that changes the machine code: the source text, the exact
 * command, and the compiler's own `--version` banner (an upgraded compiler is a new
 * key). The .so is built under a temporary name in the cache directory and renamed
 * into place, so two runs racing on one key both end with a whole file. */
#include "runtime/runtime.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define ERR(...) (snprintf(err, errlen, __VA_ARGS__), false)

static const char *compiler(void) {
  const char *cc = getenv("PD2BW_CC");
  return cc && *cc ? cc : "cc";
}

/* mkdir -p */
static bool make_dirs(const char *path) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, 0777) != 0 && errno != EEXIST) return false;
    *p = '/';
  }
  return mkdir(buf, 0777) == 0 || errno == EEXIST;
}

bool rt_cache_dir(char *buf, size_t n, char *err, size_t errlen) {
  const char *env = getenv("PD2BW_CACHE");
  if (env && *env) {
    snprintf(buf, n, "%s", env);
  } else {
    const char *home = getenv("HOME");
    snprintf(buf, n, "%s/.cache/pd2bw", home && *home ? home : "/tmp");
  }
  if (!make_dirs(buf)) return ERR("cannot create the stage cache directory %s: %s", buf, strerror(errno));
  return true;
}

/* Output of `cmd` (stdout and stderr) into a pd_malloc'd string; NULL if it cannot run. */
static char *run_capture(const char *cmd, int *status) {
  FILE *f = popen(cmd, "r");
  if (!f) return NULL;
  size_t n = 0, cap = 4096;
  char *out = pd_malloc(cap);
  size_t k;
  while ((k = fread(out + n, 1, cap - n - 1, f)) > 0) {
    n += k;
    if (cap - n < 2) out = pd_realloc(out, cap *= 2);
  }
  out[n] = 0;
  int st = pclose(f);
  *status = st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

bool stage_program_load(const char *c_path, int real_bytes, StageProgram *out, char *err,
                        size_t errlen) {
  memset(out, 0, sizeof *out);
  char ierr[IO_ERR_LEN];
  size_t len;
  char *src = io_read_all(c_path, &len, ierr, sizeof ierr);
  if (!src) return ERR("%s", ierr);
  char cache[900];
  if (!rt_cache_dir(cache, sizeof cache, err, errlen)) {
    free(src);
    return false;
  }
  /* The key: source, command, compiler banner. */
  char cmdv[512];
  snprintf(cmdv, sizeof cmdv, "%s --version 2>&1", compiler());
  int st;
  char *banner = run_capture(cmdv, &st);
  if (!banner || st != 0) {
    free(src);
    free(banner);
    return ERR("%s: cannot run the C compiler '%s' (set PD2BW_CC to one that works)", c_path, compiler());
  }
  size_t keylen = len + strlen(banner) + 256;
  char *keytext = pd_malloc(keylen);
  int kn = snprintf(keytext, keylen, "%s\n%s\n%s\n", compiler(), RT_CC_FLAGS, banner);
  memcpy(keytext + kn, src, len);
  char key[17];
  codegen_hash_hex(keytext, (size_t)kn + len, key);
  free(keytext);
  free(banner);
  free(src);

  snprintf(out->so_path, sizeof out->so_path, "%s/%s.so", cache, key);
  struct stat sb;
  out->cache_hit = stat(out->so_path, &sb) == 0;
  if (!out->cache_hit) {
    char tmp[1100], cmd[4096];
    /* Unique per process AND thread: ranks that are threads of one process may
     * compile the same stage at once; each builds its own file and the renames
     * race harmlessly (the contents are identical). */
    static _Atomic unsigned long serial;
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%lu", out->so_path, (long)getpid(), ++serial);
    snprintf(cmd, sizeof cmd, "%s " RT_CC_FLAGS " -o '%s' '%s' -lm 2>&1", compiler(), tmp, c_path);
    char *log = run_capture(cmd, &st);
    if (!log || st != 0) {
      remove(tmp);
      /* Enough of the compiler's complaint to act on. */
      if (log && strlen(log) > 1200) log[1200] = 0;
      bool r = ERR("%s: the C compiler failed (%s):\n%s", c_path, cmd, log ? log : "(could not run it)");
      free(log);
      return r;
    }
    free(log);
    if (rename(tmp, out->so_path) != 0) {
      remove(tmp);
      return ERR("cannot move the compiled stage into the cache (%s): %s", out->so_path, strerror(errno));
    }
  }
  out->handle = dlopen(out->so_path, RTLD_NOW | RTLD_LOCAL);
  if (!out->handle) return ERR("%s: cannot load the compiled stage: %s", out->so_path, dlerror());
  int (*abi)(void);
  int (*rb)(void);
  *(void **)&abi = dlsym(out->handle, "pd2bw_stage_abi");
  *(void **)&rb = dlsym(out->handle, "pd2bw_stage_real_bytes");
  *(void **)&out->forward = dlsym(out->handle, "pd2bw_stage_forward");
  *(void **)&out->backward = dlsym(out->handle, "pd2bw_stage_backward");
  if (!abi || !rb || !out->forward || !out->backward) {
    stage_program_unload(out);
    return ERR("%s: not a pd2bw stage program (missing pd2bw_stage_* entry points)", c_path);
  }
  if (abi() != PD2BW_STAGE_ABI) {
    int v = abi();
    stage_program_unload(out);
    return ERR("%s: stage ABI version %d, this runtime speaks %d: recompile the plan with this pd2bwc",
               c_path, v, PD2BW_STAGE_ABI);
  }
  out->real_bytes = rb();
  if (real_bytes && out->real_bytes != real_bytes) {
    int v = out->real_bytes;
    stage_program_unload(out);
    return ERR("%s: program computes in %d-byte reals, the plan says %d", c_path, v, real_bytes);
  }
  return true;
}

void stage_program_unload(StageProgram *p) {
  if (p->handle) dlclose(p->handle);
  p->handle = NULL;
  p->forward = p->backward = NULL;
}
