/* runtime/core/stage_cc.c — turning a generated stageN.c into loaded code.
 *
 * Compiling costs seconds; loading a cached .so costs milliseconds. The cache key
 * covers everything that changes the machine code: the source text, the exact
 * command, and the compiler's own `--version` banner (an upgraded compiler is a new
 * key). The .so is built under a temporary name in the cache directory and renamed
 * into place, so two runs racing on one key both end with a whole file; it is sealed
 * (seal, verify) so a damaged entry is rebuilt rather than loaded. The compiler runs
 * without a shell (run_capture.c). The directory is used only when it is this user's
 * alone (rt_cache_dir: runtime/io/cache_dir.c, the cubin cache's rule too). */
#include "runtime/core/runtime.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ERR(...) (snprintf(err, errlen, __VA_ARGS__), false)

/* The key's first line: entries of an older layout (no seal) are other keys, never
 * reported as damaged. */
#define CACHE_FORMAT "pd2bw-stage-so-2"
/* The longest cache directory: room for "/<16 hex>.so.tmp.<pid>.<serial>". */
#define CACHE_DIR_ROOM 64

static const char *compiler(void) {
  const char *cc = getenv("PD2BW_CC");
  return cc && strspn(cc, " \t") < strlen(cc) ? cc : "cc";
}

static double cc_timeout(void) {
  const char *s = getenv("PD2BW_CC_TIMEOUT");
  char *end;
  double t = s && *s ? strtod(s, &end) : 0;
  return s && *s && !*end && t > 0 && t <= 1e6 ? t : RT_CC_TIMEOUT_S;
}

/* The message of a compiler run past cc_timeout(). */
static bool timed_out(const char *c_path, const char *what, char *err, size_t errlen) {
  const char *s = getenv("PD2BW_CC_TIMEOUT");
  return ERR("%s: the C compiler '%s' did not finish %s within %g s (%s); it was killed", c_path, compiler(), what,
             cc_timeout(), s && *s ? "PD2BW_CC_TIMEOUT" : "the default; set PD2BW_CC_TIMEOUT to change it");
}

bool rt_cache_dir(char *buf, size_t n, char *err, size_t errlen) {
  const char *env = getenv("PD2BW_CACHE"), *home = getenv("HOME");
  size_t room = n > CACHE_DIR_ROOM ? n - CACHE_DIR_ROOM : 0;
  if (env && *env && strlen(env) >= room)
    return ERR("PD2BW_CACHE is %zu characters; the stage cache directory's path may have at most %zu", strlen(env),
               room - 1);
  if ((!env || !*env) && home && *home && strlen(home) + strlen("/.cache/pd2bw") >= room)
    return ERR("HOME is %zu characters; the stage cache directory $HOME/.cache/pd2bw may have at most %zu "
               "(set PD2BW_CACHE to a shorter one)", strlen(home), room - 1);
  /* the one rule of both caches: only a directory of this user's, else a private one */
  char *dir = cache_dir_for_run(NULL, NULL, err, errlen);
  if (!dir) return false;
  size_t len = strlen(dir);
  bool fits = len < room;
  if (fits) memcpy(buf, dir, len + 1);
  else
    snprintf(err, errlen, "the stage cache directory %s is %zu characters; it may have at most %zu", dir, len,
             room - 1);
  free(dir);
  return fits;
}

/* argv: the compiler's words, the words of flags, then the `nextra` strings of extra
 * (paths: never split), NULL-terminated; free with free_words. */
static char **command(const char *flags, const char *const *extra, int nextra) {
  char **w, **f;
  int n = rt_split_words(compiler(), &w), nf = rt_split_words(flags, &f);
  w = pd_realloc(w, (size_t)(n + nf + nextra + 1) * sizeof *w);
  for (int i = 0; i < nf; i++) w[n++] = f[i];
  free(f);
  for (int i = 0; i < nextra; i++) w[n++] = pd_strdup(extra[i]);
  w[n] = NULL;
  return w;
}

static void free_words(char **w) {
  for (char **p = w; *p; p++) free(*p);
  free(w);
}

