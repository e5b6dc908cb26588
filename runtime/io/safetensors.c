/* runtime/io/safetensors.c — reading and writing the safetensors format.
 *
 * Layout: u64 little-endian N, then N bytes of JSON header, then the data area.
 * The header maps tensor names to {"dtype", "shape", "data_offsets": [begin,
 * end]} with offsets relative to the data area, plus an optional
 * "__metadata__" object of string values. (Hugging Face pads the header with
 * spaces to a multiple of 8 so that the data area is aligned; we do the same.)
 *
 * The reader trusts nothing: it checks the header length against the file,
 * the JSON, every entry's dtype, shape and offsets, that each tensor's bytes
 * match its shape, that tensors do not overlap and that names are unique —
 * all before a single tensor is handed out, and every message names the file
 * and the tensor. A checkpoint that passes st_open can be read without bounds
 * checks.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "runtime/io/io.h"

static const struct {
  const char *name;
  size_t size;
} dtypes[ST_DTYPE_COUNT] = {
    [ST_F32] = {"F32", 4},   [ST_F16] = {"F16", 2}, [ST_BF16] = {"BF16", 2}, [ST_F64] = {"F64", 8},
    [ST_I64] = {"I64", 8},   [ST_I32] = {"I32", 4}, [ST_I16] = {"I16", 2},   [ST_I8] = {"I8", 1},
    [ST_U8] = {"U8", 1},     [ST_U16] = {"U16", 2}, [ST_U32] = {"U32", 4},   [ST_U64] = {"U64", 8},
    [ST_BOOL] = {"BOOL", 1},
};

const char *st_dtype_name(StDType t) {
  PD_CHECK((unsigned)t < ST_DTYPE_COUNT);
  return dtypes[t].name;
}

size_t st_dtype_size(StDType t) {
  PD_CHECK((unsigned)t < ST_DTYPE_COUNT);
  return dtypes[t].size;
}

static int dtype_lookup(const char *s) {
  for (int i = 0; i < ST_DTYPE_COUNT; i++)
    if (strcmp(dtypes[i].name, s) == 0) return i;
  return -1;
}

const char *st_shape_str(int rank, const int64_t *shape, char *buf, size_t n) {
  size_t w = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < rank && w < n; i++)
    w += (size_t)snprintf(buf + w, n - w, "%s%lld", i ? "," : "", (long long)shape[i]);
  if (w < n) snprintf(buf + w, n - w, "]");
  return buf;
}

/* numel of a shape, false on overflow. */
static bool st_numel(int rank, const int64_t *shape, uint64_t *out) {
  uint64_t p = 1;
  for (int i = 0; i < rank; i++) {
    if (shape[i] < 0 || __builtin_mul_overflow(p, (uint64_t)shape[i], &p)) return false;
  }
  *out = p;
  return true;
}

/* ---- writer ------------------------------------------------------------------ */
static const StEntry *sort_base;
static int cmp_entry_name(const void *a, const void *b) {
  return strcmp(sort_base[*(const int *)a].name, sort_base[*(const int *)b].name);
}

bool st_write(const char *path, const StEntry *e, int n, const char *const *meta_kv, int nmeta,
              char *err, size_t errlen) {
  AtomicFile af;
  return st_write_uncommitted(&af, path, e, n, meta_kv, nmeta, err, errlen) &&
         atomic_commit(&af, err, errlen);
}

