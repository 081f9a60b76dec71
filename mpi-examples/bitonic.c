/* bitonic.c -- distributed bitonic sort over firehose puts into plain malloc memory.
 *
 *   usage: bitonic [keys [reps]]   64-bit keys per rank (default 1024),
 *                                  reps sorts of fresh random keys (default 3500)
 *
 * P' = the largest power of two <= P ranks sort; the others idle but take part in
 * every fh_barrier and in fh_finalize. Each rank sorts its keys locally (radix),
 * then runs the bitonic network on blocks: at every merge step it sends its whole
 * block to the partner with one fh_put into the partner's receive buffer -- plain
 * malloc memory nobody registered, pinned on demand by the library (Firehose) --
 * fh_barrier (which also polls, as the first access to a peer's memory needs), and
 * keeps the low or high half of the merge. The receive buffer is double-buffered,
 * so one barrier per step suffices.
 *
 * Every sort is checked: each block sorted, block boundaries ordered across ranks,
 * and the multiset preserved (global sum, xor and a hashed sum of the keys before
 * and after, via MPI_Allgather). A failure prints what differed and exits non-zero.
 * Rank 0 prints one summary line with the put count and the firehose hit rate
 * (hits / (hits + misses), all ranks). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "example.h" /* CHECK, FAIL, example_init */

static int me = -1;
static fh_ctx_t *ctx;

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static uint64_t mix(uint64_t k) { return splitmix(&k); }

/* LSD radix sort, 8 bits per pass; tmp holds n keys. */
static void radix_sort(uint64_t *a, uint64_t *tmp, size_t n) {
  for (int shift = 0; shift < 64; shift += 8) {
    size_t count[257] = {0};
    for (size_t i = 0; i < n; i++) count[((a[i] >> shift) & 0xff) + 1]++;
    for (int b = 0; b < 256; b++) count[b + 1] += count[b];
    for (size_t i = 0; i < n; i++) tmp[count[(a[i] >> shift) & 0xff]++] = a[i];
    memcpy(a, tmp, n * sizeof *a);
  }
}

/* out = the n smallest (low) or n largest of the sorted blocks a and b. */
static void merge_split(const uint64_t *a, const uint64_t *b, uint64_t *out, size_t n, int low) {
  if (low) {
    size_t i = 0, j = 0;
    for (size_t k = 0; k < n; k++) out[k] = (j >= n || (i < n && a[i] <= b[j])) ? a[i++] : b[j++];
  } else {
    size_t i = n, j = n;
    for (size_t k = n; k-- > 0;) out[k] = (j == 0 || (i > 0 && a[i - 1] > b[j - 1])) ? a[--i] : b[--j];
  }
}

