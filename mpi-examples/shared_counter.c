/* shared_counter.c -- dynamic work distribution with one remote fetch&add counter.
 *
 * A "next work item" counter (a uint64_t) lives in rank 0's fh_malloc memory. Every
 * rank, rank 0 included, grabs work like a ticket dispenser:
 *
 *   for (;;) { fh_atomic_fetch_add_u64(ctx, 0, counter, 1, &t); if (t >= N) break; work(t); }
 *
 * Items cost very different amounts of time, so fast ranks simply take more of them:
 * no master hands out work and rank 0's CPU does nothing for the others' grabs
 * (one node: a CPU atomic on the node-shared library heap; across nodes: MPI atomics).
 * Rank 0 touches the counter only through fh_atomic_* with its own rank, as the
 * header's rule for atomic words says.
 *
 * Checked (any failure prints what differed and exits non-zero):
 *   - every item 0 .. N-1 was taken exactly once (per-item counts summed over ranks
 *     with fh_allreduce FH_UINT32 FH_SUM must all be 1);
 *   - the counter ends at N + size (each rank's last grab found it exhausted);
 *   - the sum of all work results (fh_reduce FH_UINT64 FH_SUM to rank 0) equals a
 *     serial recomputation on rank 0.
 * Rank 0 prints how many items each rank took (fh_allgather) and the grab rate.
 *
 * Run: mpirun -np 4 ./shared_counter [N]     (N items, default 100000; any number of ranks) */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "example.h" /* CHECK, FAIL, example_init, example_finalize */

/* Work item t: an LCG walk of 0 .. 4095 steps (item-dependent); a 20-bit result. */
static uint64_t work(uint64_t t) {
  uint64_t steps = (t * 2654435761u) % 4096, x = t + 1;
  for (uint64_t i = 0; i < steps; i++) x = x * 6364136223846793005ull + 1442695040888963407ull;
  return x >> 44;
}

int main(int argc, char **argv) {
  int rank, size;
  fh_ctx_t *ctx = example_init(&argc, &argv, &rank, &size);
  uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 100000;
  if (n == 0 || n > 100000000) FAIL("N must be 1 .. 100000000");

  /* The counter at rank 0; its address goes to everybody by fh_broadcast. */
  uint64_t *counter = NULL;
  if (rank == 0) {
    counter = fh_malloc(ctx, sizeof *counter);
    if (!counter) FAIL("fh_malloc failed");
    CHECK(fh_atomic_set_u64(ctx, 0, counter, 0));
  }
  uint64_t caddr = (uint64_t)(uintptr_t)counter;
  CHECK(fh_broadcast(ctx, 0, &caddr, sizeof caddr));
  counter = (uint64_t *)(uintptr_t)caddr;

  uint32_t *taken = calloc(n, sizeof *taken); /* taken[t] = 1 if this rank did item t */
  uint32_t *total = calloc(n, sizeof *total);
  if (!taken || !total) FAIL("out of memory");
  uint64_t mine = 0, sum = 0;

  CHECK(fh_barrier(ctx));
  double t0 = MPI_Wtime();
  for (;;) {
    uint64_t t;
    CHECK(fh_atomic_fetch_add_u64(ctx, 0, counter, 1, &t));
    if (t >= n) break;
    if (taken[t]) FAIL("item %llu handed to this rank twice", (unsigned long long)t);
    taken[t] = 1;
    sum += work(t);
    mine++;
  }
  double secs = MPI_Wtime() - t0;
  CHECK(fh_barrier(ctx));

  /* Exactly once: the per-item counts of all ranks add up to 1 everywhere. */
  CHECK(fh_allreduce(ctx, taken, total, n, FH_UINT32, FH_SUM));
  for (uint64_t t = 0; t < n; t++)
    if (total[t] != 1) FAIL("item %llu was taken %u times", (unsigned long long)t, total[t]);

  /* Each rank's final grab overshot by one: the counter ends at n + size. */
  uint64_t final_count;
  CHECK(fh_atomic_fetch_u64(ctx, 0, counter, &final_count));
  if (final_count != n + (uint64_t)size)
    FAIL("counter ends at %llu, expected %llu", (unsigned long long)final_count,
         (unsigned long long)(n + (uint64_t)size));

  uint64_t all_sum = 0;
  CHECK(fh_reduce(ctx, 0, &sum, rank == 0 ? &all_sum : NULL, 1, FH_UINT64, FH_SUM));
  uint64_t *per_rank = malloc((size_t)size * sizeof *per_rank);
  double max_secs;
  if (!per_rank) FAIL("out of memory");
  CHECK(fh_allgather(ctx, &mine, sizeof mine, per_rank));
  CHECK(fh_allreduce(ctx, &secs, &max_secs, 1, FH_DOUBLE, FH_MAX));

  if (rank == 0) {
    uint64_t serial = 0, counted = 0;
    for (uint64_t t = 0; t < n; t++) serial += work(t);
    if (all_sum != serial)
      FAIL("sum of the results %llu, serial recomputation %llu", (unsigned long long)all_sum,
           (unsigned long long)serial);
    printf("shared_counter: %llu work items handed out by fetch&add on rank 0's counter, %d ranks\n",
           (unsigned long long)n, size);
    printf("  items taken per rank:");
    for (int r = 0; r < size; r++) {
      printf(" %llu", (unsigned long long)per_rank[r]);
      counted += per_rank[r];
    }
    printf("  (sum %llu)\n", (unsigned long long)counted);
    printf("  every item taken exactly once, counter ended at N + %d, result sum %llu matches serial\n",
           size, (unsigned long long)all_sum);
    printf("  %.3f s, %.0f grabs/s over all ranks\n", max_secs,
           (double)(n + (uint64_t)size) / (max_secs > 0 ? max_secs : 1e-9));
  }
  free(per_rank);
  free(taken);
  free(total);
  CHECK(fh_barrier(ctx));
  if (rank == 0) fh_free(ctx, counter);
  example_finalize(ctx);
  return 0;
}
