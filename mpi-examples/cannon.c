/* cannon.c -- Cannon's matrix multiply over firehose puts into plain malloc memory.
 *
 *   usage: cannon [n [reps]]     n x n doubles per block (default 64),
 *                                reps multiplications (default 400)
 *
 * The ranks form a q x q grid, q = floor(sqrt(P)); ranks beyond q*q idle but take
 * part in every fh_barrier and in fh_finalize. Each grid rank owns one block of A,
 * B and C of the global (q*n) x (q*n) matrices, starting from the usual skew. One
 * multiplication takes q steps: C += A*B, then the A block moves one rank left and
 * the B block one rank up, each with a single fh_put of the whole block into the
 * neighbour's receive buffer. The receive buffers are plain malloc memory that
 * nobody registered (double-buffered: a pair for A, a pair for B per rank); the
 * library pins them on demand (Firehose). fh_barrier separates steps: it also polls,
 * which the first access to a peer's memory needs.
 *
 * A[I][K] = I + 2K and B[K][J] = K - J (global indices, N = q*n), so
 *   C[I][J] = I*S1 - I*J*N + 2*S2 - 2*J*S1,  S1 = sum K, S2 = sum K^2 (K < N),
 * all exact in doubles. Every multiplication is checked against it; a mismatch
 * prints the element and exits non-zero. Rank 0 prints one summary line with the
 * put count and the firehose hit rate (hits / (hits + misses), all ranks). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "example.h" /* CHECK, FAIL, example_init */

static int me = -1;
static fh_ctx_t *ctx;

/* C += A * B for n x n row-major blocks. */
static void block_mul(size_t n, double *restrict c, const double *restrict a, const double *restrict b) {
  for (size_t i = 0; i < n; i++)
    for (size_t k = 0; k < n; k++) {
      double aik = a[i * n + k];
      for (size_t j = 0; j < n; j++) c[i * n + j] += aik * b[k * n + j];
    }
}

static long parse_pos(const char *s, const char *what) {
  char *end;
  long v = strtol(s, &end, 10);
  if (*end || v <= 0) {
    if (me == 0) fprintf(stderr, "cannon: %s must be a positive integer, got \"%s\"\n", what, s);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  return v;
}

int main(int argc, char **argv) {
  int nranks;
  ctx = example_init(&argc, &argv, &me, &nranks);
  size_t n = argc > 1 ? (size_t)parse_pos(argv[1], "n") : 64;
  long reps = argc > 2 ? parse_pos(argv[2], "reps") : 400;
  if (n > 2048) {
    if (me == 0) fprintf(stderr, "cannon: n <= 2048\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }

  int q = 1;
  while ((q + 1) * (q + 1) <= nranks) q++;
  int active = me < q * q;
  int r = me / q, c = me % q; /* grid position (active ranks) */
  int left = r * q + (c + q - 1) % q, up = ((r + q - 1) % q) * q + c;
  size_t nn = n * n, bytes = nn * sizeof(double);

  /* Receive buffers: plain malloc, never registered. abuf/bbuf hold two blocks each. */
  double *abuf = malloc(2 * bytes), *bbuf = malloc(2 * bytes), *cblk = malloc(bytes);
  if (!abuf || !bbuf || !cblk) FAIL("malloc");
  uint64_t mine[2] = {(uint64_t)(uintptr_t)abuf, (uint64_t)(uintptr_t)bbuf};
  uint64_t *all = malloc(sizeof(uint64_t) * 2 * (size_t)nranks);
  MPI_Allgather(mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T, MPI_COMM_WORLD);
  double *left_a = (double *)(uintptr_t)all[2 * left], *up_b = (double *)(uintptr_t)all[2 * up + 1];

  /* Skewed start: (r, c) holds A(r, (r+c)%q) and B((r+c)%q, c). */
  const double N = (double)q * (double)n;
  if (active) {
    size_t ka = (size_t)((r + c) % q) * n, kb = ka;
    for (size_t i = 0; i < n; i++)
      for (size_t j = 0; j < n; j++) {
        abuf[i * n + j] = (double)((size_t)r * n + i) + 2.0 * (double)(ka + j);
        bbuf[i * n + j] = (double)(kb + i) - (double)((size_t)c * n + j);
      }
  }
  const double S1 = N * (N - 1) / 2, S2 = (N - 1) * N * (2 * N - 1) / 6;

  CHECK(fh_barrier(ctx));
  double t0 = MPI_Wtime();
  int cur = 0;
  for (long rep = 0; rep < reps; rep++) {
    if (active) memset(cblk, 0, bytes);
    for (int s = 0; s < q; s++) {
      int nxt = cur ^ 1;
      if (active) {
        block_mul(n, cblk, abuf + (size_t)cur * nn, bbuf + (size_t)cur * nn);
        CHECK(fh_put(ctx, left, left_a + (size_t)nxt * nn, abuf + (size_t)cur * nn, bytes));
        CHECK(fh_put(ctx, up, up_b + (size_t)nxt * nn, bbuf + (size_t)cur * nn, bytes));
      }
      CHECK(fh_barrier(ctx)); /* every block arrived; everyone done reading `cur` */
      cur = nxt;
    }
    if (active)
      for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
          double I = (double)((size_t)r * n + i), J = (double)((size_t)c * n + j);
          double want = I * S1 - I * J * N + 2 * S2 - 2 * J * S1;
          if (cblk[i * n + j] != want)
            FAIL("multiplication %ld: C[%.0f][%.0f] = %.17g, expected %.17g", rep, I, J, cblk[i * n + j], want);
        }
  }
  double el = MPI_Wtime() - t0, tmax = 0;

  fh_stats_t st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK(fh_stats_get(ctx, &st));
  uint64_t loc[3] = {st.hits, st.misses, st.puts}, tot[3] = {0, 0, 0};
  MPI_Reduce(loc, tot, 3, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(&el, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  CHECK(fh_finalize(ctx));
  if (me == 0) {
    char rate[32] = "n/a";
    if (tot[0] + tot[1]) snprintf(rate, sizeof rate, "%.3f %%", 100.0 * (double)tot[0] / (double)(tot[0] + tot[1]));
    printf("cannon: %d ranks (%dx%d grid, %d idle), %zux%zu-double blocks, %ld multiplications verified, "
           "%llu puts, hits %llu misses %llu, hit rate %s, %.3f s\n",
           nranks, q, q, nranks - q * q, n, n, reps, (unsigned long long)tot[2], (unsigned long long)tot[0],
           (unsigned long long)tot[1], rate, tmax);
    fflush(stdout);
  }
  free(abuf); free(bbuf); free(cblk); free(all);
  MPI_Finalize();
  return 0;
}
