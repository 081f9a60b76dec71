/* fh_init_comm_f with handles that are not communicators must fail cleanly with
 * FH_ERR_INVALID_ARG, and a valid init must still work afterwards. */
#include "common.h"

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &fh_test_rank);
  fh_ctx_t *ctx = NULL;
  int bad[] = {-1, 123456, (int)MPI_Comm_c2f(MPI_COMM_NULL)};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    CHECK_RC(fh_init_comm_f(bad[i], NULL, &ctx), FH_ERR_INVALID_ARG);
    CHECK(ctx == NULL, "ctx_out written on failure");
  }
  CHECK_OK(fh_init(MPI_COMM_WORLD, NULL, &ctx));
  uint64_t *p = fh_malloc(ctx, 64);
  CHECK(p != NULL, "fh_malloc");
  void *all[2];
  exchange_ptrs(p, all, MPI_COMM_WORLD);
  uint64_t v = 1000 + (uint64_t)fh_test_rank, got = 0;
  int peer = (fh_test_rank + 1) % 2;
  CHECK_OK(fh_put(ctx, peer, all[peer], &v, 8));
  CHECK_OK(fh_get(ctx, &got, peer, all[peer], 8));
  CHECK(got == v, "read back %llu", (unsigned long long)got);
  CHECK_OK(fh_finalize(ctx));
  TEST_PASS("bad communicator handles");
  MPI_Finalize();
  return 0;
}
