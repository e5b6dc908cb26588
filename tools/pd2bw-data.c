/* tools/pd2bw-data.c — turns text into the token files pd2bwrun trains on
 * (what users see: docs/data.md).
 *
 *   pd2bw-data --input FILE... --out-prefix PREFIX [--val-fraction 0.1] [--eot]
 *              [--vocab vocab.json --merges merges.txt | --tokenizer tokenizer.json]
 *              [--format llmc|raw] [--fortune]
 *   pd2bw-data --info FILE.bin...
 *
 * Writes PREFIX_train.bin and PREFIX_val.bin (no val file with --val-fraction 0), both or
 * neither, after checking that neither names an input. The text is cut into documents
 * (split_docs), each tokenised on its own and put in train or validation by a rule that
 * spreads validation evenly (tokenize); inputs that are not text are skipped, one note
 * each (TEXT_SNIFF_BYTES). */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/io/io.h"
#include "tokenizer/tokenizer.h"

typedef struct Doc {
  int file;
  size_t start, len; /* in the file's text */
} Doc;

typedef struct Options {
  const char **inputs;
  int ninputs;
  const char *out_prefix, *vocab, *merges, *tokenizer;
  double val_fraction;
  DataFormat format;
  bool fortune;
  bool eot;
} Options;

static void usage(FILE *out) {
  fprintf(out,
          "usage: pd2bw-data --input FILE... --out-prefix PREFIX [--val-fraction F]\n"
          "                  [--vocab vocab.json --merges merges.txt | --tokenizer tokenizer.json]\n"
          "                  [--eot]\n"
          "                  [--format llmc|raw]\n"
          "                  [--fortune]\n"
          "       pd2bw-data --info FILE.bin...\n"
          "\n"
          "Tokenises text into PREFIX_train.bin and PREFIX_val.bin: uint16 token ids, or\n"
          "uint32 (llm.c's Llama 3 layout) when the tokenizer's ids exceed 65535.\n"
          "  --input FILE...     text files, in order\n"
          "  --out-prefix P      output prefix\n"
          "  --val-fraction F    fraction of documents for validation, 0 <= F < 1 (0.1)\n"
          "  --vocab, --merges   GPT-2 BPE files; without them each byte is a token (vocab 256)\n"
          "  --tokenizer FILE    a Hugging Face tokenizer.json byte-level BPE instead\n"
          "  --eot               put the document start before each document: the tokenizer.json\n"
          "                      template's (<|begin_of_text|>), else <|endoftext|> or <|end_of_text|>\n"
          "  --format llmc|raw   llm.c layout with a 1024-byte header (default) or bare uint16\n"
          "                      (raw: a vocabulary of at most 65536 ids)\n"
          "  --fortune           input is fortune(6) files: '%%' lines separate entries\n"
          "  --info FILE.bin...  print the format, token count and largest id of token files\n");
}

/* Prints a user error; returns the exit status 1. */
static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "pd2bw-data: error: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  return 1;
}

static int info(int argc, char **argv, int i) {
  if (i >= argc) return fail("--info needs at least one token file");
  int nbad = 0, nfiles = argc - i;
  for (; i < argc; i++) {
    char err[IO_ERR_LEN];
    DataFile *f = data_open(argv[i], DATA_AUTO, 0, err, sizeof err);
    fflush(stdout); /* one file's line after the previous file's, on one terminal or pipe */
    if (!f) {
      fail("%s", err);
      nbad++;
      continue;
    }
    printf("%s: %s, %lld tokens, largest id %lld\n", argv[i],
           data_format(f) == DATA_RAW     ? "raw uint16"
           : data_token_bytes(f) == 4     ? "llm.c format (uint32 tokens)"
                                          : "llm.c format",
           (long long)data_ntokens(f), (long long)data_max_token(f));
    data_close(f);
  }
  fflush(stdout);
  if (nbad && nfiles > 1)
    fprintf(stderr, "pd2bw-data: %d of %d files could not be read as token files\n", nbad, nfiles);
  return nbad ? 1 : 0;
}

/* Inputs that are not text are skipped with a note, so that a glob over a
 * directory (the fortunes directory holds binary NAME.dat indexes) works. An
 * input is text when its first TEXT_SNIFF_BYTES bytes hold no NUL byte and are
 * valid UTF-8 (a sequence cut at the end of the block aside) — a cheap,
 * predictable rule, like git's and file(1)'s look at a file's start. Later
 * invalid bytes are tokenised as tokenizer/bpe.c documents. */
