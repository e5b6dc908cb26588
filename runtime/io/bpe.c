/* runtime/io/bpe.c — GPT-2's byte-level byte-pair encoding, without Python.
 *
 * GPT-2 encodes text in three steps, and so do we:
 *  1. Pre-tokenisation: the regex
 *       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *     cuts the text into chunks; merges never cross a chunk boundary. We
 *     implement it by hand (bpe_pretoken_len) on code points, with the classes
 *     GPT-2's regex engines use (Python's `regex` for encoder.py, the Rust
 *     regex crate for tiktoken), taken from utf8proc's Unicode tables:
 *     \p{L} is the general categories Lu Ll Lt Lm Lo, \p{N} is Nd Nl No, and
 *     \s is the Unicode property White_Space — U+0009..U+000D, U+0085 and the
 *     categories Zs, Zl, Zp (White_Space is exactly that set; it is not
 *     Python's str.isspace, which adds U+001C..U+001F). Everything else
 *     (punctuation, symbols, marks, controls, format characters such as ZWJ
 *     and the BOM) is the "other" class. The contraction and ' ?' prefixes are
 *     the ASCII characters the pattern spells. utf8proc's Unicode version can
 *     lag the reference tokenizer's for characters assigned since.
 *     Bytes that are not part of valid UTF-8: GPT-2's tokenizers take decoded
 *     text, so such bytes never reach them. We keep each such byte as it is
 *     and give it the "other" class — what GPT-2's regex does to text decoded
 *     with Python's errors="surrogateescape" (a byte becomes a lone
 *     surrogate, category Cs), so a file with a stray Latin-1 byte still
 *     tokenises, byte-exactly, like its surrogateescape decoding.
 *  2. Each byte of a chunk becomes the vocabulary symbol spelled by GPT-2's
 *     byte-to-unicode map (printable Latin-1 bytes spell themselves, the other
 *     bytes are shifted to U+0100 and up, so a space is "Ġ").
 *  3. Rank-ordered merges: repeatedly take the adjacent pair with the lowest
 *     rank in merges.txt and merge all its occurrences left to right, until no
 *     adjacent pair has a rank.
 * Symbols are vocabulary ids; because vocab.json is checked to be a bijection
 * between spellings and ids, merging ids is the same as GPT-2 merging strings.
 */
#include <cjson/cJSON.h>
#include <utf8proc.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/io/io.h"

/* ---- open-addressing hash tables ----------------------------------------- */
static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
  return h;
}

static uint64_t hash_u64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

typedef struct StrSlot {
  char *key; /* NULL: empty */
  int32_t value;
} StrSlot;

typedef struct PairSlot {
  uint64_t key; /* (left id << 32 | right id) + 1; 0: empty */
  int32_t rank;
  int32_t merged;
} PairSlot;

struct Bpe {
  StrSlot *vocab;
  size_t vocab_cap; /* power of two */
  int64_t vocab_size;
  PairSlot *merges;
  size_t merges_cap;
  int32_t byte_id[256]; /* vocab id of each byte's symbol, -1 when missing */
};

static size_t pow2_at_least(size_t n) {
  size_t c = 16;
  while (c < n) c *= 2;
  return c;
}

static StrSlot *str_slot(StrSlot *tab, size_t cap, const char *key) {
  size_t i = hash_bytes(key, strlen(key)) & (cap - 1);
  while (tab[i].key && strcmp(tab[i].key, key) != 0) i = (i + 1) & (cap - 1);
  return &tab[i];
}

static PairSlot *pair_slot(PairSlot *tab, size_t cap, int32_t a, int32_t b) {
  uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
  size_t i = hash_u64(key) & (cap - 1);
  while (tab[i].key && tab[i].key != key) i = (i + 1) & (cap - 1);
  return &tab[i]; /* empty slot: the caller fills it on insert */
}

static uint64_t pair_key(int32_t a, int32_t b) {
  return ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
}

int64_t bpe_token_id(const Bpe *b, const char *token) {
  StrSlot *s = str_slot(b->vocab, b->vocab_cap, token);
  return s->key ? s->value : -1;
}

int64_t bpe_vocab_size(const Bpe *b) { return b->vocab_size; }

