/* tokenizer/bpe_hf.c — a Hugging Face tokenizer.json byte-level BPE (Llama 3's,
 * Qwen2's, GPT-2's as tokenizers saves them) read into the tokenizer of bpe.c.
 *
 * What is read: model.vocab, model.merges (the "a b" strings of older files or the
 * ["a", "b"] pairs tokenizers writes since 0.20), model.ignore_merges, the
 * added_tokens (special or not: both are cut out of the text before
 * pre-tokenization) and the pre-tokenizer — GPT-2's ByteLevel with its regex, or
 * a Sequence of a Split on Llama 3's (or Qwen2's, or GPT-2's) pattern and a
 * ByteLevel without one. Anything that would change the ids and that bpe.c does
 * not do is refused naming the file and the key (a normalizer, a BPE dropout,
 * byte fallback, subword prefixes, another split pattern, an added token with
 * lstrip/rstrip/single_word) rather than tokenised differently
 * from the library. Of the post-processor, the token its template puts before
 * every text (Llama 3's <|begin_of_text|>) is read: pd2bw-data --eot writes it.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/bpe_internal.h"

/* The split patterns bpe_pretok.c implements, as tokenizer.json spells them. */
static const char LLAMA3_PATTERN[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char QWEN2_PATTERN[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

typedef struct Ctx {
  const char *path;
  char *err;
  size_t errlen;
} Ctx;

/* "path: key: " and the message; false. */
static bool bad(const Ctx *c, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool bad(const Ctx *c, const char *key, const char *fmt, ...) {
  int n = snprintf(c->err, c->errlen, "%s: %s: ", c->path, key);
  va_list ap;
  va_start(ap, fmt);
  if (n >= 0 && (size_t)n < c->errlen) vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
  va_end(ap);
  return false;
}

/* Whether obj[key] is absent, null or false. */
static bool off(const cJSON *obj, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  return !v || cJSON_IsNull(v) || cJSON_IsFalse(v);
}

/* Whether obj[key] is absent, null or "". */
static bool empty_str(const cJSON *obj, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  return !v || cJSON_IsNull(v) || (cJSON_IsString(v) && v->valuestring[0] == '\0');
}

static const char *type_of(const cJSON *obj) {
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, "type");
  return cJSON_IsString(t) ? t->valuestring : NULL;
}

static bool read_model(Bpe *b, const cJSON *model, int nadded, const Ctx *c) {
  if (!cJSON_IsObject(model)) return bad(c, "model", "expected an object");
  const char *type = type_of(model);
  if (!type || strcmp(type, "BPE") != 0)
    return bad(c, "model.type", "a \"%.80s\" model; pd2bw-data reads byte-level BPE only", type ? type : "untyped");
  if (!off(model, "dropout")) return bad(c, "model.dropout", "BPE dropout is not supported (ids would be random)");
  if (!off(model, "byte_fallback")) return bad(c, "model.byte_fallback", "byte fallback is not supported");
  if (!empty_str(model, "continuing_subword_prefix"))
    return bad(c, "model.continuing_subword_prefix", "a subword prefix is not supported");
  if (!empty_str(model, "end_of_word_suffix"))
    return bad(c, "model.end_of_word_suffix", "an end-of-word suffix is not supported");
  const cJSON *im = cJSON_GetObjectItemCaseSensitive(model, "ignore_merges");
  if (im && !cJSON_IsBool(im)) return bad(c, "model.ignore_merges", "expected true or false");
  b->ignore_merges = cJSON_IsTrue(im);
  const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
  if (!cJSON_IsObject(vocab)) return bad(c, "model.vocab", vocab ? "expected an object {\"token\": id, ...}" : "missing");
  char where[IO_ERR_LEN];
  snprintf(where, sizeof where, "%s: model.vocab", c->path);
  if (!bpe_vocab_from_json(b, vocab, (size_t)nadded, where, c->err, c->errlen)) return false;
  const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
  if (!cJSON_IsArray(merges)) return bad(c, "model.merges", merges ? "expected an array" : "missing");
  bpe_merges_reserve(b, (size_t)cJSON_GetArraySize(merges));
  int i = 0;
  const cJSON *m;
  cJSON_ArrayForEach(m, merges) {
    char key[48], *buf = NULL;
    const char *left = NULL, *right = NULL;
    snprintf(key, sizeof key, "model.merges[%d]", i);
    if (cJSON_IsString(m)) { /* "a b" */
      buf = pd_strdup(m->valuestring);
      char *sp = strchr(buf, ' ');
      if (sp && sp != buf && sp[1] && !strchr(sp + 1, ' ')) {
        *sp = '\0';
        left = buf;
        right = sp + 1;
      }
    } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(cJSON_GetArrayItem(m, 0)) &&
               cJSON_IsString(cJSON_GetArrayItem(m, 1))) { /* ["a", "b"] */
      left = cJSON_GetArrayItem(m, 0)->valuestring;
      right = cJSON_GetArrayItem(m, 1)->valuestring;
    }
    if (!left) {
      free(buf);
      return bad(c, key, "expected \"a b\" (two tokens, one space) or [\"a\", \"b\"]");
    }
    snprintf(where, sizeof where, "%s: %s", c->path, key);
    bool ok = bpe_add_merge(b, left, right, where, c->err, c->errlen);
    free(buf);
    if (!ok) return false;
    i++;
  }
  return true;
}

static int longest_first(const void *x, const void *y) {
  const BpeAdded *a = x, *b = y;
  return a->len != b->len ? (a->len < b->len ? 1 : -1) : strcmp(a->content, b->content);
}

static bool read_added(Bpe *b, const cJSON *added, const Ctx *c) {
  if (!added || cJSON_IsNull(added)) return true;
  int n = cJSON_GetArraySize(added);
  b->added = pd_calloc((size_t)n + 1, sizeof *b->added);
  const cJSON *t;
  cJSON_ArrayForEach(t, added) {
    char key[48];
    snprintf(key, sizeof key, "added_tokens[%d]", b->nadded);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(t, "id");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(t, "content");
    if (!cJSON_IsObject(t) || !cJSON_IsString(content) || !content->valuestring[0] || !cJSON_IsNumber(id))
      return bad(c, key, "expected {\"id\": N, \"content\": \"...\", ...}");
    double v = id->valuedouble;
    if (v != (double)(int64_t)v || v < 0 || v > BPE_MAX_ID)
      return bad(c, key, "id must be an integer in [0, %d]", BPE_MAX_ID);
    static const char *const unsupported[] = {"lstrip", "rstrip", "single_word"};
    for (int k = 0; k < 3; k++)
      if (!off(t, unsupported[k]))
        return bad(c, key, "%s is not supported (the token would match differently)", unsupported[k]);
    const char *s = content->valuestring;
    int64_t have = bpe_token_id(b, s);
    if (have >= 0 && have != (int64_t)v)
      return bad(c, key, "\"%.80s\" has id %lld, model.vocab gives it %lld", s, (long long)v, (long long)have);
    if (have < 0) {
      /* a new token: its id must be free */
      for (size_t k = 0; k < b->vocab_cap; k++)
        if (b->vocab[k].key && b->vocab[k].value == (int32_t)v)
          return bad(c, key, "id %lld of \"%.80s\" is model.vocab's \"%.80s\"", (long long)v, s, b->vocab[k].key);
      bpe_vocab_add(b, s, (int32_t)v);
    }
    b->added[b->nadded] = (BpeAdded){pd_strdup(s), strlen(s), (int32_t)v};
    b->added_first[(unsigned char)s[0]] = true;
    b->nadded++;
  }
  qsort(b->added, (size_t)b->nadded, sizeof *b->added, longest_first);
  return true;
}

/* A ByteLevel pre-tokenizer at `key`; `split` tells whether a Split came before it. */
static bool read_bytelevel(Bpe *b, const cJSON *p, const char *key, bool split, const Ctx *c) {
  char k[96];
  snprintf(k, sizeof k, "%s.add_prefix_space", key);
  const cJSON *aps = cJSON_GetObjectItemCaseSensitive(p, "add_prefix_space");
  if (!off(p, "add_prefix_space") && !cJSON_IsTrue(aps)) return bad(c, k, "expected true or false");
  /* the pieces ByteLevel is handed: the text between added tokens when it splits them
   * itself, a Split's pieces after one */
  b->prefix = cJSON_IsTrue(aps) ? (split ? BPE_PREFIX_PIECE : BPE_PREFIX_SEGMENT) : BPE_PREFIX_NONE;
  const cJSON *ur = cJSON_GetObjectItemCaseSensitive(p, "use_regex");
  bool use_regex = !ur || cJSON_IsTrue(ur); /* tokenizers' default: true */
  snprintf(k, sizeof k, "%s.use_regex", key);
  if (split && use_regex)
    return bad(c, k, "true after a Split (two regexes in a row) is not supported");
  if (!split && !use_regex) return bad(c, k, "false without a Split (no pre-tokenization) is not supported");
  if (!split) b->pretok = BPE_PRE_GPT2;
  return true;
}

static bool read_split(Bpe *b, const cJSON *p, const char *key, const Ctx *c) {
  char k[96];
  const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
  const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
  snprintf(k, sizeof k, "%s.pattern", key);
  if (!cJSON_IsString(re)) return bad(c, k, "expected {\"Regex\": \"...\"}");
  const cJSON *beh = cJSON_GetObjectItemCaseSensitive(p, "behavior");
  snprintf(k, sizeof k, "%s.behavior", key);
  if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") != 0)
    return bad(c, k, "only \"Isolated\" is supported");
  snprintf(k, sizeof k, "%s.invert", key);
  if (!off(p, "invert")) return bad(c, k, "true is not supported");
  const char *r = re->valuestring;
  if (strcmp(r, LLAMA3_PATTERN) == 0 || strcmp(r, QWEN2_PATTERN) == 0) {
    b->pretok = BPE_PRE_LLAMA3;
    b->max_digits = strcmp(r, LLAMA3_PATTERN) == 0 ? 3 : 1;
  } else if (strcmp(r, GPT2_PATTERN) == 0) {
    b->pretok = BPE_PRE_GPT2;
  } else {
    snprintf(k, sizeof k, "%s.pattern.Regex", key);
    return bad(c, k, "the split pattern \"%.200s\" is not one pd2bw-data implements (Llama 3's, Qwen2's and "
               "GPT-2's are)", r);
  }
  return true;
}

static bool read_pretok(Bpe *b, const cJSON *p, const Ctx *c) {
  const char *type = p ? type_of(p) : NULL;
  if (type && strcmp(type, "ByteLevel") == 0) return read_bytelevel(b, p, "pre_tokenizer", false, c);
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers");
  if (type && strcmp(type, "Sequence") == 0 && cJSON_GetArraySize(list) == 2) {
    const cJSON *s = cJSON_GetArrayItem(list, 0), *bl = cJSON_GetArrayItem(list, 1);
    const char *t0 = type_of(s), *t1 = type_of(bl);
    if (t0 && t1 && strcmp(t0, "Split") == 0 && strcmp(t1, "ByteLevel") == 0)
      return read_split(b, s, "pre_tokenizer.pretokenizers[0]", c) &&
             read_bytelevel(b, bl, "pre_tokenizer.pretokenizers[1]", true, c);
  }
  return bad(c, "pre_tokenizer",
             "%s%.60s%s is not supported (a ByteLevel, or a Sequence of a Split and a ByteLevel, is)",
             type ? "a \"" : "", type ? type : p ? "an untyped pre-tokenizer" : "none", type ? "\"" : "");
}

/* Why the post-processor at `key` gives no document start pd2bw-data can use. */
static void post_why(Bpe *b, const Ctx *c, const char *key, const char *what) {
  snprintf(b->doc_why, sizeof b->doc_why, "%s: %s: %s", c->path, key, what);
}

/* A TemplateProcessing: "$A" puts nothing; "TOKEN $A" puts TOKEN, whose id in
 * special_tokens must be the vocabulary's. */
static void read_template(Bpe *b, const cJSON *t, const char *key, const Ctx *c) {
  const cJSON *single = cJSON_GetObjectItemCaseSensitive(t, "single");
  const cJSON *first = cJSON_GetArrayItem(single, 0), *last = cJSON_GetArrayItem(single, 1);
  int n = cJSON_GetArraySize(single);
  if (n == 1 && cJSON_GetObjectItemCaseSensitive(first, "Sequence")) return;
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(first, "SpecialToken"), "id");
  const char *nm = cJSON_IsString(name) ? name->valuestring : "";
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(t, "special_tokens");
  const cJSON *ids = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(st, nm), "ids");
  const cJSON *id = cJSON_GetArrayItem(ids, 0);
  int64_t v = bpe_token_id(b, nm);
  if (n != 2 || !cJSON_IsString(name) || !cJSON_GetObjectItemCaseSensitive(last, "Sequence"))
    post_why(b, c, key, "a template other than \"$A\" or \"TOKEN $A\" (it puts tokens after the text, or more "
             "than one before it)");
  else if (v < 0 || cJSON_GetArraySize(ids) != 1 || !cJSON_IsNumber(id) || id->valuedouble != (double)v)
    post_why(b, c, key, "special_tokens: the template's token is not one id of the vocabulary");
  else
    b->doc_start = (int32_t)v, b->has_doc_start = true;
}

