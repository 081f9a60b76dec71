/* Collectives called with arguments that do not match across ranks (issue 14): the
 * ranks the data of the call reaches get FH_ERR_INVALID_ARG naming both argument
 * sets, nobody hangs, and the next collective works. Only MPI_Barrier separates the
 * cases. What each case checks:
 *  - allreduce with different counts, types or ops, and one rank passing a NULL
 *    buffer: every rank gets FH_ERR_INVALID_ARG (the failure reaches everyone);
 *    also counts on both sides of a collective chunk (2 doubles against 1.6 MB);
 *  - allgather with different sizes: every rank gets it;
 *  - reduce with a different count on the last rank: the root gets it;
 *  - reduce and broadcast with a root out of range on the last rank: it gets
 *    FH_ERR_BAD_RANK, the reduce's root FH_ERR_INVALID_ARG, and nobody waits;
 *  - broadcast with a different size on the last rank: that rank gets it, the root
 *    (which only sends) returns FH_OK;
 *  - broadcast across the node slots' 4 KiB: the last rank expecting 64 KiB gets
 *    it; when the root sends 64 KiB to ranks expecting 32 bytes, they all get it;
 *  - every rank passing itself as the broadcast root, 8 bytes: roots only send, so
 *    a root learns of it within the call only if another root's chunk is already
 *    there when it ends (FH_ERR_INVALID_ARG), otherwise at its next collective,
 *    which works and reports the earlier mismatch from fh_poll;
 *  - the same with 1 MiB (more chunks than an inbox holds): every rank gets
 *    FH_ERR_INVALID_ARG;
 *  - after every case, an allreduce of the rank numbers gives the right sum. */
#include "common.h"

static fh_ctx_t *ctx;
static int me, np;

static void expect_rc(int rc, int want, const char *what, const char *needle) {
  if (rc != want) FAILF("%s: returned %d (%s), expected %d", what, rc, fh_strerror(rc), want);
  if (want != FH_OK && needle) {
    char msg[1024];
    fh_last_error(msg, sizeof msg);
    CHECK(strstr(msg, needle) != NULL, "%s: message lacks '%s': %s", what, needle, msg);
  }
}