void bpe_destroy(Bpe *b) {
  if (!b) return;
  for (size_t i = 0; i < b->vocab_cap; i++) free(b->vocab[i].key);
  free(b->vocab);
  free(b->merges);
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

/* UTF-8 of a code point below 0x800 (all byte symbols are), NUL-terminated. */
static void utf8_encode(uint32_t cp, char out[4]) {
  if (cp < 0x80) {
    out[0] = (char)cp;
    out[1] = 0;
  } else {
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    out[2] = 0;
  }
}

/* ---- loading --------------------------------------------------------------- */
static bool load_vocab(Bpe *b, const char *path, char *err, size_t errlen) {
  size_t len;
  char *text = io_read_all(path, &len, err, errlen);
  if (!text) return false;
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
  if (!root || !cJSON_IsObject(root)) {
    size_t off = end && end >= text ? (size_t)(end - text) : 0;
    snprintf(err, errlen, "%s: offset %zu: %s", path, off,
             root ? "expected a JSON object {\"token\": id, ...}" : "malformed JSON");
    cJSON_Delete(root);
    free(text);
    return false;
  }
  int n = cJSON_GetArraySize(root);
  b->vocab_cap = pow2_at_least((size_t)n * 2 + 2);
  b->vocab = pd_calloc(b->vocab_cap, sizeof *b->vocab);
  /* ids seen, to reject two spellings for one id (merging ids would then not
   * be merging strings). */
  const char **by_id = pd_calloc(65536, sizeof *by_id);
  bool ok = true;
  const cJSON *item;
  cJSON_ArrayForEach(item, root) {
    double v = item->valuedouble;
    if (!cJSON_IsNumber(item) || v != (double)(int64_t)v || v < 0 || v > 65535) {
      snprintf(err, errlen,
               "%s: token \"%s\": id must be an integer in [0, 65535] (token files store "
               "uint16)",
               path, item->string);
      ok = false;
      break;
    }
    int32_t id = (int32_t)v;
    StrSlot *s = str_slot(b->vocab, b->vocab_cap, item->string);
    if (s->key) {
      snprintf(err, errlen, "%s: token \"%s\" appears twice", path, item->string);
      ok = false;
      break;
    }
    if (by_id[id]) {
      snprintf(err, errlen, "%s: id %d is given to both \"%s\" and \"%s\"", path, id, by_id[id],
               item->string);
      ok = false;
      break;
    }
    s->key = pd_strdup(item->string);
    s->value = id;
    by_id[id] = s->key;
    if (id + 1 > b->vocab_size) b->vocab_size = id + 1;
  }
  free(by_id);
  cJSON_Delete(root);
  free(text);
  if (ok && b->vocab_size == 0) {
    snprintf(err, errlen, "%s: empty vocabulary", path);
    ok = false;
  }
  return ok;
}

static bool load_merges(Bpe *b, const char *path, char *err, size_t errlen) {
  size_t len;
  char *text = io_read_all(path, &len, err, errlen);
  if (!text) return false;
  size_t nlines = 1;
  for (size_t i = 0; i < len; i++) nlines += text[i] == '\n';
  b->merges_cap = pow2_at_least(nlines * 2 + 2);
  b->merges = pd_calloc(b->merges_cap, sizeof *b->merges);
  int32_t rank = 0;
  int lineno = 0;
  bool ok = true;
  char *merged = pd_malloc(len + 1);
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
    const char *left = line, *right = sp + 1;
    int64_t a = bpe_token_id(b, left), c = bpe_token_id(b, right);
    snprintf(merged, len + 1, "%s%s", left, right);
    int64_t m = bpe_token_id(b, merged);
    const char *missing = a < 0 ? left : c < 0 ? right : m < 0 ? merged : NULL;
    if (missing) {
      snprintf(err, errlen, "%s:%d: token \"%s\" is not in the vocabulary", path, lineno, missing);
      ok = false;
      break;
    }
    PairSlot *s = pair_slot(b->merges, b->merges_cap, (int32_t)a, (int32_t)c);
    /* A repeated pair keeps its first (highest-priority) rank. */
    if (!s->key) {
      s->key = pair_key((int32_t)a, (int32_t)c);
      s->rank = rank++;
      s->merged = (int32_t)m;
    }
    line = next;
  }
  free(merged);
  free(text);
  return ok;
}

Bpe *bpe_load(const char *vocab_path, const char *merges_path, char *err, size_t errlen) {
  Bpe *b = pd_calloc(1, sizeof *b);
  if (!load_vocab(b, vocab_path, err, errlen) || !load_merges(b, merges_path, err, errlen)) {
    bpe_destroy(b);
    return NULL;
  }
  for (int c = 0; c < 256; c++) {
    char sym[4];
    utf8_encode(bpe_byte_to_unicode((uint8_t)c), sym);
    b->byte_id[c] = (int32_t)bpe_token_id(b, sym);
  }
  return b;
}

/* ---- pre-tokenisation ------------------------------------------------------ */
typedef enum CharClass {
  CC_SPACE,  /* \s: Unicode White_Space */
  CC_LETTER, /* \p{L} */
  CC_DIGIT,  /* \p{N} */
  CC_OTHER,  /* everything else, and bytes that are not valid UTF-8 */
} CharClass;