/* The command as one line, for messages only: it is never run as text. */
static char *command_text(char *const *argv) {
  size_t n = 1;
  for (char *const *p = argv; *p; p++) n += strlen(*p) + 1;
  char *s = pd_malloc(n), *e = s;
  for (char *const *p = argv; *p; p++) e += sprintf(e, "%s%s", p == argv ? "" : " ", *p);
  *e = 0;
  return s;
}

/* Appends the seal of tmp's bytes to tmp (cache_seal.c), before the rename; verify
 * checks it before dlopen. A cache hit is not trusted on its name alone: a truncated
 * entry (a full disk, a crash before the data reached the disk) died with SIGBUS in
 * dlopen, a flipped byte with SIGILL mid-step. The loader ignores bytes past the ELF
 * segments, so the seal can be part of the .so: a sidecar would need a second rename,
 * which racing writers could pair with the other's .so. The seal guards against
 * damage, not against someone who can write the directory. */
static bool seal(const char *tmp, char *err, size_t errlen) {
  char ierr[IO_ERR_LEN], s[CACHE_SEAL_BYTES + 1];
  size_t n;
  char *bytes = io_read_all(tmp, &n, ierr, sizeof ierr);
  if (!bytes) return ERR("%s", ierr);
  cache_seal_make(bytes, n, s);
  free(bytes);
  int fd = open(tmp, O_WRONLY | O_APPEND);
  bool ok = fd >= 0 && write(fd, s, CACHE_SEAL_BYTES) == CACHE_SEAL_BYTES;
  if (fd >= 0 && close(fd) != 0) ok = false;
  return ok || ERR("cannot seal the compiled stage %s: %s", tmp, strerror(errno));
}

/* True when path is a whole, sealed entry; else false, why saying what is wrong
 * (why[0] == 0: there is no entry at all). */
static bool verify(const char *path, char *why, size_t whylen) {
  why[0] = 0;
  struct stat sb;
  if (stat(path, &sb) != 0 && errno == ENOENT) return false;
  char ierr[IO_ERR_LEN];
  size_t n;
  char *bytes = io_read_all(path, &n, ierr, sizeof ierr);
  if (!bytes) return snprintf(why, whylen, "%s", ierr), false;
  bool ok = cache_seal_check(bytes, n, why, whylen);
  free(bytes);
  return ok;
}

/* The loaded program's entry points (codegen/codegen.h, "The ABI"), its ABI version and
 * real size checked; false (unloaded) with a message. */
static bool resolve(StageProgram *out, const char *c_path, int real_bytes, char *err, size_t errlen) {
  int (*abi)(void);
  int (*rb)(void);
  int (*nsegs)(void);
  *(void **)&abi = dlsym(out->handle, "pd2bw_stage_abi");
  *(void **)&rb = dlsym(out->handle, "pd2bw_stage_real_bytes");
  *(void **)&out->forward = dlsym(out->handle, "pd2bw_stage_forward");
  *(void **)&out->backward = dlsym(out->handle, "pd2bw_stage_backward");
  *(void **)&nsegs = dlsym(out->handle, "pd2bw_stage_segments");
  *(void **)&out->forward_segment = dlsym(out->handle, "pd2bw_stage_forward_segment");
  *(void **)&out->backward_segment = dlsym(out->handle, "pd2bw_stage_backward_segment");
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
  if (!nsegs || !out->forward_segment || !out->backward_segment) {
    stage_program_unload(out);
    return ERR("%s: a stage program of ABI %d without its per-segment entry points (pd2bw_stage_segments)", c_path,
               PD2BW_STAGE_ABI);
  }
  out->real_bytes = rb();
  out->nsegs = nsegs();
  if (real_bytes && out->real_bytes != real_bytes) {
    int v = out->real_bytes;
    stage_program_unload(out);
    return ERR("%s: program computes in %d-byte reals, the plan says %d", c_path, v, real_bytes);
  }
  return true;
}