/* post_processor: only what it puts before every text matters (pd2bw-data --eot);
 * ByteLevels change offsets only. Another kind does not fail the load, since without
 * --eot nothing of it reaches a token file: it becomes bpe_doc_start's why. */
static void read_post(Bpe *b, const cJSON *p, const Ctx *c) {
  const char *type = p ? type_of(p) : NULL;
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "processors"), *e;
  if (!p || cJSON_IsNull(p) || (type && strcmp(type, "ByteLevel") == 0)) return;
  if (type && strcmp(type, "TemplateProcessing") == 0) {
    read_template(b, p, "post_processor", c);
    return;
  }
  if (!type || strcmp(type, "Sequence") != 0 || !cJSON_IsArray(list)) {
    post_why(b, c, "post_processor", "not a TemplateProcessing, a ByteLevel or a Sequence of them");
    return;
  }
  int i = 0;
  cJSON_ArrayForEach(e, list) {
    char key[64];
    snprintf(key, sizeof key, "post_processor.processors[%d]", i++);
    const char *t = type_of(e);
    if (t && strcmp(t, "TemplateProcessing") == 0 && !b->has_doc_start) read_template(b, e, key, c);
    else if (!t || strcmp(t, "ByteLevel") != 0) post_why(b, c, key, "not a TemplateProcessing or a ByteLevel");
    if (b->doc_why[0]) return;
  }
}

Bpe *bpe_load_hf(const char *path, char *err, size_t errlen) {
  cJSON *root = io_read_json_object(path, " (a Hugging Face tokenizer.json)", err, errlen);
  if (!root) return NULL;
  Ctx c = {path, err, errlen};
  Bpe *b = pd_calloc(1, sizeof *b);
  bool ok = false;
  const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
  if (norm && !cJSON_IsNull(norm)) {
    bad(&c, "normalizer", "a normalizer is not supported (byte-level BPE tokenizers have none)");
    goto done;
  }
  const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
  if (added && !cJSON_IsNull(added) && !cJSON_IsArray(added)) {
    bad(&c, "added_tokens", "expected an array");
    goto done;
  }
  ok = read_model(b, cJSON_GetObjectItemCaseSensitive(root, "model"), cJSON_GetArraySize(added), &c) &&
       read_added(b, added, &c) && read_pretok(b, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), &c);
  if (ok) read_post(b, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), &c);
  if (ok) bpe_finish(b);
done:
  cJSON_Delete(root);
  if (!ok) {
    bpe_destroy(b);
    return NULL;
  }
  return b;
}