static void next_works(const char *after) {
  int64_t x = me + 1, sum = 0;
  int rc = fh_allreduce(ctx, &x, &sum, 1, FH_INT64, FH_SUM);
  if (rc != FH_OK) FAILF("allreduce after %s returned %d (%s)", after, rc, fh_strerror(rc));
  CHECK(sum == (int64_t)np * (np + 1) / 2, "allreduce after %s: %lld", after, (long long)sum);
  MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  ctx = fh_test_init(&me, &np);
  int last = np - 1;
  double src[4] = {1, 2, 3, 4}, dst[4];
  next_works("start");

  /* allreduce: counts differ on the last rank. */
  expect_rc(fh_allreduce(ctx, src, dst, me == last ? 3 : 2, FH_DOUBLE, FH_SUM), FH_ERR_INVALID_ARG,
            "allreduce, counts differ", "fh_allreduce");
  next_works("an allreduce with different counts");
  /* ... types differ */
  expect_rc(fh_allreduce(ctx, src, dst, 2, me == 0 ? FH_INT64 : FH_DOUBLE, FH_SUM), FH_ERR_INVALID_ARG,
            "allreduce, types differ", "fh_allreduce");
  next_works("an allreduce with different types");
  /* ... ops differ */
  expect_rc(fh_allreduce(ctx, src, dst, 2, FH_DOUBLE, me == last ? FH_MAX : FH_SUM), FH_ERR_INVALID_ARG,
            "allreduce, ops differ", "fh_allreduce");
  next_works("an allreduce with different ops");
  /* ... one rank passes NULL */
  expect_rc(fh_allreduce(ctx, me == last ? NULL : src, dst, 2, FH_DOUBLE, FH_SUM), FH_ERR_INVALID_ARG,
            "allreduce, NULL on one rank", me == last ? "NULL" : "rank");
  next_works("an allreduce with a NULL buffer on one rank");

  /* ... counts differ across a collective chunk (at most 64 KiB): 2 doubles on most
   * ranks, 200000 (1.6 MB) on one, then on all but one. A job across nodes
   * reduces the first chunk by recursive doubling and only a larger call the rest
   * on the trees: the ranks must still agree that the call failed, not wait. */
  size_t wide_n = 200000;
  double *wsrc = calloc(wide_n, sizeof *wsrc), *wdst = calloc(wide_n, sizeof *wdst);
  if (!wsrc || !wdst) FAILF("calloc %zu doubles", wide_n);
  expect_rc(fh_allreduce(ctx, wsrc, wdst, me == np / 2 ? wide_n : 2, FH_DOUBLE, FH_SUM),
            FH_ERR_INVALID_ARG, "allreduce, one rank's count spans chunks", "fh_allreduce");
  next_works("an allreduce with one count across a chunk");
  expect_rc(fh_allreduce(ctx, wsrc, wdst, me == last ? 2 : wide_n, FH_DOUBLE, FH_SUM),
            FH_ERR_INVALID_ARG, "allreduce, one rank's count within a chunk", "fh_allreduce");
  next_works("an allreduce with one count within a chunk");
  free(wsrc);
  free(wdst);

  /* allgather: sizes differ. */
  char gsrc[16] = {0}, *gdst = malloc(16 * (size_t)np);
  expect_rc(fh_allgather(ctx, gsrc, me == last ? 16 : 8, gdst), FH_ERR_INVALID_ARG,
            "allgather, sizes differ", "fh_allgather");
  next_works("an allgather with different sizes");

  /* reduce: the last rank's count differs; the root (0) hears of it. */
  int rc = fh_reduce(ctx, 0, src, dst, me == last ? 4 : 2, FH_DOUBLE, FH_SUM);
  if (me == 0) expect_rc(rc, FH_ERR_INVALID_ARG, "reduce at the root, counts differ", "fh_reduce");
  else CHECK(rc == FH_OK || rc == FH_ERR_INVALID_ARG, "reduce, counts differ: %d", rc);
  next_works("a reduce with different counts");

  /* A root out of range on one rank (a typo in a stranger's program): that rank gets
   * FH_ERR_BAD_RANK but still takes part, so the root hears of the failure instead
   * of waiting for that rank for ever (it once left the call at once and wedged the
   * job). */
  rc = fh_reduce(ctx, me == last ? -1 : 0, src, dst, 2, FH_DOUBLE, FH_SUM);
  if (me == last) expect_rc(rc, FH_ERR_BAD_RANK, "reduce, root -1 on this rank", "-1");
  else if (me == 0) expect_rc(rc, FH_ERR_INVALID_ARG, "reduce at the root, another rank's root is -1", NULL);
  else CHECK(rc == FH_OK || rc == FH_ERR_INVALID_ARG, "reduce, a root of -1 elsewhere: %d", rc);
  next_works("a reduce with a root out of range on one rank");
  {
    char bb[16] = {0};
    rc = fh_broadcast(ctx, me == last ? np : 0, bb, sizeof bb);
    if (me == last) expect_rc(rc, FH_ERR_BAD_RANK, "broadcast, root np on this rank", "out of range");
    else CHECK(rc == FH_OK || rc == FH_ERR_INVALID_ARG, "broadcast, a root of np elsewhere: %d", rc);
  }
  next_works("a broadcast with a root out of range on one rank");

  /* broadcast: the last rank expects more bytes. */
  char b[64] = {0};
  if (me == 0) memset(b, 7, sizeof b);
  rc = fh_broadcast(ctx, 0, b, me == last ? 64 : 32);
  if (me == last) expect_rc(rc, FH_ERR_INVALID_ARG, "broadcast, size differs", "fh_broadcast");
  if (me == 0) expect_rc(rc, FH_OK, "broadcast root", NULL);
  next_works("a broadcast with different sizes");

  /* broadcast across the node slots' size (4 KiB): the last rank expects 64 KiB
   * (on one node it takes the tree while the others use the slots), then the root
   * sends 64 KiB to ranks that expect 32 bytes. */
  size_t wide = 64 << 10;
  char *wb = calloc(1, wide);
  rc = fh_broadcast(ctx, 0, wb, me == last ? wide : 32);
  if (me == last) expect_rc(rc, FH_ERR_INVALID_ARG, "broadcast, last rank expects 64 KiB", "fh_broadcast");
  else CHECK(rc == FH_OK || rc == FH_ERR_INVALID_ARG, "broadcast, last rank expects 64 KiB: %d", rc);
  next_works("a broadcast where the last rank expects 64 KiB");
  rc = fh_broadcast(ctx, 0, wb, me == 0 ? wide : 32);
  if (me != 0) expect_rc(rc, FH_ERR_INVALID_ARG, "broadcast, the root sends 64 KiB", "fh_broadcast");
  else CHECK(rc == FH_OK || rc == FH_ERR_INVALID_ARG, "broadcast root sending 64 KiB: %d", rc);
  next_works("a broadcast where the root sends 64 KiB");
  free(wb);

  /* every rank its own root, small: undetectable in the call. */
  uint64_t v = (uint64_t)me;
  rc = fh_broadcast(ctx, me, &v, 8);
  CHECK(rc == FH_OK || rc == FH_ERR_INVALID_ARG, "own-root broadcast: %d", rc);
  CHECK(v == (uint64_t)me, "own-root broadcast changed the buffer");
  next_works("a broadcast where every rank was the root");
  int polled = fh_poll(ctx);
  CHECK(polled == FH_OK || polled == FH_ERR_INVALID_ARG, "fh_poll: %d", polled);
  MPI_Barrier(MPI_COMM_WORLD);

  /* every rank its own root, 1 MiB: the roots meet each other's chunks. */
  size_t big = 1 << 20;
  char *bb = malloc(big);
  memset(bb, me, big);
  expect_rc(fh_broadcast(ctx, me, bb, big), FH_ERR_INVALID_ARG, "1 MiB broadcast, every rank root",
            "fh_broadcast");
  next_works("a 1 MiB broadcast where every rank was the root");
  (void)fh_poll(ctx); /* chunks of that call that were left over are reported here */

  /* and everything works as before */
  memset(bb, me == 0 ? 9 : 0, big);
  CHECK_OK(fh_broadcast(ctx, 0, bb, big));
  for (size_t i = 0; i < big; i += 4099) CHECK(bb[i] == 9, "broadcast data at %zu", i);
  CHECK_OK(fh_allgather(ctx, gsrc, 8, gdst));
  CHECK_OK(fh_barrier(ctx));
  MPI_Barrier(MPI_COMM_WORLD);
  free(bb);
  free(gdst);
  CHECK_OK(fh_finalize(ctx));
  TEST_PASS("test_coll_mismatch");
  MPI_Finalize();
  return 0;
}