bool stage_program_load(const char *c_path, int real_bytes, StageProgram *out, char *err,
                        size_t errlen) {
  memset(out, 0, sizeof *out);
  char ierr[IO_ERR_LEN];
  size_t len;
  char *src = io_read_all(c_path, &len, ierr, sizeof ierr);
  if (!src) return ERR("%s", ierr);
  char cache[RT_PATH_MAX];
  if (!rt_cache_dir(cache, sizeof cache, err, errlen)) {
    free(src);
    return false;
  }
  /* The key: source, command, compiler banner. */
  char **cmdv = command("", (const char *const[]){"--version"}, 1);
  int st;
  char *banner = rt_run_capture(cmdv, cc_timeout(), &st);
  int spawn_errno = errno;
  free_words(cmdv);
  if (!banner || st != 0) {
    bool ran = banner != NULL;
    free(src);
    free(banner);
    if (ran && st == RT_RUN_TIMED_OUT) return timed_out(c_path, "its --version", err, errlen);
    return ERR("%s: cannot run the C compiler '%s' (%s; set PD2BW_CC to one that works)", c_path, compiler(),
               ran ? "its --version failed" : strerror(spawn_errno));
  }
  size_t keylen = len + strlen(banner) + strlen(compiler()) + 256;
  char *keytext = pd_malloc(keylen);
  int kn = snprintf(keytext, keylen, CACHE_FORMAT "\n%s\n%s\n%s\n", compiler(), RT_CC_FLAGS, banner);
  memcpy(keytext + kn, src, len);
  char key[17];
  codegen_hash_hex(keytext, (size_t)kn + len, key);
  free(keytext);
  free(banner);
  free(src);

  /* rt_cache_dir left CACHE_DIR_ROOM for the names, so neither is ever cut short */
  if (snprintf(out->so_path, sizeof out->so_path, "%s/%s.so", cache, key) >= (int)sizeof out->so_path)
    return ERR("%s: the cache path is too long", cache);
  char why[IO_ERR_LEN + 64];
  out->cache_hit = verify(out->so_path, why, sizeof why);
  if (!out->cache_hit && why[0])
    fprintf(stderr, "pd2bw: note: the cached stage program %s is damaged (%s); compiling it again\n",
            out->so_path, why);
  if (!out->cache_hit) {
    stale_tmp_sweep_cache(cache, 16, ".so");
    char tmp[RT_PATH_MAX];
    /* Unique per process AND thread: ranks that are threads of one process may
     * compile the same stage at once; each builds its own file and the renames
     * race harmlessly (the contents are identical). */
    static _Atomic unsigned long serial;
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%lu", out->so_path, (long)getpid(), ++serial) >= (int)sizeof tmp)
      return ERR("%s: the cache path is too long", cache);
    char **cc = command(RT_CC_FLAGS, (const char *const[]){"-o", tmp, c_path, "-lm"}, 4);
    char *log = rt_run_capture(cc, cc_timeout(), &st);
    bool ok = log && st == 0;
    if (log && st == RT_RUN_TIMED_OUT) {
      ok = timed_out(c_path, "compiling it", err, errlen);
    } else if (!ok) {
      /* Enough of the compiler's complaint to act on. */
      if (log && strlen(log) > 1200) log[1200] = 0;
      char *text = command_text(cc);
      /* A compiler killed by a signal (out of memory, or the job being torn down by
       * another rank's abort) says nothing itself: name the signal. */
      int sig = log ? RT_RUN_SIGNAL(st) : 0;
      ok = sig ? ERR("%s: the C compiler was killed by signal %d (%s) (%s)%s%s", c_path, sig, strsignal(sig), text,
                     *log ? ":\n" : "", log)
               : ERR("%s: the C compiler failed (%s):\n%s", c_path, text, log ? log : "(could not run it)");
      free(text);
    }
    free(log);
    free_words(cc);
    if (!ok || !seal(tmp, err, errlen)) {
      remove(tmp);
      return false;
    }
    if (rename(tmp, out->so_path) != 0) {
      remove(tmp);
      return ERR("cannot move the compiled stage into the cache (%s): %s", out->so_path, strerror(errno));
    }
  }
  /* Verified above (or just written): a racing writer can only rename another whole,
   * sealed file over it, never damage this one in place. */
  out->handle = dlopen(out->so_path, RTLD_NOW | RTLD_LOCAL);
  if (!out->handle) return ERR("%s: cannot load the compiled stage: %s", out->so_path, dlerror());
  return resolve(out, c_path, real_bytes, err, errlen);
}

void stage_program_unload(StageProgram *p) {
  if (p->handle) dlclose(p->handle);
  p->handle = NULL;
  p->forward = p->backward = NULL;
  p->forward_segment = p->backward_segment = NULL;
}
