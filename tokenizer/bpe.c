/* tokenizer/bpe.c — byte-level byte-pair encoding (GPT-2's, and Hugging Face's
 * tokenizer.json BPE: bpe_hf.c reads it), without Python: the tables, loading GPT-2's
 * vocab.json and merges.txt, and encoding (the steps: bpe_encode).
 *
 * Invariant: vocab.json is checked to be a bijection between spellings and ids, so
 * symbols are vocabulary ids and merging ids is the same as GPT-2 merging strings.
 * Users: docs/data.md. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <utf8proc.h>
#include <string.h>

#include "contract/contract.h"
#include "tokenizer/bpe_internal.h"

/* ---- open-addressing hash tables ----------------------------------------- */
static uint64_t hash_u64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

static size_t pow2_at_least(size_t n) {
  size_t c = 16;
  while (c < n) c *= 2;
  return c;
}

static StrSlot *str_slot(StrSlot *tab, size_t cap, const char *key) {
  size_t i = contract_fnv1a(CONTRACT_FNV_BASIS, key, strlen(key)) & (cap - 1);
  while (tab[i].key && strcmp(tab[i].key, key) != 0) i = (i + 1) & (cap - 1);
  return &tab[i];
}

static uint64_t pair_key(int32_t a, int32_t b) {
  return ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
}

static PairSlot *pair_slot(PairSlot *tab, size_t cap, int32_t a, int32_t b) {
  uint64_t key = pair_key(a, b);
  size_t i = hash_u64(key) & (cap - 1);
  while (tab[i].key && tab[i].key != key) i = (i + 1) & (cap - 1);
  return &tab[i]; /* empty slot: the caller fills it on insert */
}

int64_t bpe_token_id(const Bpe *b, const char *token) {
  StrSlot *s = str_slot(b->vocab, b->vocab_cap, token);
  return s->key ? s->value : -1;
}

int64_t bpe_vocab_size(const Bpe *b) { return b->vocab_size; }

int64_t bpe_doc_start(const Bpe *b, const char **why) {
  *why = b->doc_why[0] ? b->doc_why : NULL;
  return b->has_doc_start ? b->doc_start : -1;
}

void bpe_vocab_add(Bpe *b, const char *token, int32_t id) {
  StrSlot *s = str_slot(b->vocab, b->vocab_cap, token);
  PD_CHECK(!s->key);
  s->key = pd_strdup(token);
  s->value = id;
  if ((int64_t)id + 1 > b->vocab_size) b->vocab_size = (int64_t)id + 1;
}

void bpe_destroy(Bpe *b) {
  if (!b) return;
  for (size_t i = 0; i < b->vocab_cap; i++) free(b->vocab[i].key);
  free(b->vocab);
  free(b->merges);
  for (int i = 0; i < b->nadded; i++) free(b->added[i].content);
  free(b->added);
  free(b);
}

/* ---- byte-to-unicode ------------------------------------------------------ */
uint32_t bpe_byte_to_unicode(uint8_t byte) {
  /* GPT-2 keeps '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF as themselves and
   * gives the remaining bytes, in increasing order, the code points 256, 257, ... */
  if ((byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || byte >= 0xAE) return byte;
  uint32_t n = 0;
  for (unsigned c = 0; c < byte; c++)
    if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE)) n++;
  return 256 + n;
}

const char *bpe_byte_symbol(uint8_t byte, char out[4]) {
  /* a code point below 0x200: one or two UTF-8 bytes, and room for the NUL */
  out[utf8proc_encode_char((utf8proc_int32_t)bpe_byte_to_unicode(byte), (utf8proc_uint8_t *)out)] = '\0';
  return out;
}

/* ---- loading --------------------------------------------------------------- */
/* An id and where it was given, to find two spellings of one id by sorting. */
typedef struct IdAt {
  int32_t id;
  int order; /* in the JSON object */
  const char *key;
} IdAt;

static int by_id_then_order(const void *x, const void *y) {
  const IdAt *a = x, *b = y;
  return a->id != b->id ? (a->id < b->id ? -1 : 1) : (a->order > b->order) - (a->order < b->order);
}

