/* GPT-2 BPE (tokenizer/bpe.c): the byte-to-unicode map, the hand-written
 * pre-tokeniser against GPT-2's regex, merges on the hand-made vocabulary in
 * tests/data/fixtures (see its README), and every load error. */
#include "runtime/io/io.h"
#include "tokenizer/tokenizer.h"
#include "test.h"
#include "test_util.h"

#define FIX "tests/data/fixtures/"

static void test_byte_to_unicode(void) {
  /* GPT-2's table: printable bytes spell themselves; the rest, in order, get
   * U+0100 onwards: 0x00 -> U+0100 'Ā', ' ' (0x20, the 33rd) -> U+0120 'Ġ',
   * '\n' -> U+010A 'Ċ', 0x7F (after the 33 control/space bytes) -> U+0121,
   * soft hyphen 0xAD (after 0x00-0x20, 0x7F-0xA0: 67 bytes) -> U+0143 'Ń'. */
  EXPECT_EQ_INT(bpe_byte_to_unicode('A'), 'A');
  EXPECT_EQ_INT(bpe_byte_to_unicode('!'), '!');
  EXPECT_EQ_INT(bpe_byte_to_unicode(0xFF), 0xFF);
  EXPECT_EQ_INT(bpe_byte_to_unicode(0x00), 0x100);
  EXPECT_EQ_INT(bpe_byte_to_unicode(' '), 0x120);
  EXPECT_EQ_INT(bpe_byte_to_unicode('\n'), 0x10A);
  EXPECT_EQ_INT(bpe_byte_to_unicode(0x7F), 0x121);
  EXPECT_EQ_INT(bpe_byte_to_unicode(0xAD), 0x143);
  /* A bijection onto 256 distinct code points. */
  int seen = 0;
  for (int a = 0; a < 256; a++)
    for (int b = a + 1; b < 256; b++)
      seen += bpe_byte_to_unicode((uint8_t)a) == bpe_byte_to_unicode((uint8_t)b);
  EXPECT_EQ_INT(seen, 0);
  char s[4];
  EXPECT_STREQ(bpe_byte_symbol(' ', s), "\xC4\xA0"); /* UTF-8 of U+0120 */
}

/* Splits text with bpe_pretoken_len and joins the chunks with '|'. */
static const char *chunks(const char *text) {
  static char out[512];
  size_t w = 0, n = strlen(text);
  for (size_t i = 0; i < n;) {
    size_t len = bpe_pretoken_len(text + i, n - i);
    if (i) out[w++] = '|';
    memcpy(out + w, text + i, len);
    w += len;
    i += len;
  }
  out[w] = '\0';
  return out;
}

static void test_pretokenizer(void) {
  /* Each expectation applies GPT-2's regex by hand (first alternative wins):
   * contractions; " ?" + one run of letters / digits / other; whitespace runs
   * give up their last character when a non-space follows. */
  EXPECT_STREQ(chunks("Hello world"), "Hello| world");
  EXPECT_STREQ(chunks("I'm don't  you're\tx"), "I|'m| don|'t| | you|'re|\t|x");
  EXPECT_STREQ(chunks("we'll they've he'd it's"), "we|'ll| they|'ve| he|'d| it|'s");
  EXPECT_STREQ(chunks("a1b2 3.14!!  \n\n"), "a|1|b|2| 3|.|14|!!|  \n\n");
  EXPECT_STREQ(chunks(" ?!x"), " ?!|x");
  EXPECT_STREQ(chunks("''s"), "''|s");     /* "'" + "'" is not a contraction */
  EXPECT_STREQ(chunks("'S"), "'|S");       /* contractions are lower-case only */
  EXPECT_STREQ(chunks("\nfoo"), "\n|foo"); /* one space char before \S: \s+ alone */
  EXPECT_STREQ(chunks("x  \n y"), "x|  \n| y");
  EXPECT_STREQ(chunks("   "), "   ");
  EXPECT_STREQ(chunks(" "), " ");
  /* Unicode classes (utf8proc): "é" is a letter, U+00A0 (no-break space) is
   * \s but not the ' ?' prefix, an em dash is "other", a byte that is not
   * UTF-8 is "other" (tests/data/test_bpe_unicode.c checks many more). */
  EXPECT_STREQ(chunks("caf\xC3\xA9 au"), "caf\xC3\xA9| au");
  EXPECT_STREQ(chunks("a\xC2\xA0" "b \xC2\xA0\xC2\xA0" "c"), "a|\xC2\xA0|b| \xC2\xA0|\xC2\xA0|c");
  EXPECT_STREQ(chunks("x\xE2\x80\x94 \xE2\x80\x94y"), "x|\xE2\x80\x94| \xE2\x80\x94|y");
  EXPECT_STREQ(chunks("ab\x80\xFF!" "cd"), "ab|\x80\xFF!|cd");
}

