/* runtime/cuda/nvrtc_compile.c — CUDA C source to cubin with NVRTC, cached on disk.
 *
 * The runtime compiles each stageN.cu at load time for the GPU it finds (DESIGN.md
 * §1, §5); CI compiles every golden stageN.cu for sm_90 without a GPU. NVRTC needs
 * no driver, so this file works on any machine with the toolkit. NVRTC is loaded with
 * dlopen on first use, not linked: pd2bwrun and pd2bwc link this library, and linking
 * libnvrtc would put the toolkit on every binary's loader path, even to train on the
 * CPU. Entries are written whole (write_cache) and sealed (runtime/io/cache_seal.c):
 * a truncated or byte-flipped entry is recompiled with a one-line note, never handed
 * to the driver. The directory follows the stage cache's rule: only this user's. */
#include <errno.h>
#include <fcntl.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ir/ir.h"
#include "runtime/cuda/cuda_internal.h"
#include "runtime/io/io.h"

#ifndef PD2BW_CUDA_INCLUDE_DIR
#define PD2BW_CUDA_INCLUDE_DIR ""
#endif
#ifndef PD2BW_CUDA_MAJOR
#define PD2BW_CUDA_MAJOR 13
#endif

/* ---- NVRTC, loaded on first use ------------------------------------------------ */

/* clang-format off */
#define PD_NVRTC_FUNCS(X)                                                                 \
  X(nvrtcVersion) X(nvrtcGetErrorString) X(nvrtcCreateProgram) X(nvrtcDestroyProgram)    \
  X(nvrtcCompileProgram) X(nvrtcGetProgramLogSize) X(nvrtcGetProgramLog)                 \
  X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN)
/* clang-format on */

typedef struct NvrtcApi {
  CUDA_API_FIELDS(PD_NVRTC_FUNCS)
  int major, minor;
} NvrtcApi;

static NvrtcApi nvrtc_api;
#define PD_XSTR_(x) #x
#define PD_XSTR(x) PD_XSTR_(x)

CUDA_API_BIND(nvrtc_syms, nvrtc_api, PD_NVRTC_FUNCS, "libnvrtc", "", "")

static bool nvrtc_bind(void *h, char *why, size_t n) {
  if (!nvrtc_syms(h, why, n)) return false;
  nvrtcResult r = nvrtc_api.nvrtcVersion(&nvrtc_api.major, &nvrtc_api.minor);
  if (r != NVRTC_SUCCESS) snprintf(why, n, "nvrtcVersion failed: %s", nvrtc_api.nvrtcGetErrorString(r));
  return r == NVRTC_SUCCESS;
}

static const char *const nvrtc_names[] = {"libnvrtc.so." PD_XSTR(PD2BW_CUDA_MAJOR), "libnvrtc.so", NULL};
static CudaLib nvrtc_lib = CUDA_LIB("PD2BW_LIBNVRTC", nvrtc_names, "NVRTC not found (", ")", nvrtc_bind);

static const NvrtcApi *nvrtc_load(char *err, size_t errlen) {
  return cuda_lib_load(&nvrtc_lib, err, errlen) ? &nvrtc_api : NULL;
}

bool cuda_nvrtc_version(int *major, int *minor, char *err, size_t errlen) {
  const NvrtcApi *api = nvrtc_load(err, errlen);
  if (!api) return false;
  *major = api->major;
  *minor = api->minor;
  return true;
}

/* ---- small helpers ---------------------------------------------------------------- */

static __attribute__((format(printf, 1, 2))) char *pd_asprintf(const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  PD_CHECK(n >= 0);
  char *s = pd_malloc((size_t)n + 1);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}

typedef struct Hash128 {
  uint64_t a, b;
} Hash128;

/* The cache key: a 128-bit hash of a format tag, the source, every option in order,
 * NVRTC's version and the architecture, so a new toolkit, a new option or a changed
 * kernel all miss. Two FNV-1a lanes with different offsets and primes; bytes and a
 * length frame per field, so ("ab","c") and ("a","bc") hash differently. */