enum { TEXT_SNIFF_BYTES = 4096 };

/* strfile(1)'s index NAME.dat (a big-endian header whose first word is the
 * version, 1 or 2), named in the note because the fortunes directory holds one
 * next to each text file. */
static bool is_strfile_index(const char *path, const char *text, size_t n) {
  size_t pl = strlen(path);
  return pl > 4 && strcmp(path + pl - 4, ".dat") == 0 && n >= 24 &&
         memcmp(text, "\0\0\0", 3) == 0 && (text[3] == 1 || text[3] == 2);
}

/* Cuts text into documents and appends them: fortune entries with --fortune (the '%'
 * separator lines are dropped), otherwise paragraphs (a paragraph keeps the blank lines
 * that end it, so the documents put back together are the input). */
static void split_docs(const char *text, size_t n, int file, bool fortune, Doc **docs, int *ndocs,
                       int *cap) {
  size_t doc_start = 0;
  bool prev_blank = false;
  for (size_t pos = 0; pos < n;) {
    const char *nl = memchr(text + pos, '\n', n - pos);
    size_t end = nl ? (size_t)(nl - text) + 1 : n; /* line is [pos, end) */
    size_t body = end - pos - (nl ? 1 : 0);
    if (body && text[pos + body - 1] == '\r') body--;
    bool is_sep = fortune && body == 1 && text[pos] == '%';
    bool blank = body == 0;
    /* A document ends before a '%' line, or before the first non-blank line
     * after a blank one (paragraph mode). */
    bool cut = is_sep || (!fortune && prev_blank && !blank);
    if (cut && pos > doc_start) {
      if (*ndocs == *cap)
        *docs = pd_realloc(*docs, (size_t)(*cap = *cap ? *cap * 2 : 256) * sizeof **docs);
      (*docs)[(*ndocs)++] = (Doc){file, doc_start, pos - doc_start};
    }
    if (cut) doc_start = is_sep ? end : pos;
    prev_blank = blank;
    pos = end;
  }
  if (n > doc_start) {
    if (*ndocs == *cap)
      *docs = pd_realloc(*docs, (size_t)(*cap = *cap ? *cap * 2 : 256) * sizeof **docs);
    (*docs)[(*ndocs)++] = (Doc){file, doc_start, n - doc_start};
  }
}

/* wide: uint32 tokens under llm.c's Llama 3 header; else uint16 (either layout). */
static bool write_tokens(AtomicFile *af, const char *path, const TokenBuf *t, DataFormat fmt, bool wide,
                         char *err, size_t errlen) {
  if (!atomic_open(af, path, err, errlen)) return false;
  if (fmt == DATA_LLMC) {
    int32_t hdr[256] = {wide ? DATA_LLMC32_MAGIC : DATA_LLMC_MAGIC,
                        wide ? DATA_LLMC32_VERSION : DATA_LLMC_VERSION, (int32_t)t->n};
    atomic_write(af, hdr, sizeof hdr);
  }
  if (wide) {
    atomic_write(af, t->ids, t->n * sizeof *t->ids);
    return true;
  }
  uint16_t chunk[4096]; /* ids < 65536: the tokenizer's vocabulary is at most that */
  for (size_t i = 0; i < t->n;) {
    size_t m = t->n - i < 4096 ? t->n - i : 4096;
    for (size_t k = 0; k < m; k++) chunk[k] = (uint16_t)t->ids[i + k];
    atomic_write(af, chunk, m * sizeof *chunk);
    i += m;
  }
  return true;
}

