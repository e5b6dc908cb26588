/* runtime/io/data.c — memory-mapped token files and the batch sampler.
 *
 * Three layouts (DataFormat, io.h): llm.c's uint16 (GPT-2) or uint32 (Llama 3) files
 * and nanoGPT's raw uint16. Ids are read only through tok_at, which widens either
 * width, so nothing after data_open knows it. The file is mapped read-only and checked
 * whole at open (header, size, every id against the vocabulary): a bad id is a message
 * with file, offset and value, not an out-of-bounds embedding hours later on some rank.
 *
 * The sampler is llm.c's DataLoader (batch = B consecutive windows of T + 1 tokens,
 * the tail that fills no batch dropped) plus an optional per-epoch shuffle: Fisher-Yates
 * driven by splitmix64 seeded from (seed, epoch) only, so the sample stream is a pure
 * function of (file, B, T, seed) that a resumed run and every replica recompute alone.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "runtime/io/io.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "pd2bw reads little-endian token files and checkpoints by direct mapping"
#endif

struct DataFile {
  char *path;
  DataFormat format;
  void *map; /* whole file */
  size_t map_size;
  const void *tokens;
  int token_bytes; /* 2 or 4 */
  int64_t ntokens;
  int64_t max_token;
};

const char *data_path(const DataFile *f) { return f->path; }
DataFormat data_format(const DataFile *f) { return f->format; }
int64_t data_ntokens(const DataFile *f) { return f->ntokens; }
int data_token_bytes(const DataFile *f) { return f->token_bytes; }
int64_t data_max_token(const DataFile *f) { return f->max_token; }

/* Token i, widened: the one place that knows the width (a predictable branch). */
static inline uint32_t tok_at(const DataFile *f, int64_t i) {
  return f->token_bytes == 4 ? ((const uint32_t *)f->tokens)[i] : ((const uint16_t *)f->tokens)[i];
}
uint32_t data_token(const DataFile *f, int64_t i) {
  PD_CHECK(i >= 0 && i < f->ntokens);
  return tok_at(f, i);
}

void data_close(DataFile *f) {
  if (!f) return;
  if (f->map) munmap(f->map, f->map_size);
  free(f->path);
  free(f);
}

/* The token width an llm.c header's magic announces (2 or 4), with the version that
 * magic goes with; 0 for a magic that is neither. */
static int llmc_width(int32_t magic, int32_t *version) {
  if (magic == DATA_LLMC_MAGIC) return *version = DATA_LLMC_VERSION, 2;
  if (magic == DATA_LLMC32_MAGIC) return *version = DATA_LLMC32_VERSION, 4;
  return 0;
}

/* Checks the llm.c header against the file size and points f->tokens past it. */
static bool parse_llmc(DataFile *f, const int32_t *hdr, char *err, size_t errlen) {
  if (f->map_size < DATA_LLMC_HEADER_BYTES) {
    snprintf(err, errlen,
             "%s: truncated: %zu bytes, shorter than the %d-byte llm.c token-file header", f->path,
             f->map_size, DATA_LLMC_HEADER_BYTES);
    return false;
  }
  int32_t version = 0;
  int w = llmc_width(hdr[0], &version);
  if (!w) {
    snprintf(err, errlen,
             "%s: offset 0: bad magic %d (an llm.c token file starts with %d, or %d for uint32 "
             "tokens)",
             f->path, hdr[0], DATA_LLMC_MAGIC, DATA_LLMC32_MAGIC);
    return false;
  }
  if (hdr[1] != version) {
    snprintf(err, errlen,
             "%s: offset 4: unsupported llm.c token-file version %d (expected %d with magic %d)",
             f->path, hdr[1], version, hdr[0]);
    return false;
  }
  int64_t n = hdr[2];
  size_t have = f->map_size - DATA_LLMC_HEADER_BYTES;
  if (n < 0) {
    snprintf(err, errlen, "%s: offset 8: negative token count %lld", f->path, (long long)n);
    return false;
  }
  if ((uint64_t)n * (uint64_t)w > have) {
    snprintf(err, errlen,
             "%s: truncated: header (offset 8) says %lld tokens (%llu bytes of uint%d) but only %zu "
             "bytes follow the header",
             f->path, (long long)n, (unsigned long long)n * (unsigned)w, 8 * w, have);
    return false;
  }
  if ((uint64_t)n * (uint64_t)w < have) {
    snprintf(err, errlen,
             "%s: %zu bytes of trailing garbage after the %lld uint%d tokens the header (offset 8) "
             "announces",
             f->path, have - (size_t)n * (size_t)w, (long long)n, 8 * w);
    return false;
  }
  f->tokens = (const char *)f->map + DATA_LLMC_HEADER_BYTES;
  f->token_bytes = w;
  f->ntokens = n;
  return true;
}