bool st_write_uncommitted(AtomicFile *af, const char *path, const StEntry *e, int n,
                          const char *const *meta_kv, int nmeta, char *err, size_t errlen) {
  int *order = pd_malloc(((size_t)n + 1) * sizeof *order);
  uint64_t *nbytes = pd_malloc(((size_t)n + 1) * sizeof *nbytes);
  cJSON *root = cJSON_CreateObject();
  PD_CHECK(root != NULL, "(cJSON_CreateObject)");
  bool ok = true;
  for (int i = 0; i < n && ok; i++) {
    order[i] = i;
    uint64_t numel;
    if (!e[i].name || !*e[i].name || strcmp(e[i].name, "__metadata__") == 0) {
      snprintf(err, errlen, "%s: tensor #%d: invalid name \"%s\"", path, i,
               e[i].name ? e[i].name : "(null)");
      ok = false;
    } else if ((unsigned)e[i].dtype >= ST_DTYPE_COUNT || e[i].rank < 0 || e[i].rank > ST_MAX_RANK ||
               !st_numel(e[i].rank, e[i].shape, &numel) ||
               __builtin_mul_overflow(numel, st_dtype_size(e[i].dtype), &nbytes[i])) {
      snprintf(err, errlen, "%s: tensor \"%s\": invalid dtype or shape", path, e[i].name);
      ok = false;
    } else if (nbytes[i] && !e[i].data) {
      snprintf(err, errlen, "%s: tensor \"%s\": no data", path, e[i].name);
      ok = false;
    }
  }
  if (ok) {
    sort_base = e;
    qsort(order, (size_t)n, sizeof *order, cmp_entry_name);
    for (int i = 1; i < n && ok; i++)
      if (strcmp(e[order[i - 1]].name, e[order[i]].name) == 0) {
        snprintf(err, errlen, "%s: tensor \"%s\" given twice", path, e[order[i]].name);
        ok = false;
      }
  }
  char *header = NULL;
  if (ok) {
    if (nmeta > 0) {
      cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
      for (int i = 0; i < nmeta; i++)
        cJSON_AddStringToObject(meta, meta_kv[2 * i], meta_kv[2 * i + 1]);
    }
    uint64_t off = 0;
    for (int k = 0; k < n; k++) {
      const StEntry *t = &e[order[k]];
      cJSON *obj = cJSON_AddObjectToObject(root, t->name);
      cJSON_AddStringToObject(obj, "dtype", st_dtype_name(t->dtype));
      cJSON *shape = cJSON_AddArrayToObject(obj, "shape");
      for (int d = 0; d < t->rank; d++)
        cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
      cJSON *offs = cJSON_AddArrayToObject(obj, "data_offsets");
      cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
      off += nbytes[order[k]];
      cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
    }
    header = cJSON_PrintUnformatted(root);
    PD_CHECK(header != NULL, "(cJSON_PrintUnformatted)");
  }
  cJSON_Delete(root);
  if (ok && !atomic_open(af, path, err, errlen)) ok = false;
  if (ok) {
    size_t hlen = strlen(header);
    uint64_t padded = (hlen + 7) / 8 * 8;
    atomic_write(af, &padded, 8);
    atomic_write(af, header, hlen);
    atomic_write(af, "        ", padded - hlen);
    for (int k = 0; k < n; k++) atomic_write(af, e[order[k]].data, nbytes[order[k]]);
  }
  cJSON_free(header);
  free(order);
  free(nbytes);
  return ok;
}

/* ---- reader ------------------------------------------------------------------- */
struct SafeTensors {
  char *path;
  void *map;
  size_t size;
  StTensor *t; /* sorted by name */
  int n;
  char **meta; /* key, value, key, value, ... */
  int nmeta;
};

const char *st_path(const SafeTensors *st) { return st->path; }
int st_count(const SafeTensors *st) { return st->n; }
const StTensor *st_tensor(const SafeTensors *st, int i) {
  PD_CHECK(i >= 0 && i < st->n);
  return &st->t[i];
}

static int cmp_tensor_name(const void *a, const void *b) {
  return strcmp(((const StTensor *)a)->name, ((const StTensor *)b)->name);
}

const StTensor *st_find(const SafeTensors *st, const char *name) {
  StTensor key = {.name = name};
  return bsearch(&key, st->t, (size_t)st->n, sizeof *st->t, cmp_tensor_name);
}

const char *st_meta(const SafeTensors *st, const char *key) {
  for (int i = 0; i < st->nmeta; i++)
    if (strcmp(st->meta[2 * i], key) == 0) return st->meta[2 * i + 1];
  return NULL;
}