static int parse_args(int argc, char **argv, Options *o) {
  o->val_fraction = 0.1;
  o->format = DATA_LLMC;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    bool has_val = i + 1 < argc;
    if (strcmp(a, "--input") == 0) {
      o->inputs = (const char **)&argv[i + 1];
      while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) i++, o->ninputs++;
    } else if (strcmp(a, "--out-prefix") == 0 && has_val) {
      o->out_prefix = argv[++i];
    } else if (strcmp(a, "--vocab") == 0 && has_val) {
      o->vocab = argv[++i];
    } else if (strcmp(a, "--merges") == 0 && has_val) {
      o->merges = argv[++i];
    } else if (strcmp(a, "--tokenizer") == 0 && has_val) {
      o->tokenizer = argv[++i];
    } else if (strcmp(a, "--val-fraction") == 0 && has_val) {
      char *end;
      o->val_fraction = strtod(argv[++i], &end);
      if (*end || end == argv[i] || !(o->val_fraction >= 0 && o->val_fraction < 1))
        return fail("--val-fraction %s: expected a number in [0, 1)", argv[i]);
    } else if (strcmp(a, "--format") == 0 && has_val) {
      const char *f = argv[++i];
      if (strcmp(f, "llmc") == 0)
        o->format = DATA_LLMC;
      else if (strcmp(f, "raw") == 0)
        o->format = DATA_RAW;
      else
        return fail("--format %s: expected llmc or raw", f);
    } else if (strcmp(a, "--fortune") == 0) {
      o->fortune = true;
    } else if (strcmp(a, "--eot") == 0) {
      o->eot = true;
    } else {
      fail("unknown or incomplete option %s", a);
      usage(stderr);
      return 1;
    }
  }
  if (o->ninputs == 0) return fail("no --input files");
  if (!o->out_prefix) return fail("no --out-prefix");
  if (!o->vocab != !o->merges)
    return fail("--vocab and --merges go together (give both, or neither for bytes)");
  if (o->tokenizer && o->vocab)
    return fail("--tokenizer replaces --vocab and --merges (give one or the other)");
  if (o->eot && !o->vocab && !o->tokenizer)
    return fail("--eot needs --vocab and --merges or --tokenizer (byte-level tokens have no end-of-text id)");
  return 0;
}

/* No output names an input (runtime/io/io.h output_paths_check), before anything is
 * read or written: PREFIX_train.bin (and _val.bin) against --input, --vocab, --merges.
 * Returns 0, or 1 after an error. */
static int check_paths(const Options *o) {
  char err[IO_ERR_LEN];
  size_t n = strlen(o->out_prefix) + 16;
  char *flag = pd_malloc(n), *train = pd_malloc(n), *val = pd_malloc(n);
  snprintf(flag, n, "--out-prefix %s:", o->out_prefix);
  snprintf(train, n, "%s_train.bin", o->out_prefix);
  snprintf(val, n, "%s_val.bin", o->out_prefix);
  PathFlag outs[] = {{flag, train, false}, {flag, o->val_fraction > 0 ? val : NULL, false}};
  PathFlag *ins = pd_calloc((size_t)o->ninputs + 3, sizeof *ins);
  for (int i = 0; i < o->ninputs; i++) ins[i] = (PathFlag){"--input", o->inputs[i], false};
  ins[o->ninputs] = (PathFlag){"--vocab", o->vocab, false};
  ins[o->ninputs + 1] = (PathFlag){"--merges", o->merges, false};
  ins[o->ninputs + 2] = (PathFlag){"--tokenizer", o->tokenizer, false};
  bool ok = output_paths_check(outs, 2, ins, o->ninputs + 3, err, sizeof err);
  free(ins);
  free(flag);
  free(train);
  free(val);
  return ok ? 0 : fail("%s", err);
}

/* The inputs' texts (NULL for one skipped) cut into documents. */
typedef struct Corpus {
  char **texts;
  size_t *lens;
  Doc *docs;
  int ndocs, cap;
  int nfiles; /* inputs read, not skipped */
  size_t total_bytes;
} Corpus;

/* Reads every input and cuts it into documents; skips, with a note, an input that
 * is not text and one naming a file already read. Returns 0, or 1 after an error. */
