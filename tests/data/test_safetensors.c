/* safetensors (runtime/io/safetensors.c): write/read round trips, half and
 * bfloat16 conversion, and every header check with its message. */
#include <sys/stat.h>

#include "runtime/io/io.h"
#include "test.h"
#include "test_util.h"

static void test_round_trip(void) {
  float a[6] = {1, 2, 3, 4, 5, 6.5f};
  int32_t b[4] = {-1, 0, 7, 1 << 30};
  uint16_t c[2] = {0x3F80, 0xC000}; /* bf16 1.0, -2.0 */
  float s = 3.25f;
  /* Given unsorted; the file holds them sorted by name. */
  StEntry e[4] = {
      {.name = "zeta", .dtype = ST_F32, .rank = 2, .shape = {2, 3}, .data = a},
      {.name = "alpha", .dtype = ST_I32, .rank = 1, .shape = {4}, .data = b},
      {.name = "h.0.w", .dtype = ST_BF16, .rank = 1, .shape = {2}, .data = c},
      {.name = "scalar", .dtype = ST_F32, .rank = 0, .data = &s},
  };
  const char *meta[] = {"format", "pd2bw", "step", "1200"};
  const char *p = tmp_path("rt.safetensors");
  char err[IO_ERR_LEN];
  int before = tmp_count();
  EXPECT(st_write(p, e, 4, meta, 2, err, sizeof err));
  EXPECT_EQ_INT(tmp_count(), before + 1); /* no temp file left behind */
  SafeTensors *st = st_open(p, err, sizeof err);
  EXPECT(st != NULL);
  if (!st) {
    fprintf(stderr, "%s\n", err);
    return;
  }
  EXPECT_EQ_INT(st_count(st), 4);
  EXPECT_STREQ(st_tensor(st, 0)->name, "alpha");
  EXPECT_STREQ(st_tensor(st, 1)->name, "h.0.w");
  EXPECT_STREQ(st_tensor(st, 3)->name, "zeta");
  const StTensor *z = st_find(st, "zeta");
  EXPECT(z && z->dtype == ST_F32 && z->rank == 2 && z->shape[0] == 2 && z->shape[1] == 3);
  EXPECT(z && z->numel == 6 && z->nbytes == 24 && memcmp(z->data, a, 24) == 0);
  /* The data area starts 8-aligned (header padded), and the tensors follow in
   * name order: alpha (16 bytes), h.0.w (4), scalar (4), zeta. */
  const StTensor *al = st_find(st, "alpha");
  EXPECT(al && al->offset % 8 == 0 && memcmp(al->data, b, 16) == 0);
  EXPECT(z && al && z->offset == al->offset + 24);
  const StTensor *sc = st_find(st, "scalar");
  EXPECT(sc && sc->rank == 0 && sc->numel == 1);
  float f[6];
  EXPECT(sc && st_read_f32(st, sc, f, err, sizeof err) && f[0] == 3.25f);
  const StTensor *h = st_find(st, "h.0.w");
  EXPECT(h && st_read_f32(st, h, f, err, sizeof err) && f[0] == 1.0f && f[1] == -2.0f);
  EXPECT(!st_find(st, "missing"));
  EXPECT_STREQ(st_meta(st, "step"), "1200");
  EXPECT_STREQ(st_meta(st, "format"), "pd2bw");
  EXPECT(st_meta(st, "nope") == NULL);
  /* An integer tensor is not floats. */
  EXPECT(!st_read_f32(st, al, f, err, sizeof err));
  EXPECT_MSG(err, "rt.safetensors: tensor \"alpha\": dtype I32 cannot be read as float32");
  st_close(st);
  /* Overwriting an existing file replaces it whole. */
  EXPECT(st_write(p, e, 1, NULL, 0, err, sizeof err));
  st = st_open(p, err, sizeof err);
  EXPECT(st && st_count(st) == 1 && st_meta(st, "step") == NULL);
  st_close(st);
}

