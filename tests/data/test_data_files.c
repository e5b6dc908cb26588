/* Token files (runtime/io/data.c): every layout (llm.c uint16 and uint32, raw), every
 * error with its message, and the batch sampler's windows, wrap-around, shuffle
 * determinism and seeking. */
#include <sys/stat.h>

#include "runtime/io/io.h"
#include "test.h"
#include "test_util.h"

/* Writes an llm.c token file holding tokens[0, n) with header count `count`. */
static void write_llmc(const char *path, int32_t magic, int32_t version, int32_t count,
                       const uint16_t *tokens, size_t n) {
  size_t bytes = DATA_LLMC_HEADER_BYTES + 2 * n;
  unsigned char *buf = calloc(1, bytes);
  int32_t hdr[3] = {magic, version, count};
  memcpy(buf, hdr, sizeof hdr);
  memcpy(buf + DATA_LLMC_HEADER_BYTES, tokens, 2 * n);
  write_bytes(path, buf, bytes);
  free(buf);
}

/* The same with uint32 tokens (llm.c's Llama 3 layout when magic is DATA_LLMC32_MAGIC). */
static void write_llmc32(const char *path, int32_t magic, int32_t version, int32_t count,
                         const uint32_t *tokens, size_t n) {
  size_t bytes = DATA_LLMC_HEADER_BYTES + 4 * n;
  unsigned char *buf = calloc(1, bytes);
  int32_t hdr[3] = {magic, version, count};
  memcpy(buf, hdr, sizeof hdr);
  memcpy(buf + DATA_LLMC_HEADER_BYTES, tokens, 4 * n);
  write_bytes(path, buf, bytes);
  free(buf);
}

static uint16_t seq[1000];
static uint32_t seq32[1000]; /* the same ids as seq, as uint32 */

static void test_llmc_round_trip(void) {
  const char *p = tmp_path("llmc.bin");
  write_llmc(p, DATA_LLMC_MAGIC, 1, 100, seq, 100);
  char err[IO_ERR_LEN];
  DataFile *f = data_open(p, DATA_AUTO, 100, err, sizeof err);
  EXPECT(f != NULL);
  if (!f) return;
  EXPECT_EQ_INT(data_format(f), DATA_LLMC);
  EXPECT_EQ_INT(data_ntokens(f), 100);
  EXPECT_EQ_INT(data_max_token(f), 99);
  EXPECT_EQ_INT(data_token_bytes(f), 2);
  for (int i = 0; i < 100; i++) EXPECT_EQ_INT(data_token(f, i), i);
  data_close(f);
}

/* Llama 3's layout: ids above 65535 come back whole, the header's magic decides. */
static void test_llmc32_round_trip(void) {
  const char *p = tmp_path("llmc32.bin");
  uint32_t t[6] = {128000, 9, 65535, 65536, 70000, 128255};
  write_llmc32(p, DATA_LLMC32_MAGIC, DATA_LLMC32_VERSION, 6, t, 6);
  char err[IO_ERR_LEN] = "";
  DataFile *f = data_open(p, DATA_AUTO, 128256, err, sizeof err);
  EXPECT(f != NULL);
  if (!f) {
    fprintf(stderr, "  %s\n", err);
    return;
  }
  EXPECT_EQ_INT(data_format(f), DATA_LLMC);
  EXPECT_EQ_INT(data_token_bytes(f), 4);
  EXPECT_EQ_INT(data_ntokens(f), 6);
  EXPECT_EQ_INT(data_max_token(f), 128255);
  for (int i = 0; i < 6; i++) EXPECT_EQ_INT(data_token(f, i), t[i]);
  int32_t in[5], tgt[5];
  data_get_window(f, 0, 5, in, tgt);
  for (int i = 0; i < 5; i++) {
    EXPECT_EQ_INT(in[i], (int32_t)t[i]);
    EXPECT_EQ_INT(tgt[i], (int32_t)t[i + 1]);
  }
  data_close(f);
  /* forced llm.c reads it the same */
  f = data_open(p, DATA_LLMC, 0, err, sizeof err);
  EXPECT(f && data_token_bytes(f) == 4 && data_token(f, 5) == 128255);
  data_close(f);
}

/* The same ids as llm.c uint16, llm.c uint32 and raw files: every loader (plain and
 * shuffled, any batch) hands the trainer identical batches. */
