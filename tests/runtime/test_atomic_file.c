/* tests/runtime/test_atomic_file.c — runtime/io/atomic_file.c: what every output file
 * of pd2bw (checkpoints, traces, profiles, token files) goes through.
 *
 * - a symlink is written through: its final target is replaced, the link stays;
 * - a FIFO, socket, directory or device is refused and left as it was (never
 *   opened: a FIFO would block, and as root a rename would replace a device node);
 * - a write error (here EFBIG from RLIMIT_FSIZE) is reported with its cause and
 *   leaves no temporary;
 * - SIGINT, SIGTERM and abort() during a write remove the temporary, and a handler
 *   the program installed itself still gets its signal;
 * - stale temporaries of dead processes (exactly PATH.tmp.<pid>) are removed, and
 *   nothing else.
 * Devices are made with mknod inside the scratch directory (as root), never /dev's. */
#define _GNU_SOURCE
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/io/io.h"
#include "test.h"

static char dir[256];

static const char *at(const char *name) {
  static char buf[8][512];
  static int k;
  char *b = buf[k++ % 8];
  snprintf(b, sizeof buf[0], "%s/%s", dir, name);
  return b;
}

static char *slurp(const char *path) {
  char err[IO_ERR_LEN];
  size_t n;
  return io_read_all(path, &n, err, sizeof err);
}

static bool is_link(const char *p) {
  struct stat st;
  return lstat(p, &st) == 0 && S_ISLNK(st.st_mode);
}

static mode_t kind(const char *p) {
  struct stat st;
  return lstat(p, &st) == 0 ? (st.st_mode & S_IFMT) : 0;
}

/* Names in dir that start with prefix. */
static int count_prefix(const char *prefix) {
  int n = 0;
  DIR *d = opendir(dir);
  if (!d) return -1;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
  closedir(d);
  return n;
}

static pid_t dead_pid(void) {
  pid_t p = fork();
  if (p == 0) _exit(0);
  int st;
  waitpid(p, &st, 0);
  return p;
}

static void test_symlink_written_through(void) {
  char err[IO_ERR_LEN];
  EXPECT(atomic_write_text(at("real.txt"), "old", err, sizeof err));
  EXPECT(mkdir(at("sub"), 0755) == 0);
  EXPECT(symlink("../real.txt", at("sub/link")) == 0); /* relative to the link's own directory */
  EXPECT(symlink("sub/link", at("chain")) == 0);       /* a link to a link */
  bool ok = atomic_write_text(at("chain"), "new", err, sizeof err);
  if (!ok) fprintf(stderr, "  %s\n", err);
  EXPECT(ok);
  EXPECT(is_link(at("chain")));
  EXPECT(is_link(at("sub/link")));
  char *s = slurp(at("real.txt"));
  EXPECT_STREQ(s, "new");
  free(s);
  EXPECT_EQ_INT(count_prefix("sub"), 1); /* no temporary beside the links */
  EXPECT_EQ_INT(count_prefix("real.txt"), 1);
  /* a dangling link: the file it names is created, as `>` in a shell does */
  EXPECT(symlink("made.txt", at("dangling")) == 0);
  EXPECT(atomic_write_text(at("dangling"), "made", err, sizeof err));
  EXPECT(is_link(at("dangling")));
  s = slurp(at("made.txt"));
  EXPECT_STREQ(s, "made");
  free(s);
  /* the mode of a replaced file is kept (a private checkpoint stays private) */
  EXPECT(chmod(at("real.txt"), 0600) == 0);
  EXPECT(atomic_write_text(at("real.txt"), "again", err, sizeof err));
  struct stat st;
  EXPECT(stat(at("real.txt"), &st) == 0 && (st.st_mode & 0777) == 0600);
}

/* atomic_write_text(path) must fail naming what_ and leave path a `want` */
static void expect_refused(const char *path, mode_t want, const char *what) {
  char err[IO_ERR_LEN] = "";
  EXPECT(!atomic_write_text(path, "x", err, sizeof err));
  if (!strstr(err, what)) fprintf(stderr, "  %s: message '%s' lacks '%s'\n", path, err, what);
  EXPECT(strstr(err, what) != NULL);
  EXPECT_EQ_INT(kind(path), want);
}