static int read_inputs(const Options *o, Corpus *c) {
  char err[IO_ERR_LEN];
  c->texts = pd_calloc((size_t)o->ninputs, sizeof *c->texts);
  c->lens = pd_calloc((size_t)o->ninputs, sizeof *c->lens);
  int rc = 0;
  struct stat *seen = pd_calloc((size_t)o->ninputs, sizeof *seen);
  int nskipped = 0, first_skip = 0, first_dup = 0;
  for (int i = 0; i < o->ninputs && !rc; i++) {
    c->texts[i] = io_read_all(o->inputs[i], &c->lens[i], err, sizeof err);
    if (!c->texts[i]) {
      rc = fail("%s", err);
      break;
    }
    size_t bad_at;
    const char *why;
    if (!text_check(c->texts[i], c->lens[i] < TEXT_SNIFF_BYTES ? c->lens[i] : TEXT_SNIFF_BYTES,
                    &bad_at, &why)) {
      fprintf(stderr, "pd2bw-data: note: skipped %s: not text (%s at offset %zu%s)\n",
              o->inputs[i], why, bad_at,
              is_strfile_index(o->inputs[i], c->texts[i], c->lens[i]) ? "; a strfile(1) index" : "");
      free(c->texts[i]);
      c->texts[i] = NULL;
      continue;
    }
    int dup = -1;
    if (stat(o->inputs[i], &seen[i]) == 0)
      for (int j = 0; j < i && dup < 0; j++)
        if (c->texts[j] && seen[j].st_dev == seen[i].st_dev && seen[j].st_ino == seen[i].st_ino)
          dup = j;
    if (dup >= 0) {
      if (nskipped++ == 0) first_skip = i, first_dup = dup;
      free(c->texts[i]);
      c->texts[i] = NULL;
      continue;
    }
    c->nfiles++;
    c->total_bytes += c->lens[i];
    split_docs(c->texts[i], c->lens[i], i, o->fortune, &c->docs, &c->ndocs, &c->cap);
  }
  free(seen);
  if (nskipped)
    fprintf(stderr,
            "pd2bw-data: note: skipped %d input%s naming a file already read (%s is %s%s)\n",
            nskipped, nskipped > 1 ? "s" : "", o->inputs[first_skip], o->inputs[first_dup],
            nskipped > 1 ? ", ..." : "");
  return rc;
}

/* Tokenises each document on its own, token streams concatenated in input order, into
 * train or val: document i goes to validation when floor((i+1)·f) > floor(i·f), so the
 * floor(n·f) validation documents are spread evenly through the corpus (not one topic at
 * its end). Each is preceded by eot when eot >= 0 (the tokenizer's document start, as
 * main() picks it under --eot, as llm.c's scripts do). Checks
 * both streams are usable. Returns 0, or 1 after an error. */
static int tokenize(const Options *o, const Corpus *c, const Bpe *bpe, int64_t eot,
                    TokenBuf *train, TokenBuf *val, int *nval_docs) {
  int rc = 0;
  for (int i = 0; i < c->ndocs && !rc; i++) {
    const Doc *d = &c->docs[i];
    bool is_val = (long long)((i + 1) * o->val_fraction) > (long long)(i * o->val_fraction);
    *nval_docs += is_val;
    size_t bad;
    if (eot >= 0) tokenbuf_push(is_val ? val : train, (uint32_t)eot);
    if (!bpe_encode(bpe, c->texts[d->file] + d->start, d->len, is_val ? val : train, &bad)) {
      char sym[4], msg[IO_ERR_LEN];
      unsigned char byte = (unsigned char)c->texts[d->file][d->start + bad];
      snprintf(msg, sizeof msg, "%s: offset %zu: byte 0x%02x has no token: %s lacks \"%s\"",
               o->inputs[d->file], d->start + bad, byte, o->vocab ? o->vocab : o->tokenizer,
               bpe_byte_symbol(byte, sym));
      rc = fail("%s", msg);
    }
  }
  if (!rc && train->n == 0) rc = fail("no text to train on in the input");
  if (!rc && o->val_fraction > 0 && val->n == 0) {
    rc = fail(
        "--val-fraction %g of %d documents is less than one document; give more text "
        "or --val-fraction 0",
        o->val_fraction, c->ndocs);
  }
  if (!rc && (train->n > INT32_MAX || val->n > INT32_MAX))
    rc = fail("more than 2^31 tokens: the llm.c header cannot count them");
  return rc;
}

/* Writes PREFIX_train.bin and PREFIX_val.bin, both or neither, and says what they
 * hold. Returns 0, or 1 after an error. */