static void test_widths_give_same_batches(void) {
  const char *p16 = tmp_path("w16.bin"), *p32 = tmp_path("w32.bin"), *praw = tmp_path("wraw.bin");
  write_llmc(p16, DATA_LLMC_MAGIC, DATA_LLMC_VERSION, 997, seq, 997);
  write_llmc32(p32, DATA_LLMC32_MAGIC, DATA_LLMC32_VERSION, 997, seq32, 997);
  write_bytes(praw, seq, 2 * 997);
  char err[IO_ERR_LEN];
  const char *paths[3] = {p16, p32, praw};
  DataFile *f[3];
  for (int k = 0; k < 3; k++) {
    f[k] = data_open(paths[k], DATA_AUTO, 1000, err, sizeof err);
    EXPECT(f[k] != NULL);
    if (!f[k]) return;
  }
  EXPECT_EQ_INT(data_token_bytes(f[1]), 4);
  for (int shuffle = 0; shuffle < 2; shuffle++) {
    DataLoader *l[3];
    for (int k = 0; k < 3; k++) l[k] = data_loader_create(f[k], 3, 7, shuffle, 11, err, sizeof err);
    int32_t in[3][21], tgt[3][21];
    int differ = 0;
    for (int b = 0; b < 2 * data_batches_per_epoch(l[0]) + 3; b++) {
      for (int k = 0; k < 3; k++) data_next_batch(l[k], in[k], tgt[k]);
      for (int k = 1; k < 3; k++)
        differ += memcmp(in[0], in[k], sizeof in[0]) != 0 || memcmp(tgt[0], tgt[k], sizeof tgt[0]) != 0;
    }
    EXPECT_EQ_INT(differ, 0);
    for (int k = 0; k < 3; k++) data_loader_destroy(l[k]);
  }
  for (int k = 0; k < 3; k++) data_close(f[k]);
}

static void test_raw_round_trip(void) {
  const char *p = tmp_path("raw.bin");
  write_bytes(p, seq, 2 * 37);
  char err[IO_ERR_LEN];
  DataFile *f = data_open(p, DATA_AUTO, 0, err, sizeof err);
  EXPECT(f != NULL);
  if (!f) return;
  EXPECT_EQ_INT(data_format(f), DATA_RAW);
  EXPECT_EQ_INT(data_ntokens(f), 37);
  EXPECT_EQ_INT(data_token(f, 36), 36);
  EXPECT_EQ_INT(data_token_bytes(f), 2);
  data_close(f);
  /* An llm.c file read as raw keeps its header as tokens: forcing works. */
  f = data_open(tmp_path("llmc.bin"), DATA_RAW, 0, err, sizeof err);
  EXPECT(f && data_ntokens(f) == 512 + 100);
  data_close(f);
}

/* data_open must fail with a message naming the file and containing subs. */
#define EXPECT_OPEN_FAILS(path, fmt, vocab, ...)                         \
  do {                                                                   \
    char err_[IO_ERR_LEN] = "";                                          \
    DataFile *f_ = data_open((path), (fmt), (vocab), err_, sizeof err_); \
    EXPECT(f_ == NULL);                                                  \
    data_close(f_);                                                      \
    EXPECT_MSG(err_, (path), __VA_ARGS__);                               \
  } while (0)

