/* Large reductions as a stranger writes them from the header: MPI_Init, MPI_Barrier
 * between phases, malloc'd buffers, sizes from just above 4 KiB to several MiB
 * (reductions above 4 KiB on a one-node job move through staging windows of the
 * node-shared mapping, below through the node slots, with FH_SHM=0 or small heaps
 * through the trees: the answers must not depend on which).
 *  1. fh_allreduce of doubles with integer values (exact in any order), separate
 *     buffers and in place (src == dst), back to back without a barrier between
 *     calls, one rank late at random: equal to MPI_Allreduce; guard bytes after dst
 *     untouched;
 *  2. fh_reduce to a moving root, NULL dst elsewhere, and in place at the root;
 *  3. unsigned 8-bit sums that wrap, at odd byte counts (against sums computed here);
 *  4. random doubles of mixed magnitudes (inexact): bit-identical on every rank and
 *     equal to fh_reduce's result at rank 0;
 *  5. fh_allreduce_fn with 24-byte elements and an associative, non-commutative
 *     operation (joining rank intervals): the result is [0, np-1] with np parts, so
 *     the operands were combined in rank order with the lower ranks on the left;
 *  6. mismatched counts (the last rank passes one more): every rank returns
 *     FH_ERR_INVALID_ARG, and the next allreduce works.
 * Run: mpirun -np N test_coll_big (CI: 2, 3, 4, 8; also FH_SHM=0, FH_HEAP_SIZE=4M). */
#include "common.h"

static int me, np;
static fh_ctx_t *ctx;
static uint64_t seed = 12345;

static const size_t sizes[] = {4104, 65536, (256 << 10) - 8, 256 << 10, (256 << 10) + 8, 1 << 20, (3 << 20) + 24};
enum { NSIZES = sizeof sizes / sizeof sizes[0] };
#define GUARD 64

/* One rank (chosen alike everywhere) sleeps a little before the call. */
static void skew(void) {
  uint64_t r = rng_next(&seed);
  if ((int)(r % (uint64_t)np) == me && (r >> 32) % 3 == 0) usleep((useconds_t)((r >> 40) % 3000));
}

static void fill_ints(double *a, size_t n, int salt) {
  for (size_t i = 0; i < n; i++) a[i] = (double)((int)((i * 7 + (size_t)me * 13 + (size_t)salt) % 1000) - 500);
}

static void check_guard(const unsigned char *p, const char *what) {
  for (int i = 0; i < GUARD; i++)
    if (p[i] != 0xA5) FAILF("%s: guard byte %d after dst was overwritten", what, i);
}