bool bpe_vocab_from_json(Bpe *b, const cJSON *root, size_t extra, const char *where, char *err,
                         size_t errlen) {
  int n = cJSON_GetArraySize(root);
  b->vocab_cap = pow2_at_least(((size_t)n + extra) * 2 + 2);
  b->vocab = pd_calloc(b->vocab_cap, sizeof *b->vocab);
  /* ids seen, to reject two spellings for one id (merging ids would then not be
   * merging strings): sorted rather than indexed, as ids may be sparse and large. */
  IdAt *ids = pd_calloc((size_t)n + 1, sizeof *ids);
  int nids = 0;
  bool ok = true;
  const cJSON *item;
  cJSON_ArrayForEach(item, root) {
    double v = item->valuedouble;
    if (!cJSON_IsNumber(item) || v != (double)(int64_t)v || v < 0 || v > BPE_MAX_ID) {
      snprintf(err, errlen, "%s: token \"%s\": id must be an integer in [0, %d]", where, item->string,
               BPE_MAX_ID);
      ok = false;
      break;
    }
    if (bpe_token_id(b, item->string) >= 0) {
      snprintf(err, errlen, "%s: token \"%s\" appears twice", where, item->string);
      ok = false;
      break;
    }
    bpe_vocab_add(b, item->string, (int32_t)v);
    ids[nids] = (IdAt){(int32_t)v, nids, item->string};
    nids++;
  }
  if (ok) {
    qsort(ids, (size_t)nids, sizeof *ids, by_id_then_order);
    for (int i = 1; i < nids && ok; i++)
      if (ids[i].id == ids[i - 1].id) {
        snprintf(err, errlen, "%s: id %d is given to both \"%s\" and \"%s\"", where, ids[i].id,
                 ids[i - 1].key, ids[i].key);
        ok = false;
      }
  }
  free(ids);
  if (ok && b->vocab_size == 0) {
    snprintf(err, errlen, "%s: empty vocabulary", where);
    ok = false;
  }
  return ok;
}

static bool load_vocab(Bpe *b, const char *path, char *err, size_t errlen) {
  cJSON *root = io_read_json_object(path, " {\"token\": id, ...}", err, errlen);
  if (!root) return false;
  bool ok = bpe_vocab_from_json(b, root, 0, path, err, errlen);
  cJSON_Delete(root);
  return ok;
}

void bpe_merges_reserve(Bpe *b, size_t n) {
  b->merges_cap = pow2_at_least(n * 2 + 2);
  b->merges = pd_calloc(b->merges_cap, sizeof *b->merges);
}

bool bpe_add_merge(Bpe *b, const char *left, const char *right, const char *where, char *err,
                   size_t errlen) {
  size_t n = strlen(left) + strlen(right) + 1;
  char *merged = pd_malloc(n);
  snprintf(merged, n, "%s%s", left, right);
  int64_t a = bpe_token_id(b, left), c = bpe_token_id(b, right), m = bpe_token_id(b, merged);
  const char *missing = a < 0 ? left : c < 0 ? right : m < 0 ? merged : NULL;
  if (missing) snprintf(err, errlen, "%s: token \"%s\" is not in the vocabulary", where, missing);
  free(merged);
  if (missing) return false;
  PairSlot *s = pair_slot(b->merges, b->merges_cap, (int32_t)a, (int32_t)c);
  /* A repeated pair keeps its first (highest-priority) rank. */
  if (!s->key) {
    s->key = pair_key((int32_t)a, (int32_t)c);
    s->rank = b->next_rank++;
    s->merged = (int32_t)m;
  }
  return true;
}

static bool load_merges(Bpe *b, const char *path, char *err, size_t errlen) {
  size_t len;
  char *text = io_read_all(path, &len, err, errlen);
  if (!text) return false;
  size_t nlines = 1;
  for (size_t i = 0; i < len; i++) nlines += text[i] == '\n';
  bpe_merges_reserve(b, nlines);
  int lineno = 0;
  bool ok = true;
  size_t wlen = strlen(path) + 24;
  char *where = pd_malloc(wlen);
  for (char *line = text; ok && line < text + len;) {
    char *nl = memchr(line, '\n', (size_t)(text + len - line));
    char *eol = nl ? nl : text + len;
    char *next = nl ? nl + 1 : text + len;
    lineno++;
    if (eol > line && eol[-1] == '\r') eol--;
    *eol = '\0';
    if (*line == '\0' || (lineno == 1 && strncmp(line, "#version", 8) == 0)) {
      line = next;
      continue;
    }
    char *sp = strchr(line, ' ');
    if (!sp || sp == line || sp[1] == '\0' || strchr(sp + 1, ' ')) {
      snprintf(err, errlen, "%s:%d: expected two tokens separated by one space, got \"%s\"", path,
               lineno, line);
      ok = false;
      break;
    }
    *sp = '\0';
    snprintf(where, wlen, "%s:%d", path, lineno);
    ok = bpe_add_merge(b, line, sp + 1, where, err, errlen);
    line = next;
  }
  free(where);
  free(text);
  return ok;
}

