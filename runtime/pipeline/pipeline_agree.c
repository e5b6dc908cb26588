/* runtime/pipeline/pipeline_agree.c — the ranks of an MPI run agree on what they train
 * before the first step (issue 24): each rank describes its run (the plan, the data
 * files, the checkpoint it starts from, the seed, the steps and the flags that change
 * what is trained) as a list of fields and sends it to rank 0, which compares every
 * rank's with its own; a difference stops every rank with rank 0's one message naming
 * the rank, the field and both values (transport_agree). Without it ranks started with
 * another plan, --data or --seed trained silently to other losses, and another
 * schedule or --steps ended in a timeout. */
#include "runtime/pipeline/pipeline_rank.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define AGREE_BYTES 4096 /* one rank's description, NUL-terminated lines "field\tkey\tshown" */

/* A file's size and a hash of a sample of it (its first and last 64 KiB and 64
 * pieces of 4 KiB spread between): enough to tell another file from this one
 * without reading a large token file whole on every rank. */
static void file_key(const char *path, bool whole, char *key, size_t n) {
  char why[IO_ERR_LEN];
  struct stat sb;
  int fd = io_open_regular(path, &sb, why, sizeof why);
  if (fd < 0) {
    snprintf(key, n, "unreadable");
    return;
  }
  uint64_t h = CONTRACT_FNV_BASIS, size = (uint64_t)sb.st_size;
  enum { CHUNK = 4096, EDGE = 16 * CHUNK };
  char *buf = pd_malloc(EDGE);
  if (whole) {
    ssize_t r;
    for (uint64_t off = 0; (r = pread(fd, buf, EDGE, (off_t)off)) > 0; off += (uint64_t)r) h = contract_fnv1a(h, buf, (size_t)r);
  } else {
    uint64_t at[66];
    int nat = 0;
    at[nat++] = 0;
    at[nat++] = size > EDGE ? size - EDGE : 0;
    for (int k = 1; k <= 64 && size > 2 * EDGE; k++) at[nat++] = size / 65 * (uint64_t)k;
    for (int k = 0; k < nat; k++) {
      ssize_t r = pread(fd, buf, k < 2 ? EDGE : CHUNK, (off_t)at[k]);
      if (r > 0) h = contract_fnv1a(h, buf, (size_t)r);
    }
  }
  free(buf);
  close(fd);
  snprintf(key, n, "%llu bytes, sample hash %016llx", (unsigned long long)size, (unsigned long long)h);
}

static void add(char *d, size_t *len, const char *field, const char *key, const char *shown) {
  int w = snprintf(d + *len, AGREE_BYTES - *len, "%s\t%s\t%s\n", field, key, shown);
  if (w > 0 && *len + (size_t)w < AGREE_BYTES) *len += (size_t)w;
}

static void add_file(char *d, size_t *len, const char *field, const char *path, bool whole) {
  char key[128], shown[640];
  if (!path) {
    add(d, len, field, "none", "none");
    return;
  }
  file_key(path, whole, key, sizeof key);
  snprintf(shown, sizeof shown, "%s (%s)", path, key);
  add(d, len, field, key, shown); /* the path itself may differ between hosts */
}

static void add_num(char *d, size_t *len, const char *field, long long v) {
  char s[32];
  snprintf(s, sizeof s, "%lld", v);
  add(d, len, field, s, s);
}

/* This rank's description of its run. */
static void describe(const char *plan_dir, const PipePlan *p, const PipeOptions *o, char *d) {
  size_t len = 0;
  char s[128], path[4096];
  memset(d, 0, AGREE_BYTES);
  snprintf(s, sizeof s, "%s, %d stages x %d replicas, %lld microbatches of %lld", plan_schedule_name(p->schedule), p->d,
           p->w, (long long)p->m, (long long)p->b);
  add(d, &len, "the plan's schedule", s, s);
  snprintf(path, sizeof path, "%s/plan.json", plan_dir);
  add_file(d, &len, "the plan (plan.json)", path, true);
  add_file(d, &len, "--data", o->data_path, false);
  add_file(d, &len, "--val-data", o->val_path, false);
  add_file(d, &len, "--resume", o->resume_path, true);
  add_file(d, &len, "--init", o->init_path, true);
  snprintf(s, sizeof s, "%llu", (unsigned long long)o->seed);
  add(d, &len, "the seed (--seed, else the checkpoint's or the plan's)", s, s);
  add_num(d, &len, "--steps", (long long)o->steps);
  add_num(d, &len, "--eval-every", (long long)o->eval_every);
  add_num(d, &len, "--eval-batches", (long long)o->eval_batches);
  add(d, &len, "--shuffle", o->shuffle ? "on" : "off", o->shuffle ? "on" : "off");
  add(d, &len, "--trace", o->trace_path ? "on" : "off", o->trace_path ? "on" : "off");
  add(d, &len, "--profile-out", o->profile_out ? "on" : "off", o->profile_out ? "on" : "off");
}

/* The first field where rank r's description b differs from rank 0's a: the message. */
static bool same(const char *a, const char *b, int r, char *err, size_t errlen) {
  while (*a || *b) {
    const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
    if (!ea || !eb) break;
    const char *ka = strchr(a, '\t'), *kb = strchr(b, '\t');
    const char *sa = ka ? strchr(ka + 1, '\t') : NULL, *sb = kb ? strchr(kb + 1, '\t') : NULL;
    if (!sa || !sb || sa > ea || sb > eb) break;
    if (sa - a != sb - b || memcmp(a, b, (size_t)(sa - a)) != 0) {
      snprintf(err, errlen, "rank %d does not agree with rank 0 on %.*s: rank 0 has %.*s, rank %d %.*s", r,
               (int)(ka - a), a, (int)(ea - sa - 1), sa + 1, r, (int)(eb - sb - 1), sb + 1);
      return false;
    }
    a = ea + 1;
    b = eb + 1;
  }
  if (!*a && !*b) return true;
  snprintf(err, errlen, "rank %d does not agree with rank 0 on what to train (a description that does not parse)", r);
  return false;
}

bool pipe_ranks_agree(const char *plan_dir, const PipePlan *p, const PipeOptions *o, Transport *t, char *err,
                      size_t errlen, bool *together) {
  char *mine = pd_malloc(AGREE_BYTES), *theirs = pd_malloc(AGREE_BYTES);
  describe(plan_dir, p, o, mine);
  bool ok = true;
  TransportStatus s = TRANSPORT_OK;
  err[0] = 0;
  if (transport_rank(t) != 0) {
    s = transport_send(t, 0, PIPE_TAG_AGREE, mine, AGREE_BYTES, "this rank's description of the run");
  } else {
    for (int r = 1; r < transport_size(t) && s == TRANSPORT_OK; r++) {
      s = transport_recv(t, r, PIPE_TAG_AGREE, theirs, AGREE_BYTES, "a rank's description of the run");
      theirs[AGREE_BYTES - 1] = 0;
      if (s == TRANSPORT_OK && ok) ok = same(mine, theirs, r, err, errlen);
    }
  }
  free(mine);
  free(theirs);
  if (s != TRANSPORT_OK) {
    *together = false;
    snprintf(err, errlen, "%s", transport_error(t));
    return false;
  }
  return transport_agree(t, ok, err, errlen, together);
}
