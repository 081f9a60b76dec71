/* Barriers and small collectives as a stranger writes them from the header: MPI_Init,
 * a context on the world, MPI_Barrier between phases, and every rank arriving late by
 * a random amount before each call (ranks outnumber cores in make test). Run at every
 * rank count from 2 to 8 (scripts/run-c-tests.sh), also with FH_SHM=0 and with the
 * node split in groups (FH_SHM_MAX_RANKS), so the node barrier, the node reductions
 * and the tree paths all meet skew.
 *  a. fh_barrier: before each barrier every rank adds 1 to a counter at rank 0; after
 *     it, every rank must read at least (round + 1) * np there (nobody left early);
 *  b. split phase: notify, compute a random while polling fh_barrier_try, wait; a
 *     named id the same on all ranks;
 *  c. fh_allreduce and fh_reduce (random root) of int64 and integer-valued doubles,
 *     SUM/MIN/MAX, random counts from 1 to 700 elements (both sides of the 4 KiB
 *     node path), checked element by element against MPI_Allreduce / MPI_Reduce of
 *     the same inputs;
 *  d. fh_broadcast from a random root of 1 B to 64 KiB, checked against the root's
 *     pattern. */
#include "common.h"
#include <time.h>

#define ROUNDS 150

static int me, np;
static fh_ctx_t *ctx;

/* Sleep 0..max_us microseconds (this rank's own random stream). */
static void skew(uint64_t *rng, unsigned max_us) {
  unsigned us = (unsigned)(rng_next(rng) % (max_us + 1));
  if (us == 0) return;
  struct timespec t = {0, (long)us * 1000};
  nanosleep(&t, NULL);
}

