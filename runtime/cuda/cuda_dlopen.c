/* runtime/cuda/cuda_dlopen.c — finding NVIDIA's libraries at run time.
 *
 * Why dlopen and not the linker: the toolkit on build machines ships only a stub
 * libcuda, and a binary linked against libcuda/libnccl/libcublas would not even start
 * where no driver is installed (DESIGN.md §5). Search order: an explicit path in an
 * environment variable (tests point it at a stub or at nothing), the soname through
 * the loader's path, then the toolkit's lib directory recorded at configure time
 * (PD2BW_CUDA_LIBDIR), which the loader's path often lacks.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda/cuda_internal.h"

#ifndef PD2BW_CUDA_LIBDIR
#define PD2BW_CUDA_LIBDIR ""
#endif

/* NULL with dlerror()'s message for the first soname in err. */
static void *cuda_dlopen(const char *env_var, const char *const *sonames, char *err, size_t errlen) {
  const char *path = env_var ? getenv(env_var) : NULL;
  if (path && *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
    snprintf(err, errlen, "%s (set by $%s)", dlerror(), env_var);
    return NULL; /* an explicit choice is not second-guessed */
  }
  char first_err[512];
  snprintf(first_err, sizeof first_err, "%s: not found", sonames[0]);
  for (int i = 0; sonames[i]; i++) {
    void *h = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
    const char *why = dlerror();
    if (i == 0 && why) snprintf(first_err, sizeof first_err, "%s", why);
  }
  if (PD2BW_CUDA_LIBDIR[0]) {
    for (int i = 0; sonames[i]; i++) {
      char full[1024];
      snprintf(full, sizeof full, "%s/%s", PD2BW_CUDA_LIBDIR, sonames[i]);
      void *h = dlopen(full, RTLD_NOW | RTLD_LOCAL);
      if (h) return h;
    }
  }
  snprintf(err, errlen, "%s", first_err); /* dlerror names the library */
  return NULL;
}

bool cuda_lib_load(CudaLib *l, char *err, size_t errlen) {
  pthread_mutex_lock(&l->mu);
  if (l->state == 0) {
    char why[512];
    void *h = cuda_dlopen(l->env_var, l->sonames, why, sizeof why);
    if (!h) snprintf(l->why, sizeof l->why, "%s%s%s", l->missing.before, why, l->missing.after);
    l->state = h && l->bind(h, l->why, sizeof l->why) ? 1 : -1;
  }
  int state = l->state;
  pthread_mutex_unlock(&l->mu);
  if (state < 0) snprintf(err, errlen, "%s", l->why);
  return state > 0;
}

bool cuda_lib_sym(void *h, const char *sym, const char *libname, void *fn, CudaMsg msg, char *why, size_t n) {
  dlerror();
  void *p = dlsym(h, sym);
  if (!p) {
    snprintf(why, n, "%s%s has no symbol %s (too old?)%s", msg.before, libname, sym, msg.after);
    return false;
  }
  memcpy(fn, &p, sizeof p); /* POSIX: dlsym's void * holds a function pointer */
  return true;
}