/* DATA_AUTO's choice: llm.c for a file that starts with either magic (shorter than the
 * header too, which parse_llmc reports as truncated), and for an llm.c header whose
 * magic alone is damaged (a version of either kind and a token count that fills the
 * file exactly at its width: parse_llmc names the bad magic); else raw uint16 tokens.
 * Without this both were read as raw tokens and reported as ids outside the vocabulary
 * (issue 24). */
static DataFormat sniff(const DataFile *f, const int32_t *hdr) {
  int32_t version;
  if (f->map_size >= 4 && llmc_width(hdr[0], &version)) return DATA_LLMC;
  if (f->map_size >= DATA_LLMC_HEADER_BYTES && hdr[2] > 0) {
    uint64_t body = f->map_size - DATA_LLMC_HEADER_BYTES;
    if ((hdr[1] == DATA_LLMC_VERSION && (uint64_t)hdr[2] * 2 == body) ||
        (hdr[1] == DATA_LLMC32_VERSION && (uint64_t)hdr[2] * 4 == body))
      return DATA_LLMC;
  }
  return DATA_RAW;
}

DataFile *data_open(const char *path, DataFormat fmt, int64_t vocab, char *err, size_t errlen) {
  size_t size;
  void *map = io_map_file(path, "token file", 1, &size, err, errlen); /* a FIFO: refused, never waited on */
  if (!map) {
    if (size == 0) snprintf(err, errlen, "%s: empty token file", path);
    return NULL;
  }
  DataFile *f = pd_calloc(1, sizeof *f);
  f->path = pd_strdup(path);
  f->map = map;
  f->map_size = size;
  const int32_t *hdr = f->map;
  if (fmt == DATA_AUTO) fmt = sniff(f, hdr);
  f->format = fmt;
  bool ok = true;
  switch (fmt) {
    case DATA_LLMC:
      ok = parse_llmc(f, hdr, err, errlen);
      break;
    case DATA_RAW:
      if (f->map_size % 2) {
        snprintf(err, errlen,
                 "%s: odd size (%zu bytes): not a file of uint16 tokens (and it does not "
                 "start with the llm.c magic %d)",
                 path, f->map_size, DATA_LLMC_MAGIC);
        ok = false;
      }
      f->tokens = f->map;
      f->token_bytes = 2;
      f->ntokens = (int64_t)(f->map_size / 2);
      break;
    case DATA_AUTO:
      PD_CHECK(0, "(format resolved above)");
  }
  if (ok && f->ntokens == 0) {
    snprintf(err, errlen, "%s: holds no tokens", path);
    ok = false;
  }
  if (!ok) {
    data_close(f);
    return NULL;
  }
  /* One pass over all tokens: validate and find the largest id. The trainer's ids are
   * int32, so an id above INT32_MAX is refused even without a vocabulary. */
  int64_t limit = vocab > 0 ? vocab : (int64_t)INT32_MAX + 1;
  int64_t mx = -1;
  for (int64_t i = 0; i < f->ntokens; i++) {
    uint32_t t = tok_at(f, i);
    if (t >= limit) {
      size_t off = (size_t)((const char *)f->tokens - (const char *)f->map) + (size_t)i * (size_t)f->token_bytes;
      if (vocab > 0)
        snprintf(err, errlen,
                 "%s: offset %zu: token %u (token #%lld) is outside the model's vocabulary of "
                 "%lld ids",
                 path, off, (unsigned)t, (long long)i, (long long)vocab);
      else
        snprintf(err, errlen, "%s: offset %zu: token %u (token #%lld) is above the largest id %d", path,
                 off, (unsigned)t, (long long)i, INT32_MAX);
      data_close(f);
      return NULL;
    }
    if (t > mx) mx = t;
  }
  f->max_token = mx;
  return f;
}

int64_t data_nwindows(const DataFile *f, int T) {
  PD_CHECK(T > 0);
  return (f->ntokens - 1) / T;
}