void bpe_finish(Bpe *b) {
  for (int c = 0; c < 256; c++) {
    char sym[4];
    b->byte_id[c] = (int32_t)bpe_token_id(b, bpe_byte_symbol((uint8_t)c, sym));
  }
}

Bpe *bpe_load(const char *vocab_path, const char *merges_path, char *err, size_t errlen) {
  Bpe *b = pd_calloc(1, sizeof *b);
  if (!load_vocab(b, vocab_path, err, errlen) || !load_merges(b, merges_path, err, errlen)) {
    bpe_destroy(b);
    return NULL;
  }
  bpe_finish(b);
  return b;
}

bool text_check(const char *text, size_t n, size_t *offset, const char **why) {
  const unsigned char *t = (const unsigned char *)text;
  for (size_t i = 0; i < n;) {
    if (t[i] == 0) {
      *offset = i;
      *why = "NUL byte";
      return false;
    }
    if (t[i] < 0x80) {
      i++;
      continue;
    }
    utf8proc_int32_t cp;
    utf8proc_ssize_t len = utf8proc_iterate(t + i, n - i < 4 ? (utf8proc_ssize_t)(n - i) : 4, &cp);
    if (len > 0 && cp >= 0) {
      i += (size_t)len;
      continue;
    }
    /* Cut off by the end of the buffer: valid if the bytes present could
     * start a sequence (a lead byte and continuation bytes only). */
    size_t need = t[i] >= 0xC2 && t[i] <= 0xDF ? 2 : t[i] >= 0xE0 && t[i] <= 0xEF ? 3
                  : t[i] >= 0xF0 && t[i] <= 0xF4                           ? 4
                                                                           : 0;
    bool cut = need > n - i;
    for (size_t k = i + 1; cut && k < n; k++) cut = (t[k] & 0xC0) == 0x80;
    if (cut) return true;
    *offset = i;
    *why = "invalid UTF-8";
    return false;
  }
  return true;
}

/* ---- encoding --------------------------------------------------------------- */
void tokenbuf_push(TokenBuf *t, uint32_t id) {
  if (t->n == t->cap) {
    t->cap = t->cap ? t->cap * 2 : 1024;
    t->ids = pd_realloc(t->ids, t->cap * sizeof *t->ids);
  }
  t->ids[t->n++] = id;
}

void tokenbuf_free(TokenBuf *t) {
  free(t->ids);
  memset(t, 0, sizeof *t);
}

/* Merges sym[0, m) in place by rank; returns the new length. */
static size_t merge_word(const Bpe *b, int32_t *sym, size_t m) {
  while (m >= 2) {
    int32_t best_rank = INT32_MAX, best_a = -1, best_b = -1, best_m = -1;
    for (size_t i = 0; i + 1 < m; i++) {
      const PairSlot *s = pair_slot(b->merges, b->merges_cap, sym[i], sym[i + 1]);
      if (s->key && s->rank < best_rank) {
        best_rank = s->rank;
        best_a = sym[i];
        best_b = sym[i + 1];
        best_m = s->merged;
      }
    }
    if (best_m < 0) break;
    size_t w = 0;
    for (size_t i = 0; i < m;) {
      if (i + 1 < m && sym[i] == best_a && sym[i + 1] == best_b) {
        sym[w++] = best_m;
        i += 2;
      } else {
        sym[w++] = sym[i++];
      }
    }
    m = w;
  }
  return m;
}

/* The vocabulary spelling of text[0, n) (each byte's symbol) into buf, which holds 2n + 1. */
static void spell(const unsigned char *t, size_t n, char *buf) {
  size_t w = 0;
  for (size_t k = 0; k < n; k++) {
    char sym[4];
    for (const char *c = bpe_byte_symbol(t[k], sym); *c; c++) buf[w++] = *c;
  }
  buf[w] = '\0';
}

/* Encodes text[0, n), which holds no added token; offsets in *bad_offset are
 * relative to text + base. ByteLevel's add_prefix_space (b->prefix) puts a space
 * before the whole text (SEGMENT, then pre-tokenised) or before each pre-token (PIECE)
 * that does not start with one; a byte without a symbol is reported at its offset in
 * the text, the added space at the place it was added. */