static void test_text_check(void) {
  size_t at = 99;
  const char *why = NULL;
  EXPECT(text_check("caf\xC3\xA9 \xE2\x80\x94 \xF0\x9F\x98\x80", 13, &at, &why));
  EXPECT(!text_check("ab\0c", 4, &at, &why));
  EXPECT_EQ_INT(at, 2);
  EXPECT_STREQ(why, "NUL byte");
  /* stray continuation byte, overlong '/', UTF-8 of a surrogate, beyond U+10FFFF */
  const char *bad[] = {"a\x80", "a\xC0\xAF", "a\xED\xA0\x80", "a\xF4\x90\x80\x80", "a\xFF"};
  for (int i = 0; i < 5; i++) {
    at = 99;
    EXPECT(!text_check(bad[i], strlen(bad[i]), &at, &why));
    EXPECT_EQ_INT(at, 1);
    EXPECT_STREQ(why, "invalid UTF-8");
  }
  /* A sequence cut by the end of the block is text; cut in the middle is not. */
  EXPECT(text_check("a\xE2\x80", 3, &at, &why));
  EXPECT(!text_check("a\xE2\x80" "b", 4, &at, &why));
  EXPECT_EQ_INT(at, 1);
}

static Bpe *load_fixture(void) {
  char err[IO_ERR_LEN];
  Bpe *b = bpe_load(FIX "vocab.json", FIX "merges.txt", err, sizeof err);
  if (!b) fprintf(stderr, "%s\n", err);
  return b;
}

/* Encodes text and compares with the expected ids. */
static int encodes_to(const Bpe *b, const char *text, const int *want, size_t nwant) {
  TokenBuf t = {0};
  size_t bad;
  int ok = bpe_encode(b, text, strlen(text), &t, &bad) && t.n == nwant;
  for (size_t i = 0; ok && i < nwant; i++) ok = (int64_t)t.ids[i] == want[i];
  if (!ok) {
    fprintf(stderr, "  \"%s\" ->", text);
    for (size_t i = 0; i < t.n; i++) fprintf(stderr, " %u", (unsigned)t.ids[i]);
    fprintf(stderr, "\n");
  }
  tokenbuf_free(&t);
  return ok;
}
#define EXPECT_ENCODES(b, text, ...)                                      \
  do {                                                                    \
    const int want_[] = {__VA_ARGS__};                                    \
    EXPECT(encodes_to((b), (text), want_, sizeof want_ / sizeof *want_)); \
  } while (0)

static void test_fixture_encoding(void) {
  Bpe *b = load_fixture();
  EXPECT(b != NULL);
  if (!b) return;
  EXPECT_EQ_INT(bpe_vocab_size(b), 27);
  EXPECT_EQ_INT(bpe_token_id(b, "\xC4\xA0hello"), 26);
  EXPECT_EQ_INT(bpe_token_id(b, "nope"), -1);
  /* Merge ranks (0-based, merges.txt order): "l l" 0, "h e" 1, "he ll" 2,
   * "hell o" 3, "Ġ w" 4, "o r" 5, "Ġw or" 6, "l d" 7, "Ġwor ld" 8, "' s" 9,
   * "4 2" 10, "Ġ h" 11, "Ġ hello" 12.
   * "hello world's 42 hello!\n" pre-tokenises to
   *   "hello" | " world" | "'s" | " 42" | " hello" | "!" | "\n".
   *  "hello":  h e l l o -> (l l)0: h e ll o -> (h e)1: he ll o -> (he ll)2: hell o
   *            -> (hell o)3: hello = 17
   *  " world": Ġ w o r l d; pairs Ġw 4, or 5, ld 7 -> Ġw o r l d -> Ġw or l d
   *            -> (Ġw or)6: Ġwor l d -> (l d)7: Ġwor ld -> (Ġwor ld)8: Ġworld = 22
   *  "'s":     (' s)9 = 23
   *  " 42":    Ġ 4 2: no "Ġ 4"; (4 2)10 -> Ġ 42 = 9, 24
   *  " hello": Ġ h e l l o: "Ġ h" (11) is present but ranks below l l, h e, he ll,
   *            hell o, so -> Ġ hello -> (Ġ hello)12: Ġhello = 26 (never Ġh)
   *  "!" = 12, "\n" = Ċ = 13 */
  EXPECT_ENCODES(b, "hello world's 42 hello!\n", 17, 22, 23, 9, 24, 26, 12, 13);
  /* "lll  h" -> "lll" | " " | " h": l l l merges leftmost first -> ll l = 14, 2;
   * " " = Ġ = 9; " h" = Ġ h -> (Ġ h)11 = 25. */
  EXPECT_ENCODES(b, "lll  h", 14, 2, 9, 25);
  /* "he  \n": "he" | "  \n" (trailing whitespace stays whole) -> 15 | 9 9 13. */
  EXPECT_ENCODES(b, "he  \n", 15, 9, 9, 13);
  /* A byte the vocabulary lacks: 'x' at offset 6. */
  TokenBuf t = {0};
  size_t bad = 0;
  EXPECT(!bpe_encode(b, "hello x", 7, &t, &bad));
  EXPECT_EQ_INT(bad, 6);
  tokenbuf_free(&t);
  bpe_destroy(b);
}