void st_close(SafeTensors *st) {
  if (!st) return;
  for (int i = 0; i < st->n; i++) free((char *)st->t[i].name);
  for (int i = 0; i < 2 * st->nmeta; i++) free(st->meta[i]);
  free(st->meta);
  free(st->t);
  if (st->map) munmap(st->map, st->size);
  free(st->path);
  free(st);
}

/* A JSON number that is a non-negative integer exactly representable. */
static bool json_uint(const cJSON *j, uint64_t *out) {
  if (!cJSON_IsNumber(j)) return false;
  double v = j->valuedouble;
  if (!(v >= 0 && v <= 9007199254740992.0) || v != floor(v)) return false;
  *out = (uint64_t)v;
  return true;
}

/* Fills *t from one header entry; data_size bounds the offsets. */
static bool parse_entry(const SafeTensors *st, const cJSON *j, StTensor *t, uint64_t data_size,
                        uint64_t data_start, char *err, size_t errlen) {
  const char *name = j->string;
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "dtype");
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(j, "shape");
  const cJSON *offs = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
  if (!cJSON_IsObject(j) || !cJSON_IsString(dt) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs)) {
    snprintf(err, errlen,
             "%s: tensor \"%s\": expected an object with \"dtype\" (string), \"shape\" and "
             "\"data_offsets\" (arrays)",
             st->path, name);
    return false;
  }
  int d = dtype_lookup(dt->valuestring);
  if (d < 0) {
    snprintf(err, errlen, "%s: tensor \"%s\": unknown dtype \"%s\"", st->path, name,
             dt->valuestring);
    return false;
  }
  t->dtype = (StDType)d;
  int rank = cJSON_GetArraySize(shape);
  if (rank > ST_MAX_RANK) {
    snprintf(err, errlen, "%s: tensor \"%s\": rank %d exceeds the supported %d", st->path, name,
             rank, ST_MAX_RANK);
    return false;
  }
  t->rank = rank;
  int i = 0;
  const cJSON *dim;
  cJSON_ArrayForEach(dim, shape) {
    uint64_t v;
    if (!json_uint(dim, &v) || v > INT64_MAX) {
      snprintf(err, errlen, "%s: tensor \"%s\": shape dimension %d is not a non-negative integer",
               st->path, name, i);
      return false;
    }
    t->shape[i++] = (int64_t)v;
  }
  uint64_t begin, end, numel;
  if (cJSON_GetArraySize(offs) != 2 || !json_uint(cJSON_GetArrayItem(offs, 0), &begin) ||
      !json_uint(cJSON_GetArrayItem(offs, 1), &end) || begin > end) {
    snprintf(err, errlen,
             "%s: tensor \"%s\": data_offsets must be [begin, end] with 0 <= begin <= end",
             st->path, name);
    return false;
  }
  if (end > data_size) {
    snprintf(err, errlen,
             "%s: tensor \"%s\": data_offsets [%llu, %llu] run past the data area (%llu bytes; "
             "file truncated?)",
             st->path, name, (unsigned long long)begin, (unsigned long long)end,
             (unsigned long long)data_size);
    return false;
  }
  uint64_t want = 0;
  char sbuf[128];
  if (!st_numel(rank, t->shape, &numel) ||
      __builtin_mul_overflow(numel, st_dtype_size(t->dtype), &want) || want != end - begin) {
    snprintf(err, errlen,
             "%s: tensor \"%s\": shape %s of %s needs %llu bytes but data_offsets [%llu, %llu] "
             "hold %llu",
             st->path, name, st_shape_str(rank, t->shape, sbuf, sizeof sbuf), dt->valuestring,
             (unsigned long long)want, (unsigned long long)begin, (unsigned long long)end,
             (unsigned long long)(end - begin));
    return false;
  }
  t->numel = (int64_t)numel;
  t->nbytes = (size_t)(end - begin);
  t->offset = data_start + begin;
  t->data = (const char *)st->map + t->offset;
  return true;
}

