/* Shared helpers for the C tests: every check prints where it failed and aborts the
 * whole job with a non-zero exit code, so a failure can never pass silently. */
#ifndef FH_TEST_COMMON_H
#define FH_TEST_COMMON_H
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

#define TEST_PASS(name)                                                        \
  do {                                                                         \
    if (fh_test_rank == 0) { printf("PASS %s\n", name); fflush(stdout); }       \
  } while (0)
#endif