static void test_errors(void) {
  const char *p = tmp_path("bad.bin");
  /* Forced llm.c on a file without the magic. */
  write_llmc(p, 12345, 1, 10, seq, 10);
  EXPECT_OPEN_FAILS(p, DATA_LLMC, 0, "offset 0: bad magic 12345", "20240520");
  write_llmc(p, DATA_LLMC_MAGIC, 2, 10, seq, 10);
  EXPECT_OPEN_FAILS(p, DATA_AUTO, 0, "offset 4: unsupported llm.c token-file version 2");
  /* Header count larger than the data. */
  write_llmc(p, DATA_LLMC_MAGIC, 1, 100, seq, 50);
  EXPECT_OPEN_FAILS(p, DATA_AUTO, 0, "truncated", "says 100 tokens", "only 100 bytes");
  write_llmc(p, DATA_LLMC_MAGIC, 1, 40, seq, 50);
  EXPECT_OPEN_FAILS(p, DATA_AUTO, 0, "20 bytes of trailing garbage");
  write_llmc(p, DATA_LLMC_MAGIC, 1, 0, seq, 0);
  EXPECT_OPEN_FAILS(p, DATA_AUTO, 0, "holds no tokens");
  /* Shorter than a header but forced to llm.c. */
  write_bytes(p, seq, 20);
  EXPECT_OPEN_FAILS(p, DATA_LLMC, 0, "truncated: 20 bytes, shorter than the 1024-byte");
  write_bytes(p, seq, 21);
  EXPECT_OPEN_FAILS(p, DATA_AUTO, 0, "odd size (21 bytes)");
  /* Found by content (issue 24): an llm.c file cut inside its header, and one whose
   * magic alone is damaged, are reported as such, not as tokens outside the vocabulary. */
  write_llmc(p, DATA_LLMC_MAGIC, 1, 10, seq, 10);
  EXPECT(truncate(p, 500) == 0);
  EXPECT_OPEN_FAILS(p, DATA_AUTO, 50, "truncated: 500 bytes, shorter than the 1024-byte llm.c token-file header");
  write_llmc(p, 12345, 1, 10, seq, 10);
  EXPECT_OPEN_FAILS(p, DATA_AUTO, 50, "offset 0: bad magic 12345", "20240520");
  write_bytes(p, seq, 0);
  EXPECT_OPEN_FAILS(p, DATA_AUTO, 0, "empty token file");
  EXPECT_OPEN_FAILS(tmp_path("missing.bin"), DATA_AUTO, 0, "cannot open token file",
                    "No such file");
  /* a FIFO: refused at once, never waited on for a writer (issue 24) */
  EXPECT(mkfifo(tmp_path("fifo.bin"), 0600) == 0);
  EXPECT_OPEN_FAILS(tmp_path("fifo.bin"), DATA_AUTO, 0, "cannot open token file: a FIFO, not a regular file");
}

/* A damaged uint32 file: each error names the file and where. */
static void test_errors32(void) {
  const char *p = tmp_path("bad32.bin");
  /* truncated: the header counts 100 tokens, 60 are there (240 bytes; 200 would be
   * enough for uint16: the width comes from the magic) */
  write_llmc32(p, DATA_LLMC32_MAGIC, DATA_LLMC32_VERSION, 100, seq32, 60);
  EXPECT_OPEN_FAILS(p, DATA_AUTO, 0, "truncated", "says 100 tokens (400 bytes of uint32)", "only 240 bytes");
  /* cut mid-token: 10 whole tokens and 2 bytes of the 11th */
  write_llmc32(p, DATA_LLMC32_MAGIC, DATA_LLMC32_VERSION, 11, seq32, 11);
  EXPECT(truncate(p, DATA_LLMC_HEADER_BYTES + 42) == 0);
  EXPECT_OPEN_FAILS(p, DATA_AUTO, 0, "truncated", "says 11 tokens (44 bytes of uint32)", "only 42 bytes");
  write_llmc32(p, DATA_LLMC32_MAGIC, DATA_LLMC32_VERSION, 40, seq32, 50);
  EXPECT_OPEN_FAILS(p, DATA_AUTO, 0, "40 bytes of trailing garbage after the 40 uint32 tokens");
  /* the magic and the version must go together */
  write_llmc32(p, DATA_LLMC32_MAGIC, DATA_LLMC_VERSION, 10, seq32, 10);
  EXPECT_OPEN_FAILS(p, DATA_AUTO, 0, "offset 4: unsupported llm.c token-file version 1 (expected 7 with magic 20240801)");
  write_llmc(p, DATA_LLMC_MAGIC, DATA_LLMC32_VERSION, 10, seq, 10);
  EXPECT_OPEN_FAILS(p, DATA_AUTO, 0, "offset 4: unsupported llm.c token-file version 7 (expected 1 with magic 20240520)");
  /* found by content: cut inside the header, or the magic alone garbled */
  write_llmc32(p, DATA_LLMC32_MAGIC, DATA_LLMC32_VERSION, 10, seq32, 10);
  EXPECT(truncate(p, 300) == 0);
  EXPECT_OPEN_FAILS(p, DATA_AUTO, 50, "truncated: 300 bytes, shorter than the 1024-byte llm.c token-file header");
  write_llmc32(p, 20240802, DATA_LLMC32_VERSION, 10, seq32, 10);
  EXPECT_OPEN_FAILS(p, DATA_AUTO, 50, "offset 0: bad magic 20240802", "20240801 for uint32");
  /* an id outside the vocabulary: its byte offset (1024 + 4·3), index, value, vocab */
  uint32_t t[6] = {1, 2, 128255, 128256, 5, 6};
  write_llmc32(p, DATA_LLMC32_MAGIC, DATA_LLMC32_VERSION, 6, t, 6);
  EXPECT_OPEN_FAILS(p, DATA_AUTO, 128256, "offset 1036: token 128256 (token #3)", "vocabulary of 128256 ids");
  /* without a vocabulary: ids must still fit the trainer's int32 */
  t[4] = 0x80000000u;
  write_llmc32(p, DATA_LLMC32_MAGIC, DATA_LLMC32_VERSION, 6, t, 6);
  EXPECT_OPEN_FAILS(p, DATA_AUTO, 0, "offset 1040: token 2147483648 (token #4) is above the largest id 2147483647");
}