static int cmp_tensor_offset(const void *a, const void *b) {
  const StTensor *x = *(const StTensor *const *)a, *y = *(const StTensor *const *)b;
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static bool parse_metadata(SafeTensors *st, const cJSON *meta, char *err, size_t errlen) {
  if (!cJSON_IsObject(meta)) {
    snprintf(err, errlen, "%s: \"__metadata__\" must be an object of strings", st->path);
    return false;
  }
  const cJSON *kv;
  cJSON_ArrayForEach(kv, meta) {
    if (!cJSON_IsString(kv)) {
      snprintf(err, errlen, "%s: \"__metadata__\": value of \"%s\" is not a string", st->path,
               kv->string);
      return false;
    }
    st->meta = pd_realloc(st->meta, (size_t)(st->nmeta + 1) * 2 * sizeof *st->meta);
    st->meta[2 * st->nmeta] = pd_strdup(kv->string);
    st->meta[2 * st->nmeta + 1] = pd_strdup(kv->valuestring);
    st->nmeta++;
  }
  return true;
}

/* Parses the JSON into st->t and st->meta; every entry checked on its own. */
static bool parse_json(SafeTensors *st, const char *hdr, uint64_t hlen, char *err, size_t errlen) {
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(hdr, (size_t)hlen, &end, false);
  if (!root) {
    size_t off = 8 + (end && end >= hdr ? (size_t)(end - hdr) : 0);
    snprintf(err, errlen, "%s: offset %zu: malformed JSON in the safetensors header", st->path,
             off);
    return false;
  }
  bool ok = true;
  for (const char *p = end; ok && p < hdr + hlen; p++)
    if (*p != ' ' && *p != '\n' && *p != '\t' && *p != '\r') {
      snprintf(err, errlen, "%s: offset %zu: unexpected bytes after the header JSON", st->path,
               (size_t)(8 + (p - hdr)));
      ok = false;
    }
  if (ok && !cJSON_IsObject(root)) {
    snprintf(err, errlen, "%s: offset 8: the safetensors header must be a JSON object", st->path);
    ok = false;
  }
  if (!ok) {
    cJSON_Delete(root);
    return false;
  }
  st->t = pd_calloc((size_t)cJSON_GetArraySize(root) + 1, sizeof *st->t);
  uint64_t data_start = 8 + hlen, data_size = st->size - data_start;
  const cJSON *item;
  cJSON_ArrayForEach(item, root) {
    if (strcmp(item->string, "__metadata__") == 0) {
      ok = parse_metadata(st, item, err, errlen);
    } else {
      StTensor *t = &st->t[st->n];
      ok = parse_entry(st, item, t, data_size, data_start, err, errlen);
      if (ok) t->name = pd_strdup(item->string), st->n++;
    }
    if (!ok) break;
  }
  cJSON_Delete(root);
  return ok;
}

/* The checks across entries: unique names, no overlap. */
static bool parse_header(SafeTensors *st, const char *hdr, uint64_t hlen, char *err,
                         size_t errlen) {
  if (!parse_json(st, hdr, hlen, err, errlen)) return false;
  uint64_t data_start = 8 + hlen;
  bool ok = true;
  qsort(st->t, (size_t)st->n, sizeof *st->t, cmp_tensor_name);
  for (int i = 1; i < st->n; i++)
    if (strcmp(st->t[i - 1].name, st->t[i].name) == 0) {
      snprintf(err, errlen, "%s: tensor \"%s\" appears twice in the header", st->path,
               st->t[i].name);
      return false;
    }
  const StTensor **by_off = pd_malloc(((size_t)st->n + 1) * sizeof *by_off);
  for (int i = 0; i < st->n; i++) by_off[i] = &st->t[i];
  qsort(by_off, (size_t)st->n, sizeof *by_off, cmp_tensor_offset);
  /* Sorted by start, if any two tensors overlap then two neighbours do (the
   * one right after the earlier of the two starts inside it), so comparing
   * each with the previous non-empty one suffices. Empty tensors occupy
   * nothing. */
  const StTensor *a = NULL;
  for (int i = 0; i < st->n && ok; i++) {
    const StTensor *b = by_off[i];
    if (!b->nbytes) continue;
    if (a && b->offset < a->offset + a->nbytes) {
      snprintf(err, errlen,
               "%s: tensors \"%s\" and \"%s\" overlap (data_offsets [%llu, %llu] and [%llu, "
               "%llu])",
               st->path, a->name, b->name, (unsigned long long)(a->offset - data_start),
               (unsigned long long)(a->offset - data_start + a->nbytes),
               (unsigned long long)(b->offset - data_start),
               (unsigned long long)(b->offset - data_start + b->nbytes));
      ok = false;
    }
    a = b;
  }
  free(by_off);
  return ok;
}

SafeTensors *st_open(const char *path, char *err, size_t errlen) {
  size_t size;
  void *map = io_map_file(path, "checkpoint", 8, &size, err, errlen); /* a FIFO: refused, never waited on */
  if (!map && size < 8)
    snprintf(err, errlen, "%s: %zu bytes: too short for a safetensors file (8-byte header length)", path, size);
  if (!map) return NULL;
  SafeTensors *st = pd_calloc(1, sizeof *st);
  st->path = pd_strdup(path);
  st->map = map;
  st->size = size;
  uint64_t hlen;
  memcpy(&hlen, st->map, 8);
  if (hlen > st->size - 8) {
    snprintf(err, errlen,
             "%s: offset 0: header length %llu runs past the end of the file (%zu bytes); "
             "truncated, or not a safetensors file",
             path, (unsigned long long)hlen, st->size);
    st_close(st);
    return NULL;
  }
  if (!parse_header(st, (const char *)st->map + 8, hlen, err, errlen)) {
    st_close(st);
    return NULL;
  }
  return st;
}

/* ---- conversion to float32 ---------------------------------------------------- */
static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float f;
  if (exp == 0) { /* zero or subnormal: man · 2^-24 */
    f = ldexpf((float)man, -24);
    return sign ? -f : f;
  }
  uint32_t bits =
      exp == 31 ? sign | 0x7f800000u | (man << 13) : sign | ((exp + 112) << 23) | (man << 13);
  memcpy(&f, &bits, 4);
  return f;
}

