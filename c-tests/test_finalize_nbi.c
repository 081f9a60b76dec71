/* fh_finalize completes every operation, also those the program never waited for:
 * each rank puts into its right neighbour's plain malloc'd memory with fh_put_nbi
 * (no fh_wait_nbi) and fh_put_nb (handle never synced), then calls fh_finalize. Odd
 * ranks come late, so their neighbours' first puts (firehose misses when the kernel
 * copy is off, FH_CMA=0) are still waiting for their moves' answers when those
 * neighbours finalize. After MPI_Barrier every rank checks what its left neighbour
 * wrote. Several rounds, each on a new context, as a program that initialises and
 * finalizes per phase would. */
#include "common.h"
#include <unistd.h>

#define CHUNK 10000
#define NCHUNK 10
#define ROUNDS 8

static int me, np;

static void round_of(int round) {
  fh_ctx_t *ctx;
  CHECK_OK(fh_init(MPI_COMM_WORLD, NULL, &ctx));
  int right = (me + 1) % np, left = (me + np - 1) % np;
  unsigned char *mine = calloc(NCHUNK, CHUNK);
  CHECK(mine != NULL, "calloc");
  void **all = calloc((size_t)np, sizeof *all);
  exchange_ptrs(mine, all, MPI_COMM_WORLD);
  static unsigned char src[NCHUNK * CHUNK];
  for (int i = 0; i < NCHUNK * CHUNK; i++) src[i] = (unsigned char)(i * 7 + me + round);
  unsigned char *dst = all[right];
  for (int k = 0; k < NCHUNK - 1; k++)
    CHECK_OK(fh_put_nbi(ctx, right, dst + CHUNK * k, src + CHUNK * k, CHUNK));
  fh_handle_t h;
  CHECK_OK(fh_put_nb(ctx, right, dst + CHUNK * (NCHUNK - 1), src + CHUNK * (NCHUNK - 1), CHUNK, &h));
  if (me % 2 == 1) usleep(20000);
  CHECK_OK(fh_finalize(ctx));
  MPI_Barrier(MPI_COMM_WORLD);
  int bad = -1;
  for (int i = 0; i < NCHUNK * CHUNK && bad < 0; i++)
    if (mine[i] != (unsigned char)(i * 7 + left + round)) bad = i;
  CHECK(bad < 0, "round %d: rank %d's puts lost by fh_finalize: byte %d (chunk %d) is %d", round, left, bad,
        bad / CHUNK, bad >= 0 ? mine[bad] : 0);
  MPI_Barrier(MPI_COMM_WORLD);
  free(all);
  free(mine);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  fh_test_rank = me;
  for (int r = 0; r < ROUNDS; r++) round_of(r);
  if (me == 0) printf("PASS test_finalize_nbi (%d ranks, %d rounds)\n", np, ROUNDS);
  MPI_Finalize();
  return 0;
}
