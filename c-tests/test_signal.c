/* Notify counters as a stranger writes them from the header: many producers put a
 * block into one consumer's buffer with fh_put_signal(FH_SIGNAL_ADD) and the consumer
 * waits with fh_signal_wait_until(FH_CMP_GE), then checks every block (the data must
 * be there when the signal is); a ring hands a token on with FH_SIGNAL_SET and
 * FH_CMP_EQ into plain malloc'd buffers; bad arguments are refused. */
#include "common.h"

#define BLOCK 4096
#define ROUNDS 200

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  struct fh_ctx_t *ctx = NULL;
  CHECK_OK(fh_init_world(NULL, &ctx));
  int me = fh_rank(ctx), np = fh_size(ctx);
  fh_test_rank = me;
  int right = (me + 1) % np, left = (me + np - 1) % np;
  uint64_t *sig = fh_malloc(ctx, 2 * sizeof(uint64_t));
  CHECK(sig != NULL, "fh_malloc");
  CHECK_OK(fh_atomic_set_u64(ctx, me, &sig[0], 0));
  CHECK_OK(fh_atomic_set_u64(ctx, me, &sig[1], 0));
  unsigned char *buf = malloc((size_t)np * BLOCK), *src = malloc(BLOCK); /* plain memory */
  void **bufs = malloc(sizeof(void *) * (size_t)np), **sigs = malloc(sizeof(void *) * (size_t)np);
  CHECK_OK(fh_allgather(ctx, &buf, sizeof buf, bufs));
  CHECK_OK(fh_allgather(ctx, &sig, sizeof sig, sigs));
  MPI_Barrier(MPI_COMM_WORLD);

  /* many producers, one consumer (rank 0) */
  for (int r = 1; r <= ROUNDS; r++) {
    if (me != 0) {
      memset(src, (me * 7 + r) & 0xff, BLOCK);
      CHECK_OK(fh_put_signal(ctx, 0, (unsigned char *)bufs[0] + (size_t)me * BLOCK, src, BLOCK,
                             (uint64_t *)sigs[0], 1, FH_SIGNAL_ADD));
    } else {
      uint64_t seen = 0;
      CHECK_OK(fh_signal_wait_until(ctx, &sig[0], FH_CMP_GE, (uint64_t)r * (uint64_t)(np - 1), &seen));
      CHECK(seen == (uint64_t)r * (uint64_t)(np - 1), "signal %llu in round %d", (unsigned long long)seen, r);
      for (int p = 1; p < np; p++)
        for (int k = 0; k < BLOCK; k += 511)
          CHECK(buf[(size_t)p * BLOCK + (size_t)k] == ((p * 7 + r) & 0xff),
                "round %d: block of rank %d not there when its signal was", r, p);
    }
    /* the producers may not run ahead into the next round's blocks */
    CHECK_OK(fh_barrier(ctx));
  }

  /* a token around the ring: SET the round number into the right neighbour's word */
  for (int r = 1; r <= ROUNDS && np > 1; r++) {
    if (me == 0) {
      memset(src, r & 0xff, 64);
      CHECK_OK(fh_put_signal(ctx, right, bufs[right], src, 64, (uint64_t *)sigs[right] + 1, (uint64_t)r, FH_SIGNAL_SET));
      CHECK_OK(fh_signal_wait_until(ctx, &sig[1], FH_CMP_EQ, (uint64_t)r, NULL));
      CHECK(buf[63] == (r & 0xff), "token data in round %d", r);
    } else {
      CHECK_OK(fh_signal_wait_until(ctx, &sig[1], FH_CMP_EQ, (uint64_t)r, NULL));
      CHECK(buf[0] == (r & 0xff) && buf[63] == (r & 0xff), "token data from rank %d in round %d", left, r);
      memcpy(src, buf, 64);
      CHECK_OK(fh_put_signal(ctx, right, bufs[right], src, 64, (uint64_t *)sigs[right] + 1, (uint64_t)r, FH_SIGNAL_SET));
    }
  }
  CHECK_OK(fh_barrier(ctx));

  /* bad arguments: refused before anything moves */
  uint64_t local = 0, v = 0;
  CHECK_RC(fh_put_signal(ctx, right, bufs[right], src, 8, (uint64_t *)((char *)sigs[right] + 4), 1, FH_SIGNAL_ADD), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_put_signal(ctx, right, bufs[right], src, 8, (uint64_t *)sigs[right], 1, 2), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_put_signal(ctx, np, bufs[right], src, 8, (uint64_t *)sigs[right], 1, FH_SIGNAL_ADD), FH_ERR_BAD_RANK);
  CHECK_RC(fh_signal_wait_until(ctx, &sig[1], 6, 0, &v), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_signal_wait_until(ctx, NULL, FH_CMP_EQ, 0, &v), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_signal_wait_until(ctx, &local, FH_CMP_EQ, 0, &v), FH_ERR_ACCESS); /* stack word */
  CHECK_OK(fh_signal_wait_until(ctx, &sig[0], FH_CMP_LE, UINT64_MAX, &v)); /* holds at once */
  CHECK(v == (me == 0 ? (uint64_t)ROUNDS * (uint64_t)(np - 1) : 0), "value_out of a wait that holds at once");

  CHECK_OK(fh_barrier(ctx));
  fh_free(ctx, sig);
  CHECK_OK(fh_finalize(ctx));
  if (me == 0) printf("test_signal: %d ranks passed\n", np);
  free(buf); free(src); free(bufs); free(sigs);
  MPI_Finalize();
  return 0;
}