static void test_half(void) {
  /* F16: 1.0 = 0x3C00, -2.0 = 0xC000, 0.5 = 0x3800, 65504 = 0x7BFF (max),
   * 2^-24 = 0x0001 (smallest subnormal), -0 = 0x8000; inf = 0x7C00 and a BF16 NaN (0x7FC0)
   * are refused naming the tensor and the element (issue 24). */
  uint16_t h[6] = {0x3C00, 0xC000, 0x3800, 0x7BFF, 0x0001, 0x8000}, hi[3] = {0x3C00, 0x3C00, 0x7C00},
           hn[2] = {0x7FC0, 0};
  StEntry e[3] = {{.name = "h", .dtype = ST_F16, .rank = 1, .shape = {6}, .data = h},
                  {.name = "hi", .dtype = ST_F16, .rank = 1, .shape = {3}, .data = hi},
                  {.name = "hn", .dtype = ST_BF16, .rank = 1, .shape = {2}, .data = hn}};
  const char *p = tmp_path("half.safetensors");
  char err[IO_ERR_LEN];
  EXPECT(st_write(p, e, 3, NULL, 0, err, sizeof err));
  SafeTensors *st = st_open(p, err, sizeof err);
  float f[6] = {0};
  EXPECT(st && st_read_f32(st, st_find(st, "h"), f, err, sizeof err));
  EXPECT(f[0] == 1.0f && f[1] == -2.0f && f[2] == 0.5f && f[3] == 65504.0f);
  EXPECT(f[4] == ldexpf(1.0f, -24) && f[5] == 0.0f && signbit(f[5]));
  EXPECT(st && !st_read_f32(st, st_find(st, "hi"), f, err, sizeof err) &&
         strstr(err, "tensor \"hi\": element 2 is infinite"));
  EXPECT(st && !st_read_f32(st, st_find(st, "hn"), f, err, sizeof err) && strstr(err, "tensor \"hn\": element 0 is NaN"));
  st_close(st);
}

/* Writes u64 header length + header + `data` bytes of data. */
static void write_st(const char *path, uint64_t hlen_field, const char *header, size_t data) {
  size_t hl = strlen(header), n = 8 + hl + data;
  unsigned char *buf = calloc(1, n);
  memcpy(buf, &hlen_field, 8);
  memcpy(buf + 8, header, hl);
  write_bytes(path, buf, n);
  free(buf);
}

#define EXPECT_ST_FAILS(header, data, ...)             \
  do {                                                 \
    const char *p_ = tmp_path("bad.safetensors");      \
    write_st(p_, strlen(header), (header), (data));    \
    char err_[IO_ERR_LEN] = "";                        \
    SafeTensors *st_ = st_open(p_, err_, sizeof err_); \
    EXPECT(st_ == NULL);                               \
    st_close(st_);                                     \
    EXPECT_MSG(err_, "bad.safetensors", __VA_ARGS__);  \
  } while (0)