static void test_token_out_of_vocab(void) {
  const char *p = tmp_path("vocab.bin");
  uint16_t t[20];
  for (int i = 0; i < 20; i++) t[i] = (uint16_t)(i % 5);
  t[7] = 60; /* the first bad one: byte offset 1024 + 2·7 = 1038 */
  t[9] = 70;
  write_llmc(p, DATA_LLMC_MAGIC, 1, 20, t, 20);
  EXPECT_OPEN_FAILS(p, DATA_AUTO, 50, "offset 1038: token 60 (token #7)", "vocabulary of 50");
  /* Raw layout: offset 14. */
  write_bytes(p, t, sizeof t);
  EXPECT_OPEN_FAILS(p, DATA_RAW, 50, "offset 14: token 60");
  /* The boundary: a token equal to the vocabulary size is out. */
  EXPECT_OPEN_FAILS(p, DATA_RAW, 60, "offset 14: token 60");
  EXPECT_OPEN_FAILS(p, DATA_RAW, 61, "offset 18: token 70 (token #9)");
  /* vocab 71 admits all; vocab 0 checks nothing. */
  char err[IO_ERR_LEN];
  DataFile *f = data_open(p, DATA_RAW, 71, err, sizeof err);
  EXPECT(f && data_max_token(f) == 70);
  data_close(f);
}

static void test_windows(void) {
  /* tokens[i] = i, T = 4: window w is inputs 4w..4w+3, targets one further. */
  const char *p = tmp_path("win.bin");
  write_llmc(p, DATA_LLMC_MAGIC, 1, 45, seq, 45);
  char err[IO_ERR_LEN];
  DataFile *f = data_open(p, DATA_AUTO, 0, err, sizeof err);
  EXPECT(f != NULL);
  if (!f) return;
  EXPECT_EQ_INT(data_nwindows(f, 4), 11); /* (45 - 1) / 4 */
  EXPECT_EQ_INT(data_nwindows(f, 44), 1);
  EXPECT_EQ_INT(data_nwindows(f, 45), 0);
  int32_t in[4], tgt[4];
  data_get_window(f, 10, 4, in, tgt);
  for (int i = 0; i < 4; i++) {
    EXPECT_EQ_INT(in[i], 40 + i);
    EXPECT_EQ_INT(tgt[i], 41 + i);
  }
  data_close(f);
}

static void test_sequential_batches(void) {
  /* 11 windows of T = 4, B = 2: 5 batches an epoch (window 10 dropped, as
   * llm.c's loader resets when B·T + 1 tokens no longer fit), batch k reads
   * tokens from position 8·(k mod 5) exactly like llm.c. */
  char err[IO_ERR_LEN];
  DataFile *f = data_open(tmp_path("win.bin"), DATA_AUTO, 0, err, sizeof err);
  DataLoader *l = data_loader_create(f, 2, 4, false, 0, err, sizeof err);
  EXPECT(l != NULL);
  if (!l) return;
  EXPECT_EQ_INT(data_batches_per_epoch(l), 5);
  int32_t in[8], tgt[8];
  for (int k = 0; k < 12; k++) {
    data_next_batch(l, in, tgt);
    for (int i = 0; i < 8; i++) {
      EXPECT_EQ_INT(in[i], 8 * (k % 5) + i);
      EXPECT_EQ_INT(tgt[i], 8 * (k % 5) + i + 1);
    }
  }
  EXPECT_EQ_INT(data_tell_batch(l), 12);
  data_loader_destroy(l);
  /* Too small for one batch. */
  l = data_loader_create(f, 12, 4, false, 0, err, sizeof err);
  EXPECT(l == NULL);
  EXPECT_MSG(err, "win.bin", "45 tokens are too few for one batch of 12 x 4 tokens", "needs 49");
  data_close(f);
}