static void hash_bytes(Hash128 *h, const void *p, size_t n) {
  const unsigned char *s = p;
  for (size_t i = 0; i < n; i++) {
    h->a = (h->a ^ s[i]) * 0x100000001b3ull;
    h->b = (h->b ^ s[i]) * 0x00000100000001b3ull * 0x9e3779b97f4a7c15ull;
  }
  uint64_t len = n;
  for (int i = 0; i < 8; i++) {
    unsigned char c = (unsigned char)(len >> (8 * i));
    h->a = (h->a ^ c) * 0x100000001b3ull;
    h->b = (h->b ^ c) * 0x00000100000001b3ull * 0x9e3779b97f4a7c15ull;
  }
}

static void hash_str(Hash128 *h, const char *s) { hash_bytes(h, s, strlen(s)); }

static bool is_elf(const void *p, size_t n) {
  return n >= 4 && memcmp(p,
                          "\x7f"
                          "ELF",
                          4) == 0;
}

/* The cache directory for cubins, pd_malloc'd, or NULL when caching is off: <base>/cuda
 * under the stage cache's one rule (runtime/io/io.h cache_dir_for_run): used only when
 * this user's and writable by no one else, else a private directory for this run. */
static char *cache_dir_for(const CudaCompileOptions *o) {
  if (o->cache_dir && !*o->cache_dir) return NULL;
  char err[IO_ERR_LEN];
  char *dir = cache_dir_for_run(o->cache_dir, "cuda", err, sizeof err);
  if (!dir) fprintf(stderr, "pd2bw: warning: %s; cubins are not cached\n", err);
  return dir;
}

/* Temporary file in the same directory, then rename: never a partial entry. The
 * entry is the cubin and its seal. A failure only costs the next run a recompile,
 * so it warns and goes on. Temporaries (<key>.cubin.tmp.<pid>.<n>) of dead processes
 * are removed first. */
static void write_cache(const char *dir, const char *path, const void *data, size_t size) {
  static _Atomic unsigned long serial; /* unique per thread of this process */
  stale_tmp_sweep_cache(dir, 32, ".cubin");
  char *tmp = pd_asprintf("%s.tmp.%ld.%lu", path, (long)getpid(), ++serial);
  char seal[CACHE_SEAL_BYTES + 1];
  cache_seal_make(data, size, seal);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0666);
  bool ok = fd >= 0;
  if (ok) {
    FILE *f = fdopen(fd, "wb");
    ok = f && fwrite(data, 1, size, f) == size && fwrite(seal, 1, CACHE_SEAL_BYTES, f) == CACHE_SEAL_BYTES;
    if (f)
      ok = fclose(f) == 0 && ok;
    else
      close(fd);
    ok = ok && rename(tmp, path) == 0;
    if (!ok) unlink(tmp);
  }
  if (!ok)
    fprintf(stderr, "pd2bw: warning: cannot write NVRTC cache entry %s: %s\n", path,
            strerror(errno));
  free(tmp);
}

/* The cached cubin at path, its seal checked and removed; false when there is none
 * or it is damaged (then with a note on stderr: it is compiled again). */
static bool read_cache(const char *path, void **data, size_t *size) {
  struct stat st;
  if (stat(path, &st) != 0 && errno == ENOENT) return false;
  char why[IO_ERR_LEN];
  *data = io_read_all(path, size, why, sizeof why);
  bool ok = *data && cache_seal_check(*data, *size, why, sizeof why);
  if (ok) *size -= CACHE_SEAL_BYTES;
  if (ok && !is_elf(*data, *size)) {
    snprintf(why, sizeof why, "not a cubin");
    ok = false;
  }
  if (!ok) {
    fprintf(stderr, "pd2bw: note: the cached cubin %s is damaged (%s); compiling it again\n", path, why);
    free(*data);
    *data = NULL;
    *size = 0;
  }
  return ok;
}

/* ---- compile ---------------------------------------------------------------------- */