static void phase_exact(void) {
  size_t maxb = sizes[NSIZES - 1];
  double *src = malloc(maxb), *ref = malloc(maxb), *inpl = malloc(maxb);
  unsigned char *dst = malloc(maxb + GUARD);
  for (int round = 0; round < 3; round++) {
    for (int k = 0; k < NSIZES; k++) {
      size_t n = sizes[k] / 8;
      char what[128];
      fill_ints(src, n, round * 31 + k);
      MPI_Allreduce(src, ref, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      memset(dst, 0xA5, sizes[k] + GUARD);
      memcpy(inpl, src, sizes[k]);
      skew();
      CHECK_OK(fh_allreduce(ctx, src, dst, n, FH_DOUBLE, FH_SUM));
      skew();
      CHECK_OK(fh_allreduce(ctx, inpl, inpl, n, FH_DOUBLE, FH_SUM));
      snprintf(what, sizeof what, "round %d: allreduce of %zu bytes", round, sizes[k]);
      if (memcmp(dst, ref, sizes[k])) FAILF("%s: differs from MPI_Allreduce", what);
      if (memcmp(inpl, ref, sizes[k])) FAILF("%s in place: differs from MPI_Allreduce", what);
      check_guard(dst + sizes[k], what);
      /* 2. reduce to a moving root; in place at the root. */
      int root = (round + k) % np;
      memcpy(inpl, src, sizes[k]);
      memset(dst, 0xA5, sizes[k] + GUARD);
      CHECK_OK(fh_reduce(ctx, root, src, me == root ? dst : NULL, n, FH_DOUBLE, FH_SUM));
      CHECK_OK(fh_reduce(ctx, root, inpl, inpl, n, FH_DOUBLE, FH_SUM));
      if (me == root) {
        if (memcmp(dst, ref, sizes[k])) FAILF("%s: reduce at root %d differs", what, root);
        if (memcmp(inpl, ref, sizes[k])) FAILF("%s: in-place reduce at root %d differs", what, root);
        check_guard(dst + sizes[k], what);
      } else {
        for (size_t i = 0; i < sizes[k]; i++)
          if (dst[i] != 0xA5) FAILF("%s: reduce wrote a non-root's dst (byte %zu)", what, i);
      }
    }
  }
  free(src), free(ref), free(inpl), free(dst);
}

static void phase_u8(void) {
  size_t lens[] = {4097, 300001, (1 << 20) + 3};
  for (int k = 0; k < 3; k++) {
    size_t n = lens[k];
    uint8_t *a = malloc(n), *b = malloc(n), *r = malloc(n);
    for (size_t i = 0; i < n; i++) a[i] = (uint8_t)(i * 37 + (size_t)me * 101 + 200);
    /* The reference is computed here: Open MPI 4.1.4's MPI_SUM on MPI_UINT8_T
     * saturates at 255 instead of wrapping (its vectorised op component). */
    for (size_t i = 0; i < n; i++) {
      unsigned v = 0;
      for (int q = 0; q < np; q++) v += (uint8_t)(i * 37 + (size_t)q * 101 + 200);
      r[i] = (uint8_t)v;
    }
    skew();
    CHECK_OK(fh_allreduce(ctx, a, b, n, FH_UINT8, FH_SUM));
    for (size_t i = 0; i < n; i++)
      if (b[i] != r[i]) FAILF("uint8 sum of %zu bytes: byte %zu is %u, expected %u", n, i, b[i], r[i]);
    free(a), free(b), free(r);
  }
}

static void phase_inexact(void) {
  size_t n = (1 << 20) / 8 + 5;
  double *a = malloc(n * 8), *b = malloc(n * 8), *c = malloc(n * 8), *z = malloc(n * 8);
  uint64_t s = 777 + (uint64_t)me;
  for (size_t i = 0; i < n; i++) {
    uint64_t x = rng_next(&s);
    a[i] = ((double)(x >> 11) / 9007199254740992.0 - 0.5) * (double)(1ULL << (x % 50));
  }
  CHECK_OK(fh_allreduce(ctx, a, b, n, FH_DOUBLE, FH_SUM));
  CHECK_OK(fh_reduce(ctx, 0, a, c, n, FH_DOUBLE, FH_SUM));
  if (me == 0) memcpy(z, b, n * 8);
  MPI_Bcast(z, (int)(n * 8), MPI_BYTE, 0, MPI_COMM_WORLD);
  if (memcmp(b, z, n * 8)) FAILF("inexact allreduce: rank %d's result differs from rank 0's", me);
  if (me == 0 && memcmp(b, c, n * 8)) FAILF("inexact allreduce differs from reduce at rank 0");
  free(a), free(b), free(c), free(z);
}

typedef struct {
  uint64_t first, last, parts;
} span_t;

static void join(void *inout, const void *in, size_t count, void *user) {
  span_t *l = inout;
  const span_t *r = in;
  int *bad = user;
  for (size_t i = 0; i < count; i++) {
    if (l[i].last + 1 != r[i].first) *bad = 1;
    l[i].last = r[i].last;
    l[i].parts += r[i].parts;
  }
}

static void phase_user(void) {
  size_t n = 50000; /* 1.2 MB */
  span_t *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
  for (size_t i = 0; i < n; i++) a[i] = (span_t){(uint64_t)me, (uint64_t)me, 1};
  int bad = 0;
  CHECK_OK(fh_allreduce_fn(ctx, a, b, n, sizeof(span_t), join, &bad));
  CHECK(!bad, "the user's operation saw operands out of rank order");
  for (size_t i = 0; i < n; i++)
    if (b[i].first != 0 || b[i].last != (uint64_t)np - 1 || b[i].parts != (uint64_t)np)
      FAILF("user allreduce element %zu: [%lu, %lu] in %lu parts", i, (unsigned long)b[i].first,
            (unsigned long)b[i].last, (unsigned long)b[i].parts);
  free(a), free(b);
}

static void phase_mismatch(void) {
  size_t n = (1 << 20) / 8;
  double *a = calloc(n + 1, 8), *b = calloc(n + 1, 8);
  size_t mine = me == np - 1 && np > 1 ? n + 1 : n;
  int rc = fh_allreduce(ctx, a, b, mine, FH_DOUBLE, FH_SUM);
  if (np > 1) CHECK(rc == FH_ERR_INVALID_ARG, "mismatched large allreduce returned %d (%s)", rc, fh_strerror(rc));
  MPI_Barrier(MPI_COMM_WORLD);
  for (size_t i = 0; i < n; i++) a[i] = me;
  CHECK_OK(fh_allreduce(ctx, a, b, n, FH_DOUBLE, FH_SUM));
  for (size_t i = 0; i < n; i++)
    if (b[i] != (double)np * (np - 1) / 2) FAILF("allreduce after a mismatch: element %zu is %g", i, b[i]);
  free(a), free(b);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  ctx = fh_test_init(&me, &np);
  alarm(240);
  phase_exact();
  MPI_Barrier(MPI_COMM_WORLD);
  phase_u8();
  MPI_Barrier(MPI_COMM_WORLD);
  phase_inexact();
  MPI_Barrier(MPI_COMM_WORLD);
  phase_user();
  MPI_Barrier(MPI_COMM_WORLD);
  phase_mismatch();
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK_OK(fh_finalize(ctx));
  if (me == 0) printf("test_coll_big: ok (%d ranks)\n", np);
  MPI_Finalize();
  return 0;
}
