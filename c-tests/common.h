/* Shared helpers for the C tests: every check prints where it failed and aborts the
 * whole job with a non-zero exit code, so a failure can never pass silently. */
#ifndef FH_TEST_COMMON_H
#define FH_TEST_COMMON_H
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "firehose.h"

static int fh_test_rank = -1;

#define FAILF(...)                                                             \
  do {                                                                         \
    char fh_msg_[512];                                                         \
    fh_last_error(fh_msg_, sizeof fh_msg_);                                    \
    fprintf(stderr, "[rank %d] FAIL %s:%d: ", fh_test_rank, __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__);                                              \
    fprintf(stderr, "\n[rank %d]   last error: %s\n", fh_test_rank, fh_msg_);  \
    fflush(stderr);                                                            \
    MPI_Abort(MPI_COMM_WORLD, 1);                                              \
  } while (0)

/* CHECK_RC(call, expected status) */
#define CHECK_RC(call, want)                                                   \
  do {                                                                         \
    int rc_ = (call);                                                          \
    if (rc_ != (want))                                                         \
      FAILF("%s returned %d (%s), expected %d", #call, rc_, fh_strerror(rc_), (int)(want)); \
  } while (0)
#define CHECK_OK(call) CHECK_RC(call, FH_OK)
#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "[rank %d] check '%s' failed\n", fh_test_rank, #cond);   \
      FAILF(__VA_ARGS__);                                                      \
    }                                                                          \
  } while (0)

/* Checks inside AM handlers: a handler records the first problem it sees (it may not
 * abort the job from inside a library call); CHECK_HANDLERS() fails the test with it. */
__attribute__((unused)) static int hcheck_nerr;
__attribute__((unused)) static char hcheck_msg[512];
#define HCHECK(cond, ...)                                                               \
  do {                                                                                  \
    if (!(cond) && hcheck_nerr++ == 0) snprintf(hcheck_msg, sizeof hcheck_msg, __VA_ARGS__); \
  } while (0)
#define CHECK_HANDLERS() CHECK(hcheck_nerr == 0, "%d handler check(s) failed, first: %s", hcheck_nerr, hcheck_msg)

/* Exchange one pointer per rank. */
static inline void exchange_ptrs(void *mine, void **all, MPI_Comm comm) {
  uint64_t m = (uint64_t)(uintptr_t)mine;
  int n;
  MPI_Comm_size(comm, &n);
  uint64_t *tmp = malloc(sizeof(uint64_t) * (size_t)n);
  MPI_Allgather(&m, 1, MPI_UINT64_T, tmp, 1, MPI_UINT64_T, comm);
  for (int i = 0; i < n; i++) all[i] = (void *)(uintptr_t)tmp[i];
  free(tmp);
}

/* Seconds on a monotonic clock (MPI_Wtime may be a different clock per rank). */
static inline double fh_test_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Deterministic pseudo-random numbers (xorshift64*). */
static inline uint64_t rng_next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
  *s = x;
  return x * 2685821657736338717ULL;
}

/* What the process writes to descriptor `which` (1: stdout, 2: stderr) between
 * fh_test_capture_begin and fh_test_capture_end, which returns it as a string
 * (the caller frees it). */
typedef struct {
  int which, saved, fd;
  char path[32];
} fh_test_capture_t;

static inline void fh_test_capture_begin(fh_test_capture_t *c, int which) {
  strcpy(c->path, "/tmp/fh_capture_XXXXXX");
  c->which = which;
  c->fd = mkstemp(c->path);
  CHECK(c->fd >= 0, "mkstemp");
  fflush(which == 1 ? stdout : stderr);
  c->saved = dup(which);
  dup2(c->fd, which);
}

static inline char *fh_test_capture_end(fh_test_capture_t *c) {
  fflush(c->which == 1 ? stdout : stderr);
  dup2(c->saved, c->which);
  close(c->saved);
  off_t n = lseek(c->fd, 0, SEEK_END);
  char *s = calloc(1, (size_t)n + 1);
  CHECK(pread(c->fd, s, (size_t)n, 0) == (ssize_t)n, "read back captured output");
  close(c->fd);
  unlink(c->path);
  return s;
}

