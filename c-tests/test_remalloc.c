/* Memory freed and allocated again without fh_mem_invalidate, as most programs do:
 * every phase each rank frees its buffer and mallocs a new one a page larger (a
 * fresh mapping, at or near the old addresses), and its left neighbour writes the
 * new buffer with fh_put, reads it back with fh_get_nb, and the owner checks it.
 * The firehoses of the old mappings (units pinned before the mapping changed) stay
 * in the neighbour's table; a transfer over many of them once needed more than f
 * firehoses and failed with FH_ERR_NO_RESOURCE (FH_SHM=0 or FH_CMA=0, from the
 * second phase on at 8 ranks). The header promises success on whatever is mapped. */
#include "common.h"

#define PHASES 12
#define BASE (600 * 1024)

static int me, np;

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  fh_test_rank = me;
  fh_ctx_t *ctx;
  CHECK_OK(fh_init(MPI_COMM_WORLD, NULL, &ctx));
  int right = (me + 1) % np, left = (me + np - 1) % np;
  size_t most = BASE + PHASES * 4096;
  unsigned char *src = malloc(most), *back = malloc(most);
  void **all = calloc((size_t)np, sizeof *all);
  CHECK(src && back && all, "malloc");
  for (int phase = 0; phase < PHASES; phase++) {
    size_t len = BASE + (size_t)phase * 4096;
    unsigned char *mine = malloc(len);
    CHECK(mine != NULL, "malloc %zu", len);
    memset(mine, 0, len);
    exchange_ptrs(mine, all, MPI_COMM_WORLD);
    size_t off = (size_t)(phase * 40) % 4096; /* not page-aligned, moving */
    size_t n = len - off;
    for (size_t i = 0; i < n; i++) src[i] = (unsigned char)(i * 13 + me + phase);
    unsigned char *dst = (unsigned char *)all[right] + off;
    CHECK_OK(fh_put(ctx, right, dst, src, n));
    fh_handle_t h;
    CHECK_OK(fh_get_nb(ctx, back, right, dst, n, &h));
    CHECK_OK(fh_wait(ctx, h));
    CHECK(memcmp(back, src, n) == 0, "phase %d: read back differs from what was put", phase);
    MPI_Barrier(MPI_COMM_WORLD);
    for (size_t i = 0; i < n; i++)
      if (mine[off + i] != (unsigned char)(i * 13 + left + phase))
        FAILF("phase %d: byte %zu from rank %d is %d", phase, i, left, mine[off + i]);
    MPI_Barrier(MPI_COMM_WORLD);
    free(mine); /* no fh_mem_invalidate */
  }
  CHECK_OK(fh_finalize(ctx));
  if (me == 0) printf("PASS test_remalloc (%d ranks, %d phases)\n", np, PHASES);
  free(all);
  free(back);
  free(src);
  MPI_Finalize();
  return 0;
}