static long parse_pos(const char *s, const char *what) {
  char *end;
  long v = strtol(s, &end, 10);
  if (*end || v <= 0) {
    if (me == 0) fprintf(stderr, "bitonic: %s must be a positive integer, got \"%s\"\n", what, s);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  return v;
}

int main(int argc, char **argv) {
  int nranks;
  ctx = example_init(&argc, &argv, &me, &nranks);
  size_t n = argc > 1 ? (size_t)parse_pos(argv[1], "keys") : 1024;
  long reps = argc > 2 ? parse_pos(argv[2], "reps") : 3500;

  int p = 1, logp = 0;
  while (2 * p <= nranks) p *= 2, logp++;
  int active = me < p;
  size_t bytes = n * sizeof(uint64_t);

  uint64_t *keys = malloc(bytes), *tmp = malloc(bytes);
  uint64_t *recv = malloc(2 * bytes); /* the partner's puts land here; plain malloc */
  if (!keys || !tmp || !recv) FAIL("malloc");
  uint64_t mine = (uint64_t)(uintptr_t)recv, *all = malloc(sizeof(uint64_t) * (size_t)nranks);
  MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
  uint64_t *gath = malloc(sizeof(uint64_t) * 7 * (size_t)nranks);

  CHECK(fh_barrier(ctx));
  double t0 = MPI_Wtime(), tcheck = 0;
  long step = 0; /* selects the receive half; runs on across sorts */
  for (long rep = 0; rep < reps; rep++) {
    uint64_t sums[2] = {0, 0}, x = 0; /* sum, hashed sum, xor of the keys before sorting */
    if (active) {
      uint64_t seed = ((uint64_t)rep << 20) ^ (uint64_t)me ^ 0x5eedull;
      for (size_t i = 0; i < n; i++) {
        keys[i] = splitmix(&seed);
        sums[0] += keys[i], sums[1] += mix(keys[i]), x ^= keys[i];
      }
      radix_sort(keys, tmp, n);
    }
    for (int k = 1; k <= logp; k++)
      for (int j = k - 1; j >= 0; j--, step++) {
        uint64_t *in = recv + (size_t)(step & 1) * n;
        int partner = me ^ (1 << j);
        if (active) {
          uint64_t *dst = (uint64_t *)(uintptr_t)all[partner] + (size_t)(step & 1) * n;
          CHECK(fh_put(ctx, partner, dst, keys, bytes));
        }
        CHECK(fh_barrier(ctx)); /* the partner's block is in `in` */
        if (active) {
          int ascending = ((me >> k) & 1) == 0;
          merge_split(keys, in, tmp, n, (me < partner) == ascending);
          uint64_t *t = keys;
          keys = tmp, tmp = t;
        }
      }

    /* Check this sort: one allgather of {sum, hashed sum before; sum, hashed sum
     * after; xor before ^ after; first, last key} per rank, checked on every rank. */
    double tc = MPI_Wtime();
    uint64_t v[7] = {sums[0], sums[1], 0, 0, x, 0, 0};
    if (active) {
      for (size_t i = 0; i < n; i++) {
        if (i && keys[i - 1] > keys[i]) FAIL("sort %ld: block not sorted at key %zu", rep, i);
        v[2] += keys[i], v[3] += mix(keys[i]), v[4] ^= keys[i];
      }
      v[5] = keys[0], v[6] = keys[n - 1];
    }
    MPI_Allgather(v, 7, MPI_UINT64_T, gath, 7, MPI_UINT64_T, MPI_COMM_WORLD);
    uint64_t g[5] = {0, 0, 0, 0, 0};
    for (int i = 0; i < p; i++) {
      const uint64_t *w = gath + 7 * (size_t)i;
      g[0] += w[0], g[1] += w[1], g[2] += w[2], g[3] += w[3], g[4] ^= w[4];
      if (i && gath[7 * (size_t)i - 1] > w[5]) FAIL("sort %ld: last key of rank %d > first key of rank %d", rep, i - 1, i);
    }
    if (g[0] != g[2] || g[1] != g[3] || g[4] != 0)
      FAIL("sort %ld: keys not preserved (sum %llx -> %llx, hashed sum %llx -> %llx, xor diff %llx)", rep,
           (unsigned long long)g[0], (unsigned long long)g[2], (unsigned long long)g[1], (unsigned long long)g[3],
           (unsigned long long)g[4]);
    tcheck += MPI_Wtime() - tc;
  }
  double el = MPI_Wtime() - t0 - tcheck, tmax = 0;

  fh_stats_t st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK(fh_stats_get(ctx, &st));
  uint64_t loc[3] = {st.hits, st.misses, st.puts}, tot[3] = {0, 0, 0};
  MPI_Reduce(loc, tot, 3, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(&el, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  CHECK(fh_finalize(ctx));
  if (me == 0) {
    char rate[32] = "n/a (no puts)";
    if (tot[0] + tot[1]) snprintf(rate, sizeof rate, "%.3f %%", 100.0 * (double)tot[0] / (double)(tot[0] + tot[1]));
    printf("bitonic: %d ranks (%d sorting, %d idle), %zu keys/rank, %ld sorts verified, "
           "%llu puts, hits %llu misses %llu, hit rate %s, %.3f s (excluding checks)\n",
           nranks, p, nranks - p, n, reps, (unsigned long long)tot[2], (unsigned long long)tot[0],
           (unsigned long long)tot[1], rate, tmax);
    fflush(stdout);
  }
  free(keys); free(tmp); free(recv); free(all); free(gath);
  MPI_Finalize();
  return 0;
}
