/* Word locks as a stranger uses them from the header: an array of 64 locks in rank
 * 0's heap (one word each, no creation), every rank increments counters under them
 * (blocking and FH_WORD_LOCK_TRY), holders are reported, misuse is refused. */
#include "common.h"

#define NLOCKS 64
#define ROUNDS 300

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  struct fh_ctx_t *ctx = NULL;
  CHECK_OK(fh_init_world(NULL, &ctx));
  int me = fh_rank(ctx), np = fh_size(ctx);
  fh_test_rank = me;
  uint64_t *words = fh_malloc(ctx, 2 * NLOCKS * sizeof(uint64_t)); /* locks, then counters */
  CHECK(words != NULL, "fh_malloc");
  memset(words, 0, 2 * NLOCKS * sizeof(uint64_t));
  void **all = malloc(sizeof(void *) * (size_t)np);
  CHECK_OK(fh_allgather(ctx, &words, sizeof words, all));
  uint64_t *locks = all[0], *counters = (uint64_t *)all[0] + NLOCKS;
  MPI_Barrier(MPI_COMM_WORLD);

  /* counters protected by their locks: a plain get + put under the lock */
  int tries = 0;
  for (int r = 0; r < ROUNDS; r++) {
    int k = (r * 7 + me) % NLOCKS, holder = -2;
    if (r % 2) {
      int rc;
      while ((rc = fh_word_lock(ctx, 0, &locks[k], FH_WORD_LOCK_TRY, &holder)) == FH_NOT_READY) {
        CHECK(holder >= 0 && holder < np && holder != me, "holder %d reported by a failed try", holder);
        tries++;
        fh_poll(ctx);
      }
      CHECK_OK(rc);
    } else {
      CHECK_OK(fh_word_lock(ctx, 0, &locks[k], 0, NULL));
    }
    uint64_t v = 0;
    CHECK_OK(fh_get(ctx, &v, 0, &counters[k], sizeof v));
    v++;
    CHECK_OK(fh_put(ctx, 0, &counters[k], &v, sizeof v));
    CHECK_OK(fh_word_unlock(ctx, 0, &locks[k], NULL));
  }
  CHECK_OK(fh_barrier(ctx));
  if (me == 0) {
    uint64_t total = 0;
    for (int k = 0; k < NLOCKS; k++) total += words[NLOCKS + k];
    CHECK(total == (uint64_t)ROUNDS * (uint64_t)np, "counters under word locks: %llu, expected %llu",
          (unsigned long long)total, (unsigned long long)ROUNDS * (uint64_t)np);
  }
  CHECK_OK(fh_barrier(ctx));

  /* holders: rank np-1 holds lock 0; everyone else sees it; misuse is refused */
  int holder = -2;
  if (me == np - 1) {
    CHECK_OK(fh_word_lock(ctx, 0, &locks[0], 0, NULL));
    CHECK_RC(fh_word_lock(ctx, 0, &locks[0], FH_WORD_LOCK_TRY, &holder), FH_ERR_STATE);
    CHECK(holder == me, "a second lock by the holder names itself");
  }
  CHECK_OK(fh_barrier(ctx));
  if (me != np - 1) {
    CHECK_RC(fh_word_lock(ctx, 0, &locks[0], FH_WORD_LOCK_TRY, &holder), FH_NOT_READY);
    CHECK(holder == np - 1, "try names the holder: %d", holder);
    holder = -2;
    CHECK_RC(fh_word_unlock(ctx, 0, &locks[0], &holder), FH_ERR_STATE);
    CHECK(holder == np - 1, "unlock of another rank's lock names the holder: %d", holder);
  }
  CHECK_OK(fh_barrier(ctx));
  if (me == np - 1) CHECK_OK(fh_word_unlock(ctx, 0, &locks[0], NULL));
  CHECK_OK(fh_barrier(ctx));
  CHECK_RC(fh_word_unlock(ctx, 0, &locks[1], &holder), FH_ERR_STATE);
  CHECK(holder == -1, "unlock of a free lock: holder -1, got %d", holder);
  CHECK_RC(fh_word_lock(ctx, 0, (uint64_t *)((char *)&locks[1] + 4), 0, NULL), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_word_lock(ctx, 0, &locks[1], 2, NULL), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_word_lock(ctx, np, &locks[1], 0, NULL), FH_ERR_BAD_RANK);
  CHECK_OK(fh_barrier(ctx));
  fh_free(ctx, words);
  CHECK_OK(fh_finalize(ctx));
  if (me == 0) printf("test_word_lock: %d ranks passed (%d failed tries)\n", np, tries);
  free(all);
  MPI_Finalize();
  return 0;
}