static void test_shuffled_batches(void) {
  char err[IO_ERR_LEN];
  DataFile *f = data_open(tmp_path("win.bin"), DATA_AUTO, 0, err, sizeof err);
  DataLoader *a = data_loader_create(f, 2, 4, true, 42, err, sizeof err);
  DataLoader *b = data_loader_create(f, 2, 4, true, 42, err, sizeof err);
  DataLoader *c = data_loader_create(f, 2, 4, true, 43, err, sizeof err);
  EXPECT(a && b && c);
  if (!a || !b || !c) return;
  /* Each epoch: 10 distinct windows out of 11; epochs differ in order. */
  int64_t order[3][10];
  for (int e = 0; e < 3; e++) {
    int seen[11] = {0};
    for (int p = 0; p < 10; p++) {
      int64_t w = data_sample_window(a, e * 10 + p);
      EXPECT(w >= 0 && w < 11);
      if (w >= 0 && w < 11) EXPECT_EQ_INT(seen[w]++, 0);
      order[e][p] = w;
    }
  }
  EXPECT(memcmp(order[0], order[1], sizeof order[0]) != 0);
  EXPECT(memcmp(order[1], order[2], sizeof order[0]) != 0);
  /* Same seed, same stream — including after jumping around; other seed differs. */
  int same_c = 0;
  for (int p = 0; p < 10; p++) {
    EXPECT_EQ_INT(data_sample_window(b, 20 + p), order[2][p]);
    same_c += data_sample_window(c, p) == order[0][p];
  }
  EXPECT(same_c < 10);
  for (int p = 0; p < 10; p++) EXPECT_EQ_INT(data_sample_window(b, p), order[0][p]);
  /* Batches are the samples' windows, row by row; seek = resume. */
  int32_t in[8], tgt[8], in2[8], tgt2[8];
  for (int k = 0; k < 7; k++) data_next_batch(a, in, tgt);
  data_seek_batch(b, 7);
  data_next_batch(a, in, tgt);
  data_next_batch(b, in2, tgt2);
  EXPECT(memcmp(in, in2, sizeof in) == 0 && memcmp(tgt, tgt2, sizeof tgt) == 0);
  /* Batch 7 = samples 14, 15 = epoch 1, positions 4, 5. */
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 4; i++) {
      EXPECT_EQ_INT(in[r * 4 + i], order[1][4 + r] * 4 + i);
      EXPECT_EQ_INT(tgt[r * 4 + i], order[1][4 + r] * 4 + i + 1);
    }
  /* A replica reading one sample directly sees the same data. */
  int32_t one[4], onet[4];
  data_get_sample(c, 15, one, onet); /* c has another seed: use a fresh a-like loader */
  DataLoader *d = data_loader_create(f, 2, 4, true, 42, err, sizeof err);
  data_get_sample(d, 15, one, onet);
  EXPECT(memcmp(one, in + 4, sizeof one) == 0);
  data_loader_destroy(a);
  data_loader_destroy(b);
  data_loader_destroy(c);
  data_loader_destroy(d);
  data_close(f);
}

int main(void) {
  for (int i = 0; i < 1000; i++) seq[i] = (uint16_t)i, seq32[i] = (uint32_t)i;
  tmp_init("data");
  RUN(test_llmc_round_trip);
  RUN(test_llmc32_round_trip);
  RUN(test_raw_round_trip);
  RUN(test_widths_give_same_batches);
  RUN(test_errors);
  RUN(test_errors32);
  RUN(test_token_out_of_vocab);
  RUN(test_windows);
  RUN(test_sequential_batches);
  RUN(test_shuffled_batches);
  tmp_cleanup(test_failed_);
  return TEST_REPORT();
}
