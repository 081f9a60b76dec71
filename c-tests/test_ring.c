/* Ring of blocking puts and gets across all ranks, on fh_malloc memory and on
 * fh_mem_register'ed stack/heap memory, with data checks; sizes 0 .. 1 MiB. */
#include "common.h"

static void fill(unsigned char *p, size_t n, int seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed * 131 + i * 7);
}
static void expect(const unsigned char *p, size_t n, int seed, const char *what) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != (unsigned char)(seed * 131 + i * 7))
      FAILF("%s: byte %zu is %d, expected %d", what, i, p[i], (unsigned char)(seed * 131 + i * 7));
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int me, n;
  fh_ctx_t *ctx = fh_test_init(&me, &n);
  int right = (me + 1) % n, left = (me + n - 1) % n;
  const size_t MAX = 1 << 20;

  /* Heap memory and user memory registered explicitly. */
  unsigned char *heap = fh_malloc(ctx, MAX);
  CHECK(heap != NULL, "fh_malloc");
  unsigned char *user = malloc(MAX);
  CHECK_OK(fh_mem_register(ctx, user, MAX));
  void *heaps[64], *users[64];
  exchange_ptrs(heap, heaps, MPI_COMM_WORLD);
  exchange_ptrs(user, users, MPI_COMM_WORLD);
  unsigned char *src = malloc(MAX), *dst = malloc(MAX);

  size_t sizes[] = {0, 1, 8, 63, 4096, 65536 + 3, MAX};
  for (int region = 0; region < 2; region++) {
    unsigned char *mine = region ? user : heap;
    void **all = region ? users : heaps;
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
      size_t sz = sizes[k];
      int seed = (int)(k * 10 + region) + me;
      memset(mine, 0xEE, MAX);
      CHECK_OK(fh_barrier(ctx));
      fill(src, sz, seed);
      CHECK_OK(fh_put(ctx, right, all[right], src, sz));
      CHECK_OK(fh_barrier(ctx));
      /* What my left neighbour put into my memory. */
      expect(mine, sz, (int)(k * 10 + region) + left, "put landed");
      if (sz < MAX) CHECK(mine[sz] == 0xEE, "put wrote past its end");
      /* Get it back from the right neighbour's memory: that is what I put there. */
      memset(dst, 0, MAX);
      CHECK_OK(fh_get(ctx, dst, right, all[right], sz));
      expect(dst, sz, seed, "get returned");
      CHECK_OK(fh_barrier(ctx));
    }
  }
  /* Put to self and get from self. */
  fill(src, 100, 3);
  CHECK_OK(fh_put(ctx, me, heap + 10, src, 100));
  expect(heap + 10, 100, 3, "self put");

  CHECK_OK(fh_barrier(ctx));
  CHECK_OK(fh_mem_unregister(ctx, user, MAX));
  fh_free(ctx, heap);
  CHECK_OK(fh_finalize(ctx));
  /* The application's MPI is still usable: fh_finalize must not finalize it. */
  int fin = 1;
  MPI_Finalized(&fin);
  CHECK(fin == 0, "fh_finalize finalized the application's MPI");
  MPI_Barrier(MPI_COMM_WORLD);
  TEST_PASS("ring");
  free(src); free(dst); free(user);
  MPI_Finalize();
  return 0;
}
