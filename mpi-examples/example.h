/* example.h -- the set-up every example repeats, and nothing else.
 *
 *   CHECK(call)       a firehose call that must return FH_OK; otherwise the job fails
 *                     with the call, fh_strerror of its status and fh_last_error
 *   FAIL(...)         fail the job with a printf-style message (and fh_last_error,
 *                     when there is one)
 *   example_init      MPI_Init, this rank and the size of MPI_COMM_WORLD, and a
 *                     firehose context on it: fh_init(MPI_COMM_WORLD, NULL, &ctx)
 *   example_finalize  fh_finalize(ctx), then MPI_Finalize
 *
 * A failure prints "[rank R] FAILED at file:line: ..." and ends every rank with
 * MPI_Abort(MPI_COMM_WORLD, 1), so the job exits non-zero. */
#ifndef FH_EXAMPLE_H
#define FH_EXAMPLE_H
#include <mpi.h>
#include <stdio.h>
#include "firehose.h"

/* This process's rank in MPI_COMM_WORLD; -1 before MPI_Init or after MPI_Finalize. */
static inline int example_rank(void) {
  int up = 0, down = 1, r = -1;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (up && !down) MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

#define FAIL(...)                                                                   \
  do {                                                                              \
    char m_[512];                                                                   \
    int r_ = example_rank();                                                        \
    fh_last_error(m_, sizeof m_);                                                   \
    fprintf(stderr, "[rank %d] FAILED at %s:%d: ", r_, __FILE__, __LINE__);         \
    fprintf(stderr, __VA_ARGS__);                                                   \
    fprintf(stderr, "\n");                                                          \
    if (m_[0]) fprintf(stderr, "[rank %d]   (firehose last error: %s)\n", r_, m_); \
    fflush(stderr);                                                                 \
    MPI_Abort(MPI_COMM_WORLD, 1);                                                   \
  } while (0)

#define CHECK(call)                                                                 \
  do {                                                                              \
    int rc_ = (call);                                                               \
    if (rc_ != FH_OK) FAIL("%s failed: %s", #call, fh_strerror(rc_));               \
  } while (0)

static inline fh_ctx_t *example_init(int *argc, char ***argv, int *rank, int *size) {
  MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
  fh_ctx_t *ctx = NULL;
  CHECK(fh_init(MPI_COMM_WORLD, NULL, &ctx));
  return ctx;
}

static inline void example_finalize(fh_ctx_t *ctx) {
  CHECK(fh_finalize(ctx));
  MPI_Finalize();
}
#endif