static bool encode_plain(const Bpe *b, const char *text, size_t n, size_t base, TokenBuf *out,
                         size_t *bad_offset) {
  char *seg = NULL;
  size_t shift = 0;
  if (b->prefix == BPE_PREFIX_SEGMENT && n > 0 && text[0] != ' ') {
    seg = pd_malloc(n + 1);
    seg[0] = ' ';
    memcpy(seg + 1, text, n);
    text = seg, n++, shift = 1;
  }
  const unsigned char *t = (const unsigned char *)text;
  int32_t *sym = NULL;
  unsigned char *piece = NULL; /* the pre-token, with its added space */
  char *word = NULL;
  size_t cap = 0;
  bool ok = true;
  for (size_t i = 0; i < n && ok;) {
    size_t len = b->pretok == BPE_PRE_LLAMA3 ? bpe_pretoken_len_llama3(text + i, n - i, b->max_digits)
                                             : bpe_pretoken_len(text + i, n - i);
    size_t pre = b->prefix == BPE_PREFIX_PIECE && t[i] != ' ', m = len + pre;
    if (m > cap) {
      cap = m > 2 * cap ? m : 2 * cap;
      sym = pd_realloc(sym, cap * sizeof *sym);
      piece = pd_realloc(piece, cap);
      if (b->ignore_merges) word = pd_realloc(word, 2 * cap + 1);
    }
    piece[0] = ' ';
    memcpy(piece + pre, t + i, len);
    if (b->ignore_merges) { /* Hugging Face's BPE: a whole pre-token in the vocabulary is one token */
      spell(piece, m, word);
      int64_t id = bpe_token_id(b, word);
      if (id >= 0) {
        tokenbuf_push(out, (uint32_t)id);
        i += len;
        continue;
      }
    }
    for (size_t k = 0; k < m && ok; k++) {
      sym[k] = b->byte_id[piece[k]];
      if (sym[k] < 0) {
        size_t at = i + (k < pre ? 0 : k - pre); /* in text */
        *bad_offset = base + (at < shift ? 0 : at - shift);
        ok = false;
      }
    }
    if (!ok) break;
    size_t mm = merge_word(b, sym, m);
    for (size_t k = 0; k < mm; k++) tokenbuf_push(out, (uint32_t)sym[k]);
    i += len;
  }
  free(sym);
  free(piece);
  free(word);
  free(seg);
  return ok;
}

/* The leftmost added token in text[0, n), the longest one there: its index, and its
 * offset in *at; -1 when none (Hugging Face's AddedVocabulary, leftmost-longest). */
static int find_added(const Bpe *b, const unsigned char *t, size_t n, size_t *at) {
  for (size_t i = 0; i < n; i++) {
    if (!b->added_first[t[i]]) continue;
    for (int k = 0; k < b->nadded; k++) /* longest first */
      if (b->added[k].len <= n - i && memcmp(t + i, b->added[k].content, b->added[k].len) == 0) {
        *at = i;
        return k;
      }
  }
  return -1;
}

/* GPT-2's three steps, and so ours:
 *  1. Pre-tokenisation: a regex (GPT-2's, or Llama 3's from a tokenizer.json) cuts the
 *     text into chunks and merges never cross a chunk boundary (bpe_pretok.c says which
 *     Unicode classes the patterns use and what becomes of bytes that are not valid
 *     UTF-8). A tokenizer.json's added tokens are cut out first, leftmost-longest, as
 *     Hugging Face tokenizers do (find_added); with its model.ignore_merges a chunk that
 *     is in the vocabulary as a whole is that one token (encode_plain).
 *  2. Each byte of a chunk becomes the symbol spelled by GPT-2's byte-to-unicode map
 *     (printable Latin-1 bytes spell themselves, the others are shifted to U+0100 and up,
 *     so a space is "Ġ": bpe_byte_to_unicode).
 *  3. Rank-ordered merges: repeatedly the adjacent pair with the lowest rank in
 *     merges.txt has all its occurrences merged left to right, until no adjacent pair
 *     has a rank (merge_word). */
bool bpe_encode(const Bpe *b, const char *text, size_t n, TokenBuf *out, size_t *bad_offset) {
  const unsigned char *t = (const unsigned char *)text;
  if (!b) {
    for (size_t i = 0; i < n; i++) tokenbuf_push(out, t[i]);
    return true;
  }
  for (size_t i = 0; i < n;) {
    size_t at = n - i;
    int k = b->nadded ? find_added(b, t + i, n - i, &at) : -1;
    if (!encode_plain(b, text + i, at, i, out, bad_offset)) return false;
    if (k < 0) break;
    tokenbuf_push(out, (uint32_t)b->added[k].id);
    i += at + b->added[k].len;
  }
  return true;
}
