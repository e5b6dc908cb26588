/* tokenizer/bpe_pretok.c — the pre-tokenizers: the regexes that cut text into the
 * chunks merges never cross, written by hand on code points for GPT-2's pattern
 * (bpe_pretoken_len) and Llama 3's / Qwen2's (bpe_pretoken_len_llama3); no regex
 * library: these are all byte-level BPE tokenizers in use need, and a hand-written
 * matcher says exactly which Unicode classes it uses.
 *
 * Invariants: at each position the first alternative that matches wins, as in the
 * backtracking engines the reference tokenizers use (Python's regex, Oniguruma), and
 * the chunks tile the text; the classes are those engines' (CharClass, from
 * utf8proc's tables); bytes that are not valid UTF-8 are kept, one "other" character
 * each, as Python's errors="surrogateescape" decoding would see them.
 */
#include <utf8proc.h>

#include "tokenizer/bpe_internal.h"

/* The patterns:
 *   GPT-2 (also Hugging Face's ByteLevel pre-tokenizer with use_regex):
 *     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   Llama 3 (its tokenizer.json's Split pre-tokenizer; Qwen2's has \p{N} for \p{N}{1,3}):
 *     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *      ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * \p{L} is the general categories Lu Ll Lt Lm Lo, \p{N} is Nd Nl No, and \s is the
 * Unicode property White_Space — U+0009..U+000D, U+0085 and the categories Zs, Zl, Zp
 * (not Python's str.isspace, which adds U+001C..U+001F). Everything else
 * (punctuation, symbols, marks, controls, format characters such as ZWJ and the BOM)
 * is the "other" class. The contractions and ' ?' are the ASCII characters the
 * patterns spell; (?i:...) folds ASCII case only (Oniguruma also folds U+017F LATIN
 * SMALL LETTER LONG S to s, which we do not). utf8proc's Unicode version can lag the
 * reference tokenizer's for characters assigned since. A byte that is not part of
 * valid UTF-8 never reaches the reference tokenizers (they take decoded text); kept
 * with the "other" class it tokenises as its surrogateescape decoding (a lone
 * surrogate, category Cs) does. */
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

/* Bytes of the run of class c, at most max characters, that starts at t[0]; *last (when
 * wanted): where its last character starts (0 for a run of one or none). */
static size_t run_len(const unsigned char *t, size_t n, CharClass c, size_t max, size_t *last) {
  size_t k = 0;
  for (size_t i = 0; i < max && k < n; i++) {
    CharClass cc;
    size_t len = next_char(t + k, n - k, &cc);
    if (cc != c) break;
    if (last) *last = k;
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
  if (c != CC_SPACE) return j + run_len(t + j, n - j, c, SIZE_MAX, NULL);
  /* `\s+(?!\S)|\s+`: a whitespace run, less its last character when a
   * non-space follows (that character then starts the next chunk: " word"),
   * but never less than one character. */
  size_t last = 0, k = run_len(t, n, CC_SPACE, SIZE_MAX, &last);
  if (k == n || last == 0) return k; /* whole run at the end; a single character */
  return last;
}

static bool is_crlf(unsigned char c) { return c == '\r' || c == '\n'; }

size_t bpe_pretoken_len_llama3(const char *text, size_t n, int max_digits) {
  const unsigned char *t = (const unsigned char *)text;
  PD_CHECK(n > 0);
  /* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
  if (t[0] == '\'' && n >= 2) {
    /* c | 0x20 is c's lower case for ASCII letters, and a letter only for them */
    unsigned char a = (unsigned char)(t[1] | 0x20), b = n >= 3 ? (unsigned char)(t[2] | 0x20) : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  CharClass c0;
  size_t len0 = next_char(t, n, &c0);
  /* [^\r\n\p{L}\p{N}]?\p{L}+: a letter run, with one non-letter, non-number
   * character before it that is not CR or LF (a space, a tab, punctuation). */
  if (c0 == CC_LETTER) return run_len(t, n, CC_LETTER, SIZE_MAX, NULL);
  if (c0 != CC_DIGIT && !is_crlf(t[0]) && len0 < n) {
    CharClass c1;
    next_char(t + len0, n - len0, &c1);
    if (c1 == CC_LETTER) return len0 + run_len(t + len0, n - len0, CC_LETTER, SIZE_MAX, NULL);
  }
  /* \p{N}{1,3}: at most max_digits numbers. */
  if (c0 == CC_DIGIT) return run_len(t, n, CC_DIGIT, (size_t)max_digits, NULL);
  /*  ?[^\s\p{L}\p{N}]+[\r\n]*: an "other" run, maybe after one ASCII space, and
   * the CRs and LFs that follow it. */
  size_t j = 0;
  if (t[0] == ' ' && n > 1) {
    CharClass c1;
    next_char(t + 1, n - 1, &c1);
    j = c1 == CC_OTHER ? 1 : 0;
  }
  if (j == 1 || c0 == CC_OTHER) {
    size_t k = j + run_len(t + j, n - j, CC_OTHER, SIZE_MAX, NULL);
    while (k < n && is_crlf(t[k])) k++;
    return k;
  }
  /* Whitespace (c0 is CC_SPACE here). \s*[\r\n]+: the run up to and including its
   * last CR or LF; else \s+(?!\S): the run less its last character when a
   * non-space follows, but never less than one character; else \s+. A CR or LF byte
   * is a character of its own (UTF-8 never repeats it inside another). */
  size_t last = 0, k = run_len(t, n, CC_SPACE, SIZE_MAX, &last);
  for (size_t i = k; i > 0; i--)
    if (is_crlf(t[i - 1])) return i;
  if (k == n || last == 0) return k;
  return last;
}