/* Every value finite: a NaN or Inf (a checkpoint of a run that diverged, a damaged
 * file) is refused naming the tensor and the element, not trained on (issue 24). */
static bool all_finite(const SafeTensors *st, const StTensor *t, const float *x, char *err, size_t errlen) {
  for (int64_t i = 0; i < t->numel; i++)
    if (!isfinite(x[i])) {
      snprintf(err, errlen, "%s: tensor \"%s\": element %lld is %s (a checkpoint of a run that diverged?)",
               st->path, t->name, (long long)i, isnan(x[i]) ? "NaN" : "infinite");
      return false;
    }
  return true;
}

bool st_read_f32(const SafeTensors *st, const StTensor *t, float *dst, char *err, size_t errlen) {
  const unsigned char *p = t->data;
  switch (t->dtype) {
    case ST_F32:
      memcpy(dst, p, t->nbytes);
      return all_finite(st, t, dst, err, errlen);
    case ST_F16:
    case ST_BF16:
      for (int64_t i = 0; i < t->numel; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        if (t->dtype == ST_F16) {
          dst[i] = half_to_float(h);
        } else {
          uint32_t bits = (uint32_t)h << 16;
          memcpy(&dst[i], &bits, 4);
        }
      }
      return all_finite(st, t, dst, err, errlen);
    case ST_F64:
    case ST_I64:
    case ST_I32:
    case ST_I16:
    case ST_I8:
    case ST_U8:
    case ST_U16:
    case ST_U32:
    case ST_U64:
    case ST_BOOL:
    case ST_DTYPE_COUNT:
      break;
  }
  snprintf(err, errlen, "%s: tensor \"%s\": dtype %s cannot be read as float32 (F32, F16, BF16)",
           st->path, t->name, st_dtype_name(t->dtype));
  return false;
}