static void test_byte_level(void) {
  TokenBuf t = {0};
  size_t bad;
  EXPECT(bpe_encode(NULL, "a\xFF\n", 3, &t, &bad));
  EXPECT(t.n == 3 && t.ids[0] == 'a' && t.ids[1] == 0xFF && t.ids[2] == '\n');
  tokenbuf_free(&t);
}

/* Ids above 65535, sparse (Llama 3's specials sit above its BPE vocabulary): loaded and
 * encoded whole, the vocabulary size 1 + the largest. */
static void test_large_ids(void) {
  const char *v = "{\"h\": 0, \"i\": 70000, \"hi\": 131071, \"\xC4\xA0\": 5}";
  write_bytes(tmp_path("big.json"), v, strlen(v));
  write_bytes(tmp_path("big.txt"), "h i\n", 4);
  char err[IO_ERR_LEN] = "";
  Bpe *b = bpe_load(tmp_path("big.json"), tmp_path("big.txt"), err, sizeof err);
  EXPECT(b != NULL);
  if (!b) {
    fprintf(stderr, "  %s\n", err);
    return;
  }
  EXPECT_EQ_INT(bpe_vocab_size(b), 131072);
  EXPECT_ENCODES(b, "hi i", 131071, 5, 70000); /* "hi" | " i": Ġ i has no merge */
  bpe_destroy(b);
}

#define EXPECT_LOAD_FAILS(vocab_text, merges_text, ...)                           \
  do {                                                                            \
    write_bytes(tmp_path("v.json"), vocab_text, strlen(vocab_text));              \
    write_bytes(tmp_path("m.txt"), merges_text, strlen(merges_text));             \
    char err_[IO_ERR_LEN] = "";                                                   \
    Bpe *b_ = bpe_load(tmp_path("v.json"), tmp_path("m.txt"), err_, sizeof err_); \
    EXPECT(b_ == NULL);                                                           \
    bpe_destroy(b_);                                                              \
    EXPECT_MSG(err_, __VA_ARGS__);                                                \
  } while (0)

static void test_load_errors(void) {
  EXPECT_LOAD_FAILS("{\"a\": 0, \"b\": ", "", "v.json: offset", "malformed JSON");
  EXPECT_LOAD_FAILS("[1, 2]", "", "v.json", "expected a JSON object");
  EXPECT_LOAD_FAILS("{\"a\": 0, \"b\": 1.5}", "", "v.json: token \"b\"", "integer in [0, 2147483646]");
  EXPECT_LOAD_FAILS("{\"a\": 2147483647}", "", "token \"a\"", "[0, 2147483646]");
  EXPECT_LOAD_FAILS("{\"a\": \"x\"}", "", "token \"a\"");
  EXPECT_LOAD_FAILS("{\"a\": 0, \"b\": 0}", "", "id 0 is given to both \"a\" and \"b\"");
  EXPECT_LOAD_FAILS("{\"a\": 100000, \"b\": 3, \"c\": 100000}", "", "id 100000 is given to both \"a\" and \"c\"");
  EXPECT_LOAD_FAILS("{\"a\": 0, \"a\": 1}", "", "token \"a\" appears twice");
  EXPECT_LOAD_FAILS("{}", "", "empty vocabulary");
  EXPECT_LOAD_FAILS("{\"a\": 0, \"b\": 1}", "#version: 0.2\na b\n",
                    "m.txt:2: token \"ab\" is not in the vocabulary");
  EXPECT_LOAD_FAILS("{\"a\": 0, \"b\": 1, \"ab\": 2}", "a b\na c\n",
                    "m.txt:2: token \"c\" is not in the vocabulary");
  EXPECT_LOAD_FAILS("{\"a\": 0, \"b\": 1, \"ab\": 2}", "a b\nab\n",
                    "m.txt:2: expected two tokens separated by one space, got \"ab\"");
  char err[IO_ERR_LEN];
  EXPECT(bpe_load(tmp_path("none.json"), FIX "merges.txt", err, sizeof err) == NULL);
  EXPECT_MSG(err, "none.json: cannot open");
}

int main(void) {
  tmp_init("bpe");
  RUN(test_byte_to_unicode);
  RUN(test_pretokenizer);
  RUN(test_text_check);
  RUN(test_fixture_encoding);
  RUN(test_byte_level);
  RUN(test_load_errors);
  RUN(test_large_ids);
  tmp_cleanup(test_failed_);
  return TEST_REPORT();
}