static int write_outputs(const Options *o, const Corpus *c, const Bpe *bpe, bool wide,
                         const TokenBuf *train, const TokenBuf *val, int nval_docs) {
  char err[IO_ERR_LEN];
  int rc = 0;
  size_t plen = strlen(o->out_prefix) + 16;
  char *train_path = pd_malloc(plen), *val_path = pd_malloc(plen);
  snprintf(train_path, plen, "%s_train.bin", o->out_prefix);
  snprintf(val_path, plen, "%s_val.bin", o->out_prefix);
  /* Both temp files first, then both renames: an error leaves neither. */
  AtomicFile a = {0}, b = {0};
  bool ok = write_tokens(&a, train_path, train, o->format, wide, err, sizeof err) &&
            (o->val_fraction == 0 || write_tokens(&b, val_path, val, o->format, wide, err, sizeof err));
  if (ok) ok = atomic_commit(&a, err, sizeof err);
  if (ok && b.f) ok = atomic_commit(&b, err, sizeof err);
  if (!ok) {
    atomic_abort(&a);
    atomic_abort(&b);
    rc = fail("%s", err);
  }
  if (!rc) {
    printf("pd2bw-data: %d files, %zu bytes, %d documents (%d validation)\n", c->nfiles,
           c->total_bytes, c->ndocs, nval_docs);
    if (bpe)
      printf("  tokenizer: %s BPE from %s, vocab %lld\n", o->vocab ? "GPT-2" : "tokenizer.json",
             o->vocab ? o->vocab : o->tokenizer, (long long)bpe_vocab_size(bpe));
    else
      printf("  tokenizer: bytes, vocab 256\n");
    printf("  train: %zu tokens -> %s (%s)\n", train->n, train_path,
           o->format == DATA_RAW ? "raw uint16"
           : wide                ? "llm.c format, uint32 tokens: the vocabulary exceeds 65536 ids"
                                 : "llm.c format");
    if (o->val_fraction > 0) printf("  val:   %zu tokens -> %s\n", val->n, val_path);
  }
  free(train_path);
  free(val_path);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 1;
  }
  if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(argv[1], "--info") == 0) return info(argc, argv, 2);
  Options o = {0};
  if (parse_args(argc, argv, &o) || check_paths(&o)) return 1;

  char err[IO_ERR_LEN];
  Bpe *bpe = NULL;
  if (o.vocab && !(bpe = bpe_load(o.vocab, o.merges, err, sizeof err))) return fail("%s", err);
  if (o.tokenizer && !(bpe = bpe_load_hf(o.tokenizer, err, sizeof err))) return fail("%s", err);
  /* --eot: the tokenizer's own document start (Llama 3's post-processor puts
   * <|begin_of_text|> before every text), else <|endoftext|> (GPT-2's, as llm.c's
   * scripts put it), else <|end_of_text|> for a tokenizer.json without a template */
  const char *why = NULL;
  int64_t eot = o.eot ? bpe_doc_start(bpe, &why) : -1;
  if (o.eot && eot < 0 && !why) eot = bpe_token_id(bpe, "<|endoftext|>");
  if (o.eot && eot < 0 && !why && o.tokenizer) eot = bpe_token_id(bpe, "<|end_of_text|>");
  if (o.eot && eot < 0) {
    char msg[IO_ERR_LEN];
    if (why) snprintf(msg, sizeof msg, "--eot: %s", why);
    else snprintf(msg, sizeof msg, "--eot: %s has no \"<|endoftext|>\" token%s", o.vocab ? o.vocab : o.tokenizer,
                  o.tokenizer ? " (nor \"<|end_of_text|>\")" : "");
    bpe_destroy(bpe);
    return fail("%s", msg);
  }

  /* uint32 tokens (llm.c's Llama 3 layout) exactly when the tokenizer has ids above
   * 65535: by the tokenizer, not the ids a text happens to use, so one tokenizer always
   * gives one layout. Raw files are uint16 only. */
  bool wide = bpe && bpe_vocab_size(bpe) > 65536;
  if (wide && o.format == DATA_RAW) {
    int64_t v = bpe_vocab_size(bpe);
    bpe_destroy(bpe);
    return fail("--format raw holds uint16 ids, but %s has ids up to %lld: use --format llmc (uint32 tokens)",
                o.vocab ? o.vocab : o.tokenizer, (long long)v - 1);
  }

  Corpus c = {0};
  TokenBuf train = {0}, val = {0};
  int nval_docs = 0;
  int rc = read_inputs(&o, &c);
  if (!rc) rc = tokenize(&o, &c, bpe, eot, &train, &val, &nval_docs);
  if (!rc) rc = write_outputs(&o, &c, bpe, wide, &train, &val, nval_docs);
  tokenbuf_free(&train);
  tokenbuf_free(&val);
  for (int i = 0; i < o.ninputs; i++) free(c.texts[i]);
  free(c.texts);
  free(c.lens);
  free(c.docs);
  bpe_destroy(bpe);
  return rc;
}