/* fh_config_print's output as a string (the caller frees it). */
static inline char *fh_test_config_text(const fh_ctx_t *c, int *rc) {
  fh_test_capture_t cap;
  fh_test_capture_begin(&cap, 1);
  *rc = fh_config_print(c);
  return fh_test_capture_end(&cap);
}

/* The usual start, after MPI_Init: a context on MPI_COMM_WORLD with the default
 * configuration (the test fails if fh_init does); *me and *np (either may be NULL)
 * get its rank and size, fh_test_rank the rank for the failure messages. */
static inline fh_ctx_t *fh_test_init(int *me, int *np) {
  fh_ctx_t *ctx = NULL;
  CHECK_OK(fh_init(MPI_COMM_WORLD, NULL, &ctx));
  int r = fh_rank(ctx);
  if (me) *me = r;
  if (np) *np = fh_size(ctx);
  fh_test_rank = r;
  return ctx;
}

/* A 64-bit mixing hash (splitmix64's finaliser): test data as a function of a key. */
static inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

/* ---- Phases and a watchdog ----
 * watchdog_init(ctx, width) once; then begin_phase(name, secs) ... end_phase() around
 * each phase. Both enter fh_barrier(ctx); begin_phase arms alarm(secs), end_phase
 * disarms it and, when width > 0, rank 0 prints the phase's name (padded to width)
 * and time. If the alarm fires, the rank prints
 *   [rank R] TIMEOUT: phase 'NAME' hangs
 * followed by " (iteration I, STEP)" while fh_test_iter >= 0 (a test may set
 * fh_test_iter and fh_test_step inside a phase; begin_phase resets them), and
 * exits with status 3. set_phase renames the current phase (no barrier, the alarm
 * keeps running); names are copied, so a reused buffer is fine. */
static fh_ctx_t *fh_test_wd_ctx;
static int fh_test_wd_width;
static double fh_test_wd_t0;
static char fh_test_phase_buf[2][128]; /* set_phase fills the one not in use */
static const char *volatile fh_test_phase = "init";
static volatile int fh_test_iter = -1;
static const char *volatile fh_test_step = "";

static inline void fh_test_on_alarm(int sig) {
  (void)sig;
  char buf[400];
  int n = fh_test_iter >= 0
              ? snprintf(buf, sizeof buf, "[rank %d] TIMEOUT: phase '%s' hangs (iteration %d, %s)\n",
                         fh_test_rank, fh_test_phase, fh_test_iter, fh_test_step)
              : snprintf(buf, sizeof buf, "[rank %d] TIMEOUT: phase '%s' hangs\n", fh_test_rank,
                         fh_test_phase);
  if (n > 0) (void)!write(2, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
  _exit(3);
}
static inline void watchdog_init(fh_ctx_t *ctx, int width) {
  fh_test_wd_ctx = ctx;
  fh_test_wd_width = width;
  signal(SIGALRM, fh_test_on_alarm);
}
static inline void set_phase(const char *name) {
  char *b = fh_test_phase_buf[fh_test_phase == fh_test_phase_buf[0]];
  snprintf(b, sizeof fh_test_phase_buf[0], "%s", name);
  fh_test_phase = b;
}
static inline void begin_phase(const char *name, unsigned secs) {
  CHECK_OK(fh_barrier(fh_test_wd_ctx));
  set_phase(name);
  fh_test_iter = -1;
  fh_test_step = "";
  alarm(secs);
  fh_test_wd_t0 = MPI_Wtime();
}
static inline void end_phase(void) {
  CHECK_OK(fh_barrier(fh_test_wd_ctx));
  alarm(0);
  if (fh_test_wd_width > 0 && fh_test_rank == 0) {
    printf("  %-*s %6.2f s\n", fh_test_wd_width, fh_test_phase, MPI_Wtime() - fh_test_wd_t0);
    fflush(stdout);
  }
}

#define TEST_PASS(name)                                                        \
  do {                                                                         \
    if (fh_test_rank == 0) { printf("PASS %s\n", name); fflush(stdout); }       \
  } while (0)
#endif
