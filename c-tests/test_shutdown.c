/* Orderly shutdown (issue 14): what happens when a rank finalizes while others still
 * wait for it. Each case runs on its own context (a duplicate of MPI_COMM_WORLD);
 * ranks 0 and 1 play the parts, other ranks only finalize. Cases:
 *  A. rank 1 waits in rpipe_rread for rank 0, which calls fh_finalize instead of
 *     writing: the read returns FH_ERR_STATE naming rank 0, and both finalize.
 *  B. rank 1 (and every rank but 0) waits in fh_barrier, rank 0 calls fh_finalize:
 *     the barriers return FH_ERR_STATE.
 *  C. rank 1 waits for a lock rank 0 holds; rank 0 finalizes holding it: the
 *     acquire returns FH_ERR_STATE.
 *  D. rank 1 sends rank 0 an AM request and waits for the reply while rank 0 is
 *     already in fh_finalize: the reply comes (fh_finalize serves handlers).
 *  E. the home calls fh_lock_destroy while rank 1 holds the lock: rank 1's own
 *     destroy is refused while it holds the lock, it releases and destroys, and
 *     the home's destroy succeeds (every rank released before its own call);
 *     every later call on the handle is FH_ERR_STATE.
 *  F. the communicator a context was made from is freed: the context still works.
 *  G. MPI_Finalize before fh_finalize: MPI_Finalize finalizes the live contexts, and
 *     fh_finalize afterwards returns FH_OK (other calls FH_ERR_STATE).
 * Every wait is bounded by the test's clock and by the run's timeout. */
#include "common.h"

static int me, np;

static fh_ctx_t *new_ctx(MPI_Comm *dup) {
  MPI_Comm_dup(MPI_COMM_WORLD, dup);
  fh_ctx_t *c;
  CHECK_OK(fh_init(*dup, NULL, &c));
  return c;
}

static void expect_state(int rc, const char *what, const char *needle) {
  if (rc != FH_ERR_STATE) FAILF("%s returned %d (%s), expected FH_ERR_STATE", what, rc, fh_strerror(rc));
  char msg[1024];
  fh_last_error(msg, sizeof msg);
  CHECK(strstr(msg, needle) != NULL, "%s: message lacks '%s': %s", what, needle, msg);
}