#define T(name, dtype, shape, b, e) \
  "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static void test_header_errors(void) {
  char err[IO_ERR_LEN];
  const char *p = tmp_path("bad.safetensors");
  /* A file too short to hold the length. */
  write_bytes(p, "abc", 3);
  EXPECT(st_open(p, err, sizeof err) == NULL);
  EXPECT_MSG(err, "bad.safetensors: 3 bytes: too short");
  /* Header length past EOF. */
  write_st(p, 1000, "{}", 0);
  EXPECT(st_open(p, err, sizeof err) == NULL);
  EXPECT_MSG(
      err,
      "bad.safetensors: offset 0: header length 1000 runs past the end of the file (10 bytes)");
  /* Malformed JSON: the offset is where the parser stopped, at header byte 14
   * where the ':' after "dtype" should be: 8 + 14 = 22. */
  EXPECT_ST_FAILS("{\"a\":{\"dtype\" \"F32\"}}", 0, "offset 22: malformed JSON");
  EXPECT_ST_FAILS("[1,2]", 0, "offset 8: the safetensors header must be a JSON object");
  EXPECT_ST_FAILS("{} x", 0, "offset 11: unexpected bytes after the header JSON");
  EXPECT_ST_FAILS("{" T("w", "F99", "[2]", 0, 8) "}", 8, "tensor \"w\": unknown dtype \"F99\"");
  EXPECT_ST_FAILS("{\"w\":{\"dtype\":\"F32\"}}", 8, "tensor \"w\": expected an object");
  EXPECT_ST_FAILS("{" T("w", "F32", "[2,-1]", 0, 8) "}", 8,
                  "tensor \"w\": shape dimension 1 is not a non-negative integer");
  EXPECT_ST_FAILS(
      "{" T("w", "F32", "[2,2]", 0, 12) "}", 16,
      "tensor \"w\": shape [2,2] of F32 needs 16 bytes but data_offsets [0, 12] hold 12");
  EXPECT_ST_FAILS("{" T("w", "F32", "[2]", 8, 0) "}", 16, "tensor \"w\": data_offsets must be");
  EXPECT_ST_FAILS("{" T("w", "F32", "[4]", 0, 16) "}", 12,
                  "tensor \"w\": data_offsets [0, 16] run past the data area (12 bytes");
  EXPECT_ST_FAILS("{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[2]", 4, 12) "}", 12,
                  "tensors \"a\" and \"b\" overlap (data_offsets [0, 8] and [4, 12])");
  /* One tensor inside another. */
  EXPECT_ST_FAILS("{" T("c", "F32", "[4]", 0, 16) "," T("a", "F32", "[1]", 0, 4) "}", 16,
                  "overlap");
  EXPECT_ST_FAILS("{" T("a", "F32", "[2]", 0, 8) "," T("a", "F32", "[2]", 8, 16) "}", 16,
                  "tensor \"a\" appears twice");
  EXPECT_ST_FAILS("{\"__metadata__\":{\"k\":1}}", 0,
                  "\"__metadata__\": value of \"k\" is not a string");
  /* Empty tensors may share an offset; adjacent tensors are fine. */
  write_st(p,
           strlen("{" T("e", "F32", "[0]", 4, 4) "," T("a", "F32", "[1]", 0, 4) "," T(
               "b", "U8", "[4]", 4, 8) "}"),
           "{" T("e", "F32", "[0]", 4, 4) "," T("a", "F32", "[1]", 0, 4) "," T("b", "U8", "[4]", 4,
                                                                               8) "}",
           8);
  SafeTensors *st = st_open(p, err, sizeof err);
  EXPECT(st && st_count(st) == 3);
  if (!st) fprintf(stderr, "%s\n", err);
  st_close(st);
  EXPECT(st_open(tmp_path("none"), err, sizeof err) == NULL);
  EXPECT_MSG(err, "none: cannot open checkpoint");
  /* a FIFO: refused at once, never waited on for a writer (issue 24) */
  EXPECT(mkfifo(tmp_path("fifo"), 0600) == 0);
  EXPECT(st_open(tmp_path("fifo"), err, sizeof err) == NULL);
  EXPECT_MSG(err, "fifo: cannot open checkpoint: a FIFO, not a regular file");
}

static void test_writer_errors(void) {
  float a[2] = {1, 2};
  StEntry e[2] = {{.name = "x", .dtype = ST_F32, .rank = 1, .shape = {2}, .data = a},
                  {.name = "x", .dtype = ST_F32, .rank = 1, .shape = {1}, .data = a}};
  char err[IO_ERR_LEN];
  int before = tmp_count();
  EXPECT(!st_write(tmp_path("w.safetensors"), e, 2, NULL, 0, err, sizeof err));
  EXPECT_MSG(err, "w.safetensors: tensor \"x\" given twice");
  e[1].name = "__metadata__";
  EXPECT(!st_write(tmp_path("w.safetensors"), e, 2, NULL, 0, err, sizeof err));
  EXPECT_MSG(err, "invalid name \"__metadata__\"");
  EXPECT_EQ_INT(tmp_count(), before); /* nothing written */
  EXPECT(!st_write(tmp_path("no/such/dir.safetensors"), e, 1, NULL, 0, err, sizeof err));
  EXPECT_MSG(err, "dir.safetensors: cannot create");
}

int main(void) {
  tmp_init("st");
  RUN(test_round_trip);
  RUN(test_half);
  RUN(test_header_errors);
  RUN(test_writer_errors);
  tmp_cleanup(test_failed_);
  return TEST_REPORT();
}
