/* User-defined reductions (fh_allreduce_fn, fh_reduce_fn) as a stranger writes them
 * from the header:
 *  - 2x2 matrix products mod 2^64: associative but not commutative, so the result
 *    proves the rank order (M0 * M1 * ... * Mn-1), at every root and over counts that
 *    span several chunks;
 *  - the maximum of fixed-length strings (Fortran's CO_MAX on CHARACTER);
 *  - NULL fn or elem_size 0 on one rank: FH_ERR_INVALID_ARG on every rank, and the
 *    next collective works. */
#include "common.h"

typedef struct { uint64_t a, b, c, d; } mat;

static mat mul(mat x, mat y) {
  mat r = {x.a * y.a + x.b * y.c, x.a * y.b + x.b * y.d, x.c * y.a + x.d * y.c, x.c * y.b + x.d * y.d};
  return r;
}

static int calls;
static void matmul(void *inout, const void *in, size_t count, void *user) {
  (void)user;
  mat *acc = inout;
  const mat *x = in;
  for (size_t i = 0; i < count; i++) acc[i] = mul(acc[i], x[i]);
  calls++;
}

static void strmax(void *inout, const void *in, size_t count, void *user) {
  size_t len = *(size_t *)user;
  for (size_t i = 0; i < count; i++) {
    char *a = (char *)inout + i * len;
    const char *b = (const char *)in + i * len;
    if (memcmp(b, a, len) > 0) memcpy(a, b, len);
  }
}

static mat of(int rank, size_t i) {
  mat m = {(uint64_t)rank + 2, (uint64_t)i + 1, 1, (uint64_t)(rank * 3 + (int)i % 5)};
  return m;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  struct fh_ctx_t *ctx = NULL;
  CHECK_OK(fh_init_world(NULL, &ctx));
  int me = fh_rank(ctx), np = fh_size(ctx);
  fh_test_rank = me;
  size_t counts[] = {1, 7, 5000}; /* 5000 x 32 B: several chunks */
  for (size_t c = 0; c < 3; c++) {
    size_t n = counts[c];
    mat *src = malloc(n * sizeof(mat)), *dst = malloc(n * sizeof(mat)), *want = malloc(n * sizeof(mat));
    for (size_t i = 0; i < n; i++) {
      src[i] = of(me, i);
      want[i] = of(0, i);
      for (int r = 1; r < np; r++) want[i] = mul(want[i], of(r, i));
    }
    CHECK_OK(fh_allreduce_fn(ctx, src, dst, n, sizeof(mat), matmul, NULL));
    for (size_t i = 0; i < n; i++)
      CHECK(!memcmp(&dst[i], &want[i], sizeof(mat)), "allreduce_fn: element %zu of %zu in rank order", i, n);
    for (int root = 0; root < np; root++) {
      memset(dst, 0, n * sizeof(mat));
      CHECK_OK(fh_reduce_fn(ctx, root, src, me == root ? dst : NULL, n, sizeof(mat), matmul, NULL));
      if (me == root)
        for (size_t i = 0; i < n; i++)
          CHECK(!memcmp(&dst[i], &want[i], sizeof(mat)), "reduce_fn at root %d: element %zu", root, i);
    }
    free(src); free(dst); free(want);
  }
  CHECK(np == 1 || me != 0 || calls > 0, "the user function ran at rank 0 (every tree combines there)");

  /* strings: the largest "rank-<letter>" */
  size_t len = 12;
  char word[24], out[24];
  snprintf(word, sizeof word, "img-%c-%07d", 'a' + (me * 5) % 26, me);
  snprintf(word + 12, 12, "%011d", np - me);
  CHECK_OK(fh_allreduce_fn(ctx, word, out, 2, len, strmax, &len));
  char best[12] = {0}, best2[12] = {0};
  for (int r = 0; r < np; r++) {
    char w[24];
    snprintf(w, sizeof w, "img-%c-%07d", 'a' + (r * 5) % 26, r);
    snprintf(w + 12, 12, "%011d", np - r);
    if (memcmp(w, best, 12) > 0) memcpy(best, w, 12);
    if (memcmp(w + 12, best2, 12) > 0) memcpy(best2, w + 12, 12);
  }
  CHECK(!memcmp(out, best, 12) && !memcmp(out + 12, best2, 12), "string maximum");

  /* bad arguments on one rank reach every rank; the next collective works */
  mat one = of(me, 0), res;
  CHECK_RC(fh_allreduce_fn(ctx, &one, &res, 1, sizeof(mat), me == np - 1 ? NULL : matmul, NULL),
           FH_ERR_INVALID_ARG);
  CHECK_RC(fh_allreduce_fn(ctx, &one, &res, 1, me == 0 ? 0 : sizeof(mat), matmul, NULL), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_reduce_fn(ctx, 0, &one, &res, 1, 1u << 20, matmul, NULL), FH_ERR_INVALID_ARG);
  int64_t x = me, sum = 0;
  CHECK_OK(fh_allreduce(ctx, &x, &sum, 1, FH_INT64, FH_SUM));
  CHECK(sum == (int64_t)np * (np - 1) / 2, "the next collective");
  CHECK_OK(fh_finalize(ctx));
  if (me == 0) printf("test_coll_user: %d ranks passed\n", np);
  MPI_Finalize();
  return 0;
}