bool cuda_nvrtc_compile(const char *src, const CudaCompileOptions *o, CudaBinary *out, char **err) {
  memset(out, 0, sizeof *out);
  *err = NULL;
  char why[640];
  const NvrtcApi *api = nvrtc_load(why, sizeof why);
  if (!api) {
    *err = pd_asprintf("cannot compile CUDA code: %s", why);
    return false;
  }
  if (o->arch < 10 || o->arch > 1000) {
    *err = pd_asprintf("cannot compile CUDA code: bad architecture %d (want e.g. 90)", o->arch);
    return false;
  }
  const char *name = o->name ? o->name : "pd2bw.cu";

  /* The options, fixed ones first. */
  const char *incdir = getenv("PD2BW_CUDA_INCLUDE");
  if (!incdir || !*incdir) incdir = PD2BW_CUDA_INCLUDE_DIR;
  struct stat st;
  bool have_inc = incdir[0] && stat(incdir, &st) == 0 && S_ISDIR(st.st_mode);
  int nopt = 0;
  char **opts = pd_calloc((size_t)(4 + o->nextra), sizeof *opts);
  opts[nopt++] = pd_asprintf("--gpu-architecture=sm_%d", o->arch);
  opts[nopt++] = pd_strdup("-default-device");
  opts[nopt++] = pd_strdup("--std=c++17");
  if (have_inc) opts[nopt++] = pd_asprintf("-I%s", incdir);
  for (int i = 0; i < o->nextra; i++) opts[nopt++] = pd_strdup(o->extra[i]);

  Hash128 h = {0xcbf29ce484222325ull, 0x84222325cbf29ce4ull};
  hash_str(&h, "pd2bw-nvrtc-cubin-2"); /* 2: entries end in a seal */
  hash_str(&h, src);
  for (int i = 0; i < nopt; i++) hash_str(&h, opts[i]);
  int ver[3] = {api->major, api->minor, o->arch};
  hash_bytes(&h, ver, sizeof ver);
  snprintf(out->key, sizeof out->key, "%016llx%016llx", (unsigned long long)h.a,
           (unsigned long long)h.b);

  char *dir = cache_dir_for(o);
  char *path = dir ? pd_asprintf("%s/%s.cubin", dir, out->key) : NULL;
  bool ok = false;
  if (path && read_cache(path, &out->data, &out->size)) out->cache_hit = ok = true;

  if (!ok) {
    nvrtcProgram prog;
    nvrtcResult r = api->nvrtcCreateProgram(&prog, src, name, 0, NULL, NULL);
    if (r != NVRTC_SUCCESS) {
      *err = pd_asprintf("%s: nvrtcCreateProgram failed: %s", name, api->nvrtcGetErrorString(r));
    } else {
      r = api->nvrtcCompileProgram(prog, nopt, (const char *const *)opts);
      size_t logn = 0;
      char *log = NULL;
      if (api->nvrtcGetProgramLogSize(prog, &logn) == NVRTC_SUCCESS && logn > 1) {
        log = pd_malloc(logn + 1);
        if (api->nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS) log[0] = 0;
        log[logn] = 0;
      }
      if (r != NVRTC_SUCCESS) {
        *err = pd_asprintf("%s: NVRTC compilation for sm_%d failed (%s):\n%s", name, o->arch,
                           api->nvrtcGetErrorString(r), log ? log : "(no log)");
      } else {
        size_t n = 0;
        r = api->nvrtcGetCUBINSize(prog, &n);
        if (r != NVRTC_SUCCESS || n == 0) {
          *err = pd_asprintf("%s: nvrtcGetCUBINSize failed: %s", name, api->nvrtcGetErrorString(r));
        } else {
          out->data = pd_malloc(n);
          out->size = n;
          r = api->nvrtcGetCUBIN(prog, out->data);
          if (r != NVRTC_SUCCESS) {
            *err = pd_asprintf("%s: nvrtcGetCUBIN failed: %s", name, api->nvrtcGetErrorString(r));
          } else {
            ok = true;
            if (path) write_cache(dir, path, out->data, out->size);
          }
        }
      }
      free(log);
      api->nvrtcDestroyProgram(&prog);
    }
  }

  if (!ok) {
    free(out->data);
    out->data = NULL;
    out->size = 0;
  }
  for (int i = 0; i < nopt; i++) free(opts[i]);
  free(opts);
  free(path);
  free(dir);
  return ok;
}

void cuda_binary_free(CudaBinary *b) {
  if (!b) return;
  free(b->data);
  b->data = NULL;
  b->size = 0;
}

bool cuda_cubin_has_symbol(const CudaBinary *b, const char *name) {
  size_t n = strlen(name) + 1; /* with its NUL: "pkc_x" must not match "pkc_x_y" */
  const char *p = b->data;
  if (!p || b->size < n) return false;
  for (size_t i = 0; i + n <= b->size; i++)
    if (p[i] == name[0] && memcmp(p + i, name, n) == 0 &&
        (i == 0 || p[i - 1] == 0 || p[i - 1] == '.'))
      return true;
  return false;
}
