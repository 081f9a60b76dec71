/* Seed 004 ch. 6, progress without the application: with the progress thread on
 * (this test sets FH_PROGRESS=thread itself), rank 0 computes for SLEEP seconds
 * without calling the library, and the other ranks must not be held up by it
 * beyond its own participation:
 *   1. a split-phase barrier rank 0 notified before computing completes on the
 *      others (the dissemination/tree rounds rank 0 must forward run on its thread);
 *   2. atomics on a word in rank 0's fh_malloc memory complete;
 *   3. a lock homed on rank 0 is acquired and released by everyone;
 *   4. a broadcast rank 0 already took part in (and returned from) completes.
 * The others assert they finished each part well before rank 0 wakes up (half of
 * SLEEP: a generous functional bound, not a speed measurement).
 * Run: mpirun -np N test_sync_progress (N >= 2; also with FH_SHM=0 and FH_BARRIER=tree).
 * With FH_SHM=0 and more ranks than cores, the atomics wait inside Open MPI, whose
 * sched_yield starves some ranks for seconds on Linux 6.6+ (README "Running on a
 * cluster"): add --mca mpi_yield_when_idle 0 there. */
#include "common.h"
#include <time.h>
#include <unistd.h>

#define SLEEP 2.0

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Rank 0 computes without library calls; everyone else runs `part` and checks it
 * finished within SLEEP/2. */
#define WHILE_RANK0_COMPUTES(label, rank0_first, part)                           \
  do {                                                                           \
    CHECK_OK(fh_barrier(ctx));                                                   \
    if (rank == 0) {                                                             \
      rank0_first;                                                               \
      double t_end_ = now() + SLEEP;                                             \
      volatile double x_ = 0;                                                    \
      while (now() < t_end_) x_ += 1.0;                                          \
    } else {                                                                     \
      double t0_ = now();                                                        \
      part;                                                                      \
      double dt_ = now() - t0_;                                                  \
      CHECK(dt_ < SLEEP / 2, "%s took %.3f s while rank 0 computed: it waited for rank 0", \
            label, dt_);                                                         \
    }                                                                            \
  } while (0)

int main(int argc, char **argv) {
  setenv("FH_PROGRESS", "thread", 1);
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &fh_test_rank);
  int rank = fh_test_rank, n;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (provided < MPI_THREAD_MULTIPLE)
    FAILF("this test needs MPI_THREAD_MULTIPLE (got %d)", provided);
  fh_ctx_t *ctx;
  CHECK_OK(fh_init(MPI_COMM_WORLD, NULL, &ctx));

  uint64_t *word = fh_malloc(ctx, 64);
  CHECK(word != NULL, "fh_malloc");
  CHECK_OK(fh_atomic_set_u64(ctx, rank, word, 0));
  void *ptrs[64];
  CHECK(n <= 64, "at most 64 ranks");
  exchange_ptrs(word, ptrs, MPI_COMM_WORLD);
  uint64_t *w0 = ptrs[0];
  fh_lock_t *lock;
  CHECK_OK(fh_lock_create(ctx, 0, &lock));

  /* 1. Barrier: rank 0 notifies, then computes; it waits only afterwards. */
  WHILE_RANK0_COMPUTES("split-phase barrier",
                       CHECK_OK(fh_barrier_notify(ctx, 11, 0)),
                       { usleep(200000); /* rank 0 notified alone: it must forward later */
                         t0_ = now();
                         CHECK_OK(fh_barrier_notify(ctx, 11, 0));
                         CHECK_OK(fh_barrier_wait(ctx, 11, 0)); });
  if (rank == 0) CHECK_OK(fh_barrier_wait(ctx, 11, 0));

  /* 2. Atomics on rank 0's memory. */
  const int OPS = 200;
  WHILE_RANK0_COMPUTES("atomics homed on rank 0", (void)0, {
    for (int i = 0; i < OPS; i++) {
      uint64_t old;
      CHECK_OK(fh_atomic_fetch_add_u64(ctx, 0, w0, 1, &old));
    }
  });
  CHECK_OK(fh_barrier(ctx));
  uint64_t v;
  CHECK_OK(fh_atomic_fetch_u64(ctx, 0, w0, &v));
  CHECK(v == (uint64_t)OPS * (uint64_t)(n - 1), "counter %llu, want %llu",
        (unsigned long long)v, (unsigned long long)OPS * (unsigned long long)(n - 1));

  /* 3. A lock homed on rank 0. */
  WHILE_RANK0_COMPUTES("lock homed on rank 0", (void)0, {
    for (int i = 0; i < 50; i++) {
      CHECK_OK(fh_lock_acquire(lock));
      uint64_t old;
      CHECK_OK(fh_atomic_fetch_add_u64(ctx, 0, w0, 1, &old));
      CHECK_OK(fh_lock_release(lock));
    }
  });

  /* 4. A broadcast rank 0 took part in before computing (root 1). */
  char buf[4096];
  WHILE_RANK0_COMPUTES("broadcast after rank 0 returned",
                       CHECK_OK(fh_broadcast(ctx, 1 % n, buf, sizeof buf)), {
    if (rank == 1) memset(buf, 0x5a, sizeof buf);
    CHECK_OK(fh_broadcast(ctx, 1, buf, sizeof buf));
    for (size_t i = 0; i < sizeof buf; i++) CHECK(buf[i] == 0x5a, "byte %zu", i);
  });
  CHECK_OK(fh_barrier(ctx));

  CHECK_OK(fh_lock_destroy(lock));
  fh_free(ctx, word);
  CHECK_OK(fh_finalize(ctx));
  TEST_PASS("sync_progress");
  MPI_Finalize();
  return 0;
}
