/* GPT-2 BPE on Unicode text (tokenizer/bpe.c) against reference token ids.
 *
 * tests/data/unicode/cases.tsv holds, per case, UTF-8 text (as hex) and the ids
 * tiktoken gives it with GPT-2's pattern and the vocabulary in the same folder
 * (GPT-2-shaped: byte ids as GPT-2's, merges trained on the cases); for the few
 * cases that are not valid UTF-8 the ids are GPT-2's encoder.py algorithm on
 * the surrogateescape-decoded text. tests/data/gen_bpe_unicode_ref.py wrote
 * them and says how. Every case must give the same ids, in the same order. */
#include <cjson/cJSON.h>
#include <stdlib.h>

#include "runtime/io/io.h"
#include "tokenizer/tokenizer.h"
#include "test.h"
#include "test_util.h"

#define DIR "tests/data/unicode/"
#define HF_DIR "tests/data/hf_tokenizer/"

static int hexval(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Every case of the TSV file encodes to its ids; at least min_cases cases and
 * min_invalid of them not UTF-8. Takes b. */
static void check_cases(Bpe *b, const char *tsv_path, int min_cases, int min_invalid) {
  char err[IO_ERR_LEN];
  size_t len;
  char *tsv = io_read_all(tsv_path, &len, err, sizeof err);
  EXPECT(tsv != NULL);
  if (!tsv) {
    bpe_destroy(b);
    return;
  }
  int ncases = 0, nbad = 0, ninvalid = 0;
  char *save = NULL;
  for (char *line = strtok_r(tsv, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    if (line[0] == '#') continue;
    char *name = line, *hex = strchr(name, '\t');
    EXPECT(hex != NULL);
    if (!hex) break;
    *hex++ = '\0';
    char *ids = strchr(hex, '\t');
    EXPECT(ids != NULL);
    if (!ids) break;
    *ids++ = '\0';
    size_t n = strlen(hex) / 2;
    char *text = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
      text[i] = (char)(hexval(hex[2 * i]) << 4 | hexval(hex[2 * i + 1]));
    TokenBuf want = {0}, got = {0};
    for (char *p = ids; *p;) {
      char *end;
      long v = strtol(p, &end, 10);
      if (end == p) break;
      tokenbuf_push(&want, (uint32_t)v);
      p = end;
    }
    size_t bad = 0;
    bool ok = bpe_encode(b, text, n, &got, &bad);
    ninvalid += strncmp(name, "invalid_", 8) == 0;
    ncases++;
    if (!ok || got.n != want.n || memcmp(got.ids, want.ids, got.n * sizeof *got.ids) != 0) {
      if (nbad++ < 10) { /* the first few, in full */
        fprintf(stderr, "case %s: got", name);
        for (size_t i = 0; i < got.n; i++) fprintf(stderr, " %u", got.ids[i]);
        fprintf(stderr, "\n  expected %s\n", ids);
      }
    }
    tokenbuf_free(&want);
    tokenbuf_free(&got);
    free(text);
  }
  if (nbad) fprintf(stderr, "%d of %d cases differ from the reference ids\n", nbad, ncases);
  EXPECT_EQ_INT(nbad, 0);
  EXPECT(ncases >= min_cases); /* the file was read whole */
  EXPECT(ninvalid >= min_invalid);
  free(tsv);
  bpe_destroy(b);
}

static void test_reference_ids(void) {
  char err[IO_ERR_LEN];
  Bpe *b = bpe_load(DIR "vocab.json", DIR "merges.txt", err, sizeof err);
  if (!b) fprintf(stderr, "%s\n", err);
  EXPECT(b != NULL);
  if (b) check_cases(b, DIR "cases.tsv", 450, 6);
}

/* A Hugging Face tokenizer.json with Llama 3's split pattern, special tokens and
 * ignore_merges against the ids the tokenizers library gave the same texts
 * (tests/data/gen_hf_tokenizer_ref.py wrote both). */
static void test_hf_tokenizer_ids(void) {
  char err[IO_ERR_LEN];
  Bpe *b = bpe_load_hf(HF_DIR "tokenizer.json", err, sizeof err);
  if (!b) fprintf(stderr, "%s\n", err);
  EXPECT(b != NULL);
  if (!b) return;
  EXPECT_EQ_INT(bpe_vocab_size(b), 1203);
  EXPECT_EQ_INT(bpe_token_id(b, "<|end_of_text|>"), 1);
  check_cases(b, HF_DIR "cases.tsv", 460, 0);
}

/* hf_tokenizer/tokenizer.json with its `key` replaced by obj (taken), written as the
 * scratch file `name`; its path, or NULL. */
static const char *spliced(const char *key, cJSON *obj, const char *name) {
  char err[IO_ERR_LEN];
  size_t n;
  char *base = io_read_all(HF_DIR "tokenizer.json", &n, err, sizeof err);
  cJSON *j = base ? cJSON_Parse(base) : NULL;
  free(base);
  EXPECT(j && obj);
  if (!j || !obj) return cJSON_Delete(j), cJSON_Delete(obj), NULL;
  cJSON_ReplaceItemInObjectCaseSensitive(j, key, obj);
  char *text = cJSON_Print(j);
  write_bytes(tmp_path(name), text, strlen(text));
  free(text);
  cJSON_Delete(j);
  return tmp_path(name);
}

/* ByteLevel's add_prefix_space, in both places it can stand: the hf_tokenizer with its
 * pre_tokenizer replaced by prefix_<variant>.json (a plain ByteLevel, which prefixes each
 * text between added tokens; a Split then a ByteLevel, which prefixes each piece) against
 * the library's ids (tests/data/gen_hf_prefix_ref.py made the same splice). */
static void check_prefix(const char *variant) {
  char err[IO_ERR_LEN], path[256];
  size_t n;
  snprintf(path, sizeof path, HF_DIR "prefix_%s.json", variant);
  char *pre = io_read_all(path, &n, err, sizeof err);
  snprintf(path, sizeof path, "prefix_%s.tokenizer.json", variant);
  const char *tok = spliced("pre_tokenizer", pre ? cJSON_Parse(pre) : NULL, path);
  free(pre);
  if (!tok) return;
  Bpe *b = bpe_load_hf(tok, err, sizeof err);
  if (!b) fprintf(stderr, "%s\n", err);
  EXPECT(b != NULL);
  snprintf(path, sizeof path, HF_DIR "prefix_%s.tsv", variant);
  if (b) check_cases(b, path, 470, 0);
}
static void test_hf_prefix_segment(void) { check_prefix("segment"); }
static void test_hf_prefix_piece(void) { check_prefix("piece"); }

/* The document start (bpe_doc_start) of each post-processor in hf_tokenizer/post_cases.json
 * against what the library put before and after "Hello world" there
 * (tests/data/gen_hf_post_ref.py): one token before and none after is the start; none
 * either side is no start; anything else is a reason naming the post-processor. */
static void test_hf_doc_start(void) {
  char err[IO_ERR_LEN];
  size_t n;
  char *text = io_read_all(HF_DIR "post_cases.json", &n, err, sizeof err);
  cJSON *root = text ? cJSON_Parse(text) : NULL, *c;
  free(text);
  int ncases = 0;
  cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(root, "cases")) {
    const char *name = cJSON_GetObjectItemCaseSensitive(c, "name")->valuestring;
    const cJSON *before = cJSON_GetObjectItemCaseSensitive(c, "before"), *after = cJSON_GetObjectItemCaseSensitive(c, "after");
    const char *tok = spliced("post_processor", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(c, "post_processor"), true),
                              "post.tokenizer.json");
    Bpe *b = tok ? bpe_load_hf(tok, err, sizeof err) : NULL;
    EXPECT(b != NULL);
    if (!b) continue;
    const char *why = NULL;
    int64_t start = bpe_doc_start(b, &why);
    int nb = cJSON_GetArraySize(before), na = cJSON_GetArraySize(after);
    bool ok = nb == 1 && na == 0 ? start == (int64_t)cJSON_GetArrayItem(before, 0)->valuedouble && !why
            : nb == 0 && na == 0 ? start == -1 && !why
                                 : start == -1 && why && strstr(why, "post_processor");
    if (!ok) fprintf(stderr, "post-processor %s: doc start %lld, why %s\n", name, (long long)start, why ? why : "(none)");
    EXPECT(ok);
    bpe_destroy(b);
    ncases++;
  }
  cJSON_Delete(root);
  EXPECT(ncases >= 8);
}

int main(void) {
  tmp_init("bpe-unicode");
  RUN(test_reference_ids);
  RUN(test_hf_tokenizer_ids);
  RUN(test_hf_prefix_segment);
  RUN(test_hf_prefix_piece);
  RUN(test_hf_doc_start);
  tmp_cleanup(test_failed_);
  return TEST_REPORT();
}