static int replied;
static void on_req(fh_token_t *t, void *b, size_t n, const uint64_t *a, size_t na, void *u) {
  (void)b; (void)n; (void)na; (void)u;
  uint64_t v = a[0] + 1;
  fh_am_reply_short(t, 201, &v, 1);
}
static void on_rep(fh_token_t *t, void *b, size_t n, const uint64_t *a, size_t na, void *u) {
  (void)t; (void)b; (void)n; (void)na; (void)u;
  replied = (int)a[0];
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  fh_test_rank = me;
  MPI_Comm dup;

  /* A. */
  fh_ctx_t *c = new_ctx(&dup);
  rpipe_t *p = NULL;
  if (me < 2) CHECK_OK(rpipe_open(c, 1 - me, me == 0 ? RPIPE_WRITER : RPIPE_READER, 4096, RPIPE_HALF_DUPLEX,
                                  RPIPE_NEXT_FIT, &p));
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 1) {
    rpipe_addr_t a;
    size_t len;
    double t0 = fh_test_now();
    expect_state(rpipe_rread(p, &a, &len), "A. rpipe_rread while the writer finalized", "rank 0");
    CHECK(fh_test_now() - t0 < 30, "A. took %.1f s", fh_test_now() - t0);
  }
  CHECK_OK(fh_finalize(c));
  MPI_Comm_free(&dup);
  MPI_Barrier(MPI_COMM_WORLD);

  /* B. */
  c = new_ctx(&dup);
  MPI_Barrier(MPI_COMM_WORLD);
  if (me != 0) expect_state(fh_barrier(c), "B. fh_barrier while rank 0 finalized", "fh_finalize");
  CHECK_OK(fh_finalize(c));
  MPI_Comm_free(&dup);
  MPI_Barrier(MPI_COMM_WORLD);

  /* C. */
  c = new_ctx(&dup);
  fh_lock_t *l;
  CHECK_OK(fh_lock_create(c, 0, &l));
  if (me == 0) CHECK_OK(fh_lock_acquire(l));
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 1) expect_state(fh_lock_acquire(l), "C. fh_lock_acquire while the holder finalized", "rank 0");
  CHECK_OK(fh_finalize(c));
  MPI_Comm_free(&dup);
  MPI_Barrier(MPI_COMM_WORLD);

  /* D. */
  c = new_ctx(&dup);
  CHECK_OK(fh_am_register(c, 200, on_req, NULL));
  CHECK_OK(fh_am_register(c, 201, on_rep, NULL));
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 1) {
    struct timespec d = {0, 50 * 1000 * 1000}; /* rank 0 is in fh_finalize by now */
    nanosleep(&d, NULL);
    uint64_t v = 41;
    CHECK_OK(fh_am_request_short(c, 0, 200, &v, 1));
    double t0 = fh_test_now();
    while (replied != 42) {
      CHECK_OK(fh_poll(c));
      CHECK(fh_test_now() - t0 < 30, "D. no reply from a finalizing rank");
    }
  }
  CHECK_OK(fh_finalize(c));
  MPI_Comm_free(&dup);
  MPI_Barrier(MPI_COMM_WORLD);

  /* E. */
  c = new_ctx(&dup);
  CHECK_OK(fh_lock_create(c, 0, &l));
  if (me == 1) CHECK_OK(fh_lock_acquire(l));
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 1) {
    expect_state(fh_lock_destroy(l), "E. destroy while holding", "holds");
    /* Release only once the home is inside its destroy: a correct program (every
     * rank releases before its own destroy), so the home's destroy succeeds. */
    MPI_Recv(NULL, 0, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    struct timespec d = {0, 200 * 1000 * 1000};
    nanosleep(&d, NULL);
    CHECK_OK(fh_lock_release(l));
    CHECK_OK(fh_lock_destroy(l));
  } else if (me == 0) {
    MPI_Send(NULL, 0, MPI_BYTE, 1, 7, MPI_COMM_WORLD);
    CHECK_OK(fh_lock_destroy(l)); /* called while rank 1 held the lock */
  } else {
    CHECK_OK(fh_lock_destroy(l));
  }
  CHECK_RC(fh_lock_release(l), FH_ERR_STATE);
  CHECK_RC(fh_lock_acquire(l), FH_ERR_STATE);
  CHECK_OK(fh_finalize(c));
  MPI_Comm_free(&dup);
  MPI_Barrier(MPI_COMM_WORLD);

  /* F. */
  c = new_ctx(&dup);
  MPI_Comm_free(&dup);
  uint64_t *h = fh_malloc(c, 64);
  void *all[64];
  CHECK(np <= 64, "np");
  exchange_ptrs(h, all, MPI_COMM_WORLD);
  uint64_t v = 5 + (uint64_t)me;
  CHECK_OK(fh_put(c, (me + 1) % np, all[(me + 1) % np], &v, 8));
  CHECK_OK(fh_barrier(c));
  CHECK(h[0] == 5 + (uint64_t)((me + np - 1) % np), "F. put after the communicator was freed");
  int64_t x = 1, sum = 0;
  CHECK_OK(fh_allreduce(c, &x, &sum, 1, FH_INT64, FH_SUM));
  CHECK(sum == np, "F. allreduce");
  CHECK_OK(fh_finalize(c));
  MPI_Barrier(MPI_COMM_WORLD);

  /* G. */
  fh_ctx_t *c1 = new_ctx(&dup), *c2;
  MPI_Comm dup2;
  c2 = new_ctx(&dup2);
  CHECK_OK(fh_barrier(c2));
  if (me == 0) { printf("PASS test_shutdown (A-F; G: MPI_Finalize first)\n"); fflush(stdout); }
  MPI_Finalize();
  CHECK_RC(fh_rank(c1), FH_ERR_STATE);
  if (fh_finalize(c1) != FH_OK || fh_finalize(c2) != FH_OK) {
    fprintf(stderr, "[rank %d] G. fh_finalize after MPI_Finalize failed\n", me);
    return 1;
  }
  return 0;
}
