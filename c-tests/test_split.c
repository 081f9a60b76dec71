/* fh_split as a stranger uses it from the header: teams by colour, key order, work
 * inside the parts (puts, allreduce, barrier), nested splits, many splits in a row
 * (the parts of one split set up at once collide in Open MPI 4.1's one-sided
 * component unless fh_split takes turns), a negative colour refused everywhere.
 * With argument "abort": rank 1 calls fh_abort(ctx, 7) while the others wait in a
 * barrier; the launcher must exit with status 7 (scripts/run-c-tests.sh checks). */
#include "common.h"

static void use_part(struct fh_ctx_t *part, int world_rank, int colour, int nworld, int ncol) {
  int me = fh_rank(part), n = fh_size(part);
  int want = 0;
  for (int r = 0; r < nworld; r++) want += r % ncol == colour;
  CHECK(n == want, "part of colour %d has %d ranks, expected %d", colour, n, want);
  /* key = -world rank: the part is ordered from the highest world rank down */
  int above = 0;
  for (int r = world_rank + 1; r < nworld; r++) above += r % ncol == colour;
  CHECK(me == above, "rank %d in the part, expected %d (key order)", me, above);
  uint64_t *slot = fh_malloc(part, sizeof(uint64_t) * (size_t)n);
  CHECK(slot != NULL, "fh_malloc on the part");
  void **all = malloc(sizeof(void *) * (size_t)n);
  CHECK_OK(fh_allgather(part, &slot, sizeof slot, all));
  uint64_t v = (uint64_t)world_rank + 1000;
  for (int r = 0; r < n; r++) CHECK_OK(fh_put(part, r, (uint64_t *)all[r] + me, &v, sizeof v));
  CHECK_OK(fh_barrier(part));
  int64_t sum = 0, mine = world_rank;
  CHECK_OK(fh_allreduce(part, &mine, &sum, 1, FH_INT64, FH_SUM));
  int64_t want_sum = 0;
  for (int r = 0; r < nworld; r++) want_sum += r % ncol == colour ? r : 0;
  CHECK(sum == want_sum, "allreduce over the part: %lld, expected %lld", (long long)sum,
        (long long)want_sum);
  uint64_t total = 0;
  for (int r = 0; r < n; r++) total += slot[r] - 1000;
  CHECK(total == (uint64_t)want_sum, "puts from every member of the part");
  CHECK_OK(fh_barrier(part));
  fh_free(part, slot);
  free(all);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  struct fh_ctx_t *ctx = NULL;
  CHECK_OK(fh_init_world(NULL, &ctx));
  int rank = fh_rank(ctx), size = fh_size(ctx);
  fh_test_rank = rank;
  if (argc > 1 && strcmp(argv[1], "abort") == 0) {
    if (rank == 1 % size) fh_abort(ctx, 7);
    fh_barrier(ctx); /* never completes: rank 1 is gone */
    fprintf(stderr, "fh_abort did not end the job\n");
    return 0;
  }
  for (int round = 0; round < 20; round++) {
    int ncol = 1 + round % 3;
    struct fh_ctx_t *part = NULL;
    CHECK_OK(fh_split(ctx, rank % ncol, -rank, NULL, &part));
    use_part(part, rank, rank % ncol, size, ncol);
    if (round % 5 == 0) { /* nested: halves of the part */
      struct fh_ctx_t *sub = NULL;
      CHECK_OK(fh_split(part, fh_rank(part) % 2, 0, NULL, &sub));
      CHECK_OK(fh_barrier(sub));
      CHECK_OK(fh_finalize(sub));
    }
    CHECK_OK(fh_finalize(part));
  }
  struct fh_ctx_t *bad = NULL;
  CHECK_RC(fh_split(ctx, rank == size - 1 ? -1 : 0, 0, NULL, &bad), FH_ERR_INVALID_ARG);
  CHECK(bad == NULL, "no context after a refused split");
  CHECK_RC(fh_split(ctx, 0, 0, NULL, NULL), FH_ERR_INVALID_ARG);
  CHECK_OK(fh_barrier(ctx));
  CHECK_OK(fh_finalize(ctx));
  if (rank == 0) printf("test_split: %d ranks passed\n", size);
  MPI_Finalize();
  return 0;
}