void data_get_window(const DataFile *f, int64_t w, int T, int32_t *in, int32_t *tgt) {
  PD_CHECK(w >= 0 && w < data_nwindows(f, T), "(window %lld of %lld)", (long long)w,
           (long long)data_nwindows(f, T));
  int64_t first = w * T;
  for (int i = 0; i < T; i++) { /* ids < vocab <= INT32_MAX + 1 (data_open) */
    in[i] = (int32_t)tok_at(f, first + i);
    tgt[i] = (int32_t)tok_at(f, first + i + 1);
  }
}

/* ---- the sampler ---------------------------------------------------------- */
struct DataLoader {
  const DataFile *file;
  int B, T;
  bool shuffle;
  uint64_t seed;
  int64_t nwindows;
  int64_t epoch_samples; /* E = (nwindows / B) * B */
  int64_t next_batch;
  int64_t *perm;      /* shuffle only: permutation of [0, nwindows) for perm_epoch */
  int64_t perm_epoch; /* -1: none yet */
};

DataLoader *data_loader_create(const DataFile *f, int B, int T, bool shuffle, uint64_t seed,
                               char *err, size_t errlen) {
  if (B <= 0 || T <= 0) {
    snprintf(err, errlen, "%s: batch %d x %d tokens: both must be positive", f->path, B, T);
    return NULL;
  }
  int64_t nw = data_nwindows(f, T);
  if (nw < B) {
    snprintf(err, errlen,
             "%s: %lld tokens are too few for one batch of %d x %d tokens (it needs %lld)", f->path,
             (long long)f->ntokens, B, T, (long long)B * T + 1);
    return NULL;
  }
  DataLoader *l = pd_calloc(1, sizeof *l);
  l->file = f;
  l->B = B;
  l->T = T;
  l->shuffle = shuffle;
  l->seed = seed;
  l->nwindows = nw;
  l->epoch_samples = nw / B * B;
  l->perm_epoch = -1;
  if (shuffle) l->perm = pd_malloc((size_t)nw * sizeof *l->perm);
  return l;
}

void data_loader_destroy(DataLoader *l) {
  if (!l) return;
  free(l->perm);
  free(l);
}

int64_t data_batches_per_epoch(const DataLoader *l) { return l->epoch_samples / l->B; }
void data_seek_batch(DataLoader *l, int64_t k) {
  PD_CHECK(k >= 0);
  l->next_batch = k;
}
int64_t data_tell_batch(const DataLoader *l) { return l->next_batch; }

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in [0, n) without modulo bias (rejection on the short last range). */
static uint64_t uniform_below(uint64_t *s, uint64_t n) {
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t r;
  do r = splitmix64(s);
  while (r >= limit);
  return r % n;
}

static void make_perm(DataLoader *l, int64_t epoch) {
  uint64_t s = l->seed ^ 0x7064326277646174ull; /* "pd2bwdat": keeps seed 0 lively */
  uint64_t e = (uint64_t)epoch;
  s = splitmix64(&s) ^ splitmix64(&e);
  for (int64_t i = 0; i < l->nwindows; i++) l->perm[i] = i;
  for (int64_t i = l->nwindows - 1; i > 0; i--) {
    int64_t j = (int64_t)uniform_below(&s, (uint64_t)i + 1);
    int64_t tmp = l->perm[i];
    l->perm[i] = l->perm[j];
    l->perm[j] = tmp;
  }
  l->perm_epoch = epoch;
}

int64_t data_sample_window(DataLoader *l, int64_t n) {
  PD_CHECK(n >= 0);
  int64_t epoch = n / l->epoch_samples, pos = n % l->epoch_samples;
  if (!l->shuffle) return pos;
  if (l->perm_epoch != epoch) make_perm(l, epoch);
  return l->perm[pos];
}

void data_get_sample(DataLoader *l, int64_t n, int32_t *in, int32_t *tgt) {
  data_get_window(l->file, data_sample_window(l, n), l->T, in, tgt);
}

void data_next_batch(DataLoader *l, int32_t *in, int32_t *tgt) {
  int64_t first = l->next_batch * l->B;
  for (int b = 0; b < l->B; b++)
    data_get_sample(l, first + b, in + (size_t)b * l->T, tgt + (size_t)b * l->T);
  l->next_batch++;
}