static void test_special_files_refused(void) {
  EXPECT(mkfifo(at("fifo"), 0644) == 0);
  expect_refused(at("fifo"), S_IFIFO, "FIFO");
  EXPECT(symlink("fifo", at("to-fifo")) == 0);
  expect_refused(at("to-fifo"), S_IFLNK, "FIFO");
  EXPECT_EQ_INT(kind(at("fifo")), S_IFIFO);
  EXPECT(mkdir(at("adir"), 0755) == 0);
  expect_refused(at("adir"), S_IFDIR, "directory");
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", at("sock"));
  EXPECT(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
  expect_refused(at("sock"), S_IFSOCK, "socket");
  close(fd);
  /* a character device: /dev/null's numbers, made here (as root only) */
  if (mknod(at("null"), S_IFCHR | 0666, makedev(1, 3)) == 0) {
    expect_refused(at("null"), S_IFCHR, "character device");
    EXPECT(symlink("null", at("to-null")) == 0);
    expect_refused(at("to-null"), S_IFLNK, "character device");
  } else {
    fprintf(stderr, "  (not root: no character device made; the FIFO and socket stand in)\n");
  }
  EXPECT_EQ_INT(count_prefix("fifo.tmp"), 0);
  EXPECT_EQ_INT(count_prefix("null.tmp"), 0);
}

/* Run fn in a child; its exit status. */
static int in_child(void (*fn)(void)) {
  fflush(NULL);
  pid_t p = fork();
  if (p == 0) {
    int before = test_failed_checks_; /* failures of earlier tests are not this one's */
    fn();
    _exit(test_failed_checks_ != before ? 1 : 0);
  }
  int st;
  waitpid(p, &st, 0);
  return st;
}

static void write_too_large(void) {
  struct rlimit rl = {.rlim_cur = 4096, .rlim_max = 4096};
  EXPECT(setrlimit(RLIMIT_FSIZE, &rl) == 0);
  signal(SIGXFSZ, SIG_IGN); /* writes past the limit fail with EFBIG instead */
  size_t n = 1 << 16;
  char *big = malloc(n + 1);
  memset(big, 'a', n);
  big[n] = 0;
  char err[IO_ERR_LEN] = "";
  EXPECT(!atomic_write_text(at("big.txt"), big, err, sizeof err));
  EXPECT(strstr(err, "big.txt") != NULL);
  EXPECT(strstr(err, strerror(EFBIG)) != NULL);
  free(big);
}

static void test_write_error_reported(void) {
  int st = in_child(write_too_large);
  EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  EXPECT_EQ_INT(count_prefix("big.txt"), 0); /* neither the file nor its temporary */
}

static int sig_to_send;
static volatile sig_atomic_t own_handler_ran;
static void own_handler(int sig) { own_handler_ran = sig; }

/* Killed by sig_to_send halfway through writing sig.bin. */
static void killed_mid_write(void) {
  char err[IO_ERR_LEN];
  AtomicFile af;
  if (!atomic_open(&af, at("sig.bin"), err, sizeof err)) _exit(3);
  atomic_write(&af, "half", 4);
  fflush(af.f);
  if (sig_to_send == SIGABRT) abort();
  raise(sig_to_send);
  _exit(4); /* not reached: the signal's default action ends the process */
}

/* The program's own SIGTERM handler stays in charge: the write completes. */
static void handled_mid_write(void) {
  struct sigaction sa = {.sa_handler = own_handler};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  char err[IO_ERR_LEN];
  AtomicFile af;
  if (!atomic_open(&af, at("own.bin"), err, sizeof err)) _exit(3);
  atomic_write(&af, "whole", 5);
  raise(SIGTERM);
  EXPECT(own_handler_ran == SIGTERM);
  EXPECT(atomic_commit(&af, err, sizeof err));
  struct sigaction now;
  sigaction(SIGTERM, NULL, &now);
  EXPECT(now.sa_handler == own_handler); /* given back after the write */
}

static void test_signal_removes_temporary(void) {
  int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGABRT};
  for (int k = 0; k < 4; k++) {
    sig_to_send = sigs[k];
    int st = in_child(killed_mid_write);
    EXPECT(WIFSIGNALED(st) && WTERMSIG(st) == sigs[k]);
    int left = count_prefix("sig.bin");
    if (left) fprintf(stderr, "  %s left %d file(s) behind\n", strsignal(sigs[k]), left);
    EXPECT_EQ_INT(left, 0);
  }
  int st = in_child(handled_mid_write);
  EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  char *s = slurp(at("own.bin"));
  EXPECT_STREQ(s, "whole");
  free(s);
  EXPECT_EQ_INT(count_prefix("own.bin"), 1);
}

static void touch(const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  EXPECT(fd >= 0);
  if (fd >= 0) close(fd);
}

static void test_stale_temporaries_removed(void) {
  char err[IO_ERR_LEN], name[128];
  pid_t dead = dead_pid(), dead2 = dead_pid();
  EXPECT(mkdir(at("st"), 0755) == 0);
  snprintf(name, sizeof name, "st/ck.tmp.%ld", (long)dead);
  char stale[512];
  snprintf(stale, sizeof stale, "%s", at(name));
  touch(stale);
  /* not ours or not stale: all kept */
  const char *keep[] = {"st/ck.tmp.1", "st/ck.tmp.0", "st/ck.tmp.abc", "st/ck.tmp.", "st/ck.tmpx.123"};
  for (int k = 0; k < 5; k++) touch(at(keep[k]));
  char junk[128], other[128], zero[128], sub[128];
  snprintf(junk, sizeof junk, "st/ck.tmp.%ldx", (long)dead);
  snprintf(other, sizeof other, "st/other.tmp.%ld", (long)dead);
  snprintf(zero, sizeof zero, "st/ck.tmp.0%ld", (long)dead);
  snprintf(sub, sizeof sub, "st/ck.tmp.%ld", (long)dead2);
  touch(at(junk));
  touch(at(other));
  touch(at(zero));
  EXPECT(mkdir(at(sub), 0755) == 0); /* a directory of that name is not our file */
  EXPECT(symlink("st/ck", at("ck-link")) == 0);
  EXPECT(atomic_write_text(at("ck-link"), "ck", err, sizeof err)); /* through a link: the target's siblings */
  EXPECT(access(stale, F_OK) != 0);
  for (int k = 0; k < 5; k++) EXPECT(access(at(keep[k]), F_OK) == 0);
  EXPECT(access(at(junk), F_OK) == 0);
  EXPECT(access(at(other), F_OK) == 0);
  EXPECT(access(at(zero), F_OK) == 0);
  EXPECT_EQ_INT(kind(at(sub)), S_IFDIR);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/pd2bw-atomic-XXXXXX");
  if (!mkdtemp(dir)) return 1;
  RUN(test_symlink_written_through);
  RUN(test_special_files_refused);
  RUN(test_write_error_reported);
  RUN(test_signal_removes_temporary);
  RUN(test_stale_temporaries_removed);
  if (!test_failed_) nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS); /* kept when something failed */
  return TEST_REPORT();
}