static void phase_barrier(uint64_t *mine) {
  uint64_t *cnt = fh_malloc(ctx, sizeof(uint64_t));
  CHECK(cnt != NULL, "fh_malloc");
  *cnt = 0;
  void *all[64];
  exchange_ptrs(cnt, all, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int r = 0; r < ROUNDS; r++) {
    skew(mine, 300);
    CHECK_OK(fh_atomic_add_u64(ctx, 0, (uint64_t *)all[0], 1));
    CHECK_OK(fh_barrier(ctx));
    uint64_t seen = 0;
    CHECK_OK(fh_atomic_fetch_u64(ctx, 0, (uint64_t *)all[0], &seen));
    CHECK(seen >= (uint64_t)(r + 1) * (uint64_t)np, "round %d: counter %llu after the barrier, want >= %llu",
          r, (unsigned long long)seen, (unsigned long long)(r + 1) * np);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  fh_free(ctx, cnt);
}

static void phase_split(uint64_t *mine) {
  for (int r = 0; r < ROUNDS; r++) {
    CHECK_OK(fh_barrier_notify(ctx, 1000 + r, 0));
    unsigned spins = (unsigned)(rng_next(mine) % 50);
    int rc;
    while ((rc = fh_barrier_try(ctx, 1000 + r, 0)) == FH_NOT_READY && spins-- > 0) skew(mine, 20);
    if (rc == FH_NOT_READY) CHECK_OK(fh_barrier_wait(ctx, 1000 + r, 0));
    else CHECK_OK(rc);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

static void phase_reduce(uint64_t *mine, uint64_t *shared) {
  int64_t *si = malloc(700 * 8), *fi = malloc(700 * 8), *mi = malloc(700 * 8);
  double *sd = malloc(700 * 8), *fd = malloc(700 * 8), *md = malloc(700 * 8);
  static const fh_op_t fops[3] = {FH_SUM, FH_MIN, FH_MAX};
  const MPI_Op mops[3] = {MPI_SUM, MPI_MIN, MPI_MAX};
  for (int r = 0; r < ROUNDS; r++) {
    size_t count = 1 + (size_t)(rng_next(shared) % 700);
    int o = (int)(rng_next(shared) % 3), root = (int)(rng_next(shared) % (uint64_t)np);
    int all = (int)(rng_next(shared) % 2);
    for (size_t i = 0; i < count; i++) {
      si[i] = (int64_t)(rng_next(mine) % 2000001) - 1000000;
      sd[i] = (double)((int64_t)(rng_next(mine) % 2001) - 1000);
    }
    memset(fi, 0, count * 8);
    memset(fd, 0, count * 8);
    skew(mine, 200);
    if (all) {
      CHECK_OK(fh_allreduce(ctx, si, fi, count, FH_INT64, fops[o]));
      CHECK_OK(fh_allreduce(ctx, sd, fd, count, FH_DOUBLE, fops[o]));
      MPI_Allreduce(si, mi, (int)count, MPI_INT64_T, mops[o], MPI_COMM_WORLD);
      MPI_Allreduce(sd, md, (int)count, MPI_DOUBLE, mops[o], MPI_COMM_WORLD);
    } else {
      CHECK_OK(fh_reduce(ctx, root, si, me == root ? fi : NULL, count, FH_INT64, fops[o]));
      CHECK_OK(fh_reduce(ctx, root, sd, me == root ? fd : NULL, count, FH_DOUBLE, fops[o]));
      MPI_Reduce(si, mi, (int)count, MPI_INT64_T, mops[o], root, MPI_COMM_WORLD);
      MPI_Reduce(sd, md, (int)count, MPI_DOUBLE, mops[o], root, MPI_COMM_WORLD);
    }
    if (all || me == root)
      for (size_t i = 0; i < count; i++) {
        CHECK(fi[i] == mi[i], "round %d (%s, op %d, count %zu): int64 element %zu is %lld, MPI says %lld", r,
              all ? "allreduce" : "reduce", o, count, i, (long long)fi[i], (long long)mi[i]);
        CHECK(fd[i] == md[i], "round %d (%s, op %d, count %zu): double element %zu is %g, MPI says %g", r,
              all ? "allreduce" : "reduce", o, count, i, fd[i], md[i]);
      }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  free(si); free(fi); free(mi); free(sd); free(fd); free(md);
}

static void phase_bcast(uint64_t *mine, uint64_t *shared) {
  unsigned char *buf = malloc(65536);
  for (int r = 0; r < ROUNDS; r++) {
    size_t n = 1 + (size_t)(rng_next(shared) % 65536);
    if (rng_next(shared) % 2) n = 1 + n % 4096;
    int root = (int)(rng_next(shared) % (uint64_t)np);
    uint64_t key = rng_next(shared);
    for (size_t i = 0; i < n; i++) buf[i] = me == root ? (unsigned char)mix64(key + i) : 0;
    skew(mine, 200);
    CHECK_OK(fh_broadcast(ctx, root, buf, n));
    for (size_t i = 0; i < n; i++)
      CHECK(buf[i] == (unsigned char)mix64(key + i), "round %d: broadcast of %zu B from %d: byte %zu wrong", r, n,
            root, i);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  free(buf);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  CHECK_OK(fh_init_world(NULL, &ctx));
  me = fh_rank(ctx);
  np = fh_size(ctx);
  fh_test_rank = me;
  CHECK(np <= 64, "at most 64 ranks");
  uint64_t mine = 0x5EED0000ULL + (uint64_t)me * 7919, shared = 0xC0FFEE;
  watchdog_init(ctx, 30);
  begin_phase("a. fh_barrier under skew", 60);
  phase_barrier(&mine);
  end_phase();
  begin_phase("b. split-phase named barriers", 60);
  phase_split(&mine);
  end_phase();
  begin_phase("c. reduce/allreduce against MPI", 90);
  phase_reduce(&mine, &shared);
  end_phase();
  begin_phase("d. broadcast from random roots", 90);
  phase_bcast(&mine, &shared);
  end_phase();
  CHECK_OK(fh_finalize(ctx));
  TEST_PASS("test_node_sync");
  MPI_Finalize();
  return 0;
}