static CharClass cp_class(utf8proc_int32_t cp) {
  if ((cp >= '\t' && cp <= '\r') || cp == 0x85) return CC_SPACE;
  utf8proc_category_t cat = utf8proc_category(cp);
  if (cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP)
    return CC_SPACE;
  if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT ||
      cat == UTF8PROC_CATEGORY_LM || cat == UTF8PROC_CATEGORY_LO)
    return CC_LETTER;
  if (cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO)
    return CC_DIGIT;
  return CC_OTHER;
}

/* The code point at t[0] (n > 0): its length in bytes and its class. A byte
 * that does not start a valid UTF-8 sequence is one "character" of class
 * other (see the file comment). */
static size_t next_char(const unsigned char *t, size_t n, CharClass *cls) {
  if (t[0] < 0x80) { /* ASCII: the common case, without a table lookup */
    unsigned char c = t[0];
    *cls = c == ' ' || (c >= '\t' && c <= '\r')            ? CC_SPACE
           : (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ? CC_LETTER
           : c >= '0' && c <= '9'                             ? CC_DIGIT
                                                              : CC_OTHER;
    return 1;
  }
  utf8proc_int32_t cp;
  utf8proc_ssize_t len = utf8proc_iterate(t, n < 4 ? (utf8proc_ssize_t)n : 4, &cp);
  if (len <= 0 || cp < 0) {
    *cls = CC_OTHER;
    return 1;
  }
  *cls = cp_class(cp);
  return (size_t)len;
}

/* Bytes of the run of class c that starts at t[0]. */
static size_t run_len(const unsigned char *t, size_t n, CharClass c) {
  size_t k = 0;
  while (k < n) {
    CharClass cc;
    size_t len = next_char(t + k, n - k, &cc);
    if (cc != c) break;
    k += len;
  }
  return k;
}

size_t bpe_pretoken_len(const char *text, size_t n) {
  const unsigned char *t = (const unsigned char *)text;
  PD_CHECK(n > 0);
  /* 's|'t|'re|'ve|'m|'ll|'d */
  if (t[0] == '\'' && n >= 2) {
    if (n >= 3 && ((t[1] == 'r' && t[2] == 'e') || (t[1] == 'v' && t[2] == 'e') ||
                   (t[1] == 'l' && t[2] == 'l')))
      return 3;
    if (t[1] == 's' || t[1] == 't' || t[1] == 'm' || t[1] == 'd') return 2;
  }
  /* ` ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+`: an optional leading ASCII space,
   * then a run of one class. */
  CharClass c;
  size_t j = (t[0] == ' ' && n > 1) ? 1 : 0;
  next_char(t + j, n - j, &c);
  if (c != CC_SPACE) return j + run_len(t + j, n - j, c);
  /* `\s+(?!\S)|\s+`: a whitespace run, less its last character when a
   * non-space follows (that character then starts the next chunk: " word"),
   * but never less than one character. */
  size_t k = 0, last = 0;
  while (k < n) {
    CharClass cc;
    size_t len = next_char(t + k, n - k, &cc);
    if (cc != CC_SPACE) break;
    last = k;
    k += len;
  }
  if (k == n || last == 0) return k; /* whole run at the end; a single character */
  return last;
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
void tokenbuf_push(TokenBuf *t, uint16_t id) {
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

bool bpe_encode(const Bpe *b, const char *text, size_t n, TokenBuf *out, size_t *bad_offset) {
  const unsigned char *t = (const unsigned char *)text;
  if (!b) {
    for (size_t i = 0; i < n; i++) tokenbuf_push(out, t[i]);
    return true;
  }
  int32_t *sym = NULL;
  size_t sym_cap = 0;
  bool ok = true;
  for (size_t i = 0; i < n && ok;) {
    size_t len = bpe_pretoken_len(text + i, n - i);
    if (len > sym_cap) {
      sym_cap = len > 2 * sym_cap ? len : 2 * sym_cap;
      sym = pd_realloc(sym, sym_cap * sizeof *sym);
    }
    for (size_t k = 0; k < len && ok; k++) {
      sym[k] = b->byte_id[t[i + k]];
      if (sym[k] < 0) {
        *bad_offset = i + k;
        ok = false;
      }
    }
    if (!ok) break;
    size_t m = merge_word(b, sym, len);
    for (size_t k = 0; k < m; k++) tokenbuf_push(out, (uint16_t)sym[k]);
    i += len;
  }
  free(sym);
  return ok;
}

const char *bpe_byte_symbol(uint8_t byte, char out[4]) {
  utf8_encode(bpe_byte_to_unicode(byte), out);
  return out;
}
