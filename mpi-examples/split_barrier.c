/* split_barrier.c -- a split-phase barrier hides independent work behind a late rank.
 *
 * The last rank arrives LATE ms late at every barrier (it naps: busy elsewhere; it
 * has no share of the work). Every other rank has WORK ms of computation that does
 * not depend on the barrier. Three ways to run one episode on those ranks:
 *
 *   plain:  fh_barrier(ctx);  work(WORK);
 *           the others sit in the barrier for LATE ms, then compute: LATE + WORK
 *   split:  fh_barrier_notify(ctx, id, 0);  work(WORK);  fh_barrier_wait(ctx, id, 0);
 *           the work runs while the late rank is still missing: max(LATE, WORK)
 *   try:    fh_barrier_notify(ctx, id, 0);
 *           while (fh_barrier_try(ctx, id, 0) == FH_NOT_READY) work(slice);
 *           then the rest of WORK: as split, and it shows how much got done before
 *           the barrier completed
 *
 * The late rank just arrives (fh_barrier, or notify + wait), notifying with
 * FH_BARRIER_ANONYMOUS in the split/try episodes (an anonymous arrival matches any
 * id). Rank 0 prints, for the ranks that are on time, the mean episode time of each
 * way and how much of WORK was overlapped with the wait (plain minus split; at most
 * min(LATE, WORK)).
 *
 * Checked (exits non-zero on failure): no rank ever leaves a barrier before every
 * rank has arrived -- each rank adds 1 to an arrival counter at rank 0
 * (fh_atomic_add_u64) just before it arrives and reads it (fh_atomic_fetch_u64) when
 * the barrier returns: it must be exactly size x episodes so far. Times are reported,
 * not checked: with more ranks than cores, Open MPI yields the CPU in every idle MPI
 * poll (mpi_yield_when_idle), which each fh_barrier_try makes, so the try way then
 * loses a peer's time slice per call (try --mca mpi_yield_when_idle 0).
 *
 * Run: mpirun -np 4 ./split_barrier [LATE_ms [WORK_ms [EPISODES]]]   (>= 2 ranks;
 *      defaults 20, 15, 10) */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "example.h" /* CHECK, FAIL, example_init, example_finalize */

enum { PLAIN, SPLIT, TRY, NMODES };
static const char *mode_name[NMODES] = {"fh_barrier, then work       ",
                                        "notify, work, wait          ",
                                        "notify, work slices + try   "};

static int rank, size, late;
static fh_ctx_t *ctx;
static uint64_t *arrivals;   /* rank 0's counter */
static uint64_t episodes_done;

/* The application's computation: LCG steps for `ms` milliseconds of wall time
 * (time-based, so the comparison holds when ranks share cores). Returns the ms spent. */
static volatile uint64_t sink_v;
static double work_for(double ms) {
  double t0 = MPI_Wtime(), t;
  uint64_t x = sink_v;
  do {
    for (int i = 0; i < 1000; i++) x = x * 6364136223846793005ull + 1442695040888963407ull;
  } while ((t = MPI_Wtime()) - t0 < ms * 1e-3);
  sink_v = x;
  return (t - t0) * 1e3;
}

static void nap_ms(double ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)((ms - 1000.0 * (double)(time_t)(ms / 1000)) * 1e6)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* After a barrier returned: every rank's arrival of this episode must be counted. */
static void check_arrivals(const char *how) {
  uint64_t seen;
  CHECK(fh_atomic_fetch_u64(ctx, 0, arrivals, &seen));
  uint64_t want = (episodes_done + 1) * (uint64_t)size;
  if (seen != want)
    FAIL("%s returned after %llu arrivals, expected %llu: a rank left before all arrived", how,
         (unsigned long long)seen, (unsigned long long)want);
}

int main(int argc, char **argv) {
  ctx = example_init(&argc, &argv, &rank, &size);
  double late_ms = argc > 1 ? atof(argv[1]) : 20.0;
  double work_ms = argc > 2 ? atof(argv[2]) : 15.0;
  int neps = argc > 3 ? atoi(argv[3]) : 10;
  if (size < 2) FAIL("run with at least 2 ranks");
  if (late_ms < 0 || late_ms > 10000 || work_ms <= 0 || work_ms > 10000 || neps < 1 || neps > 10000)
    FAIL("usage: split_barrier [LATE_ms (0..10000) [WORK_ms (>0..10000) [EPISODES (1..10000)]]]");
  late = rank == size - 1;

  if (rank == 0) {
    arrivals = fh_malloc(ctx, sizeof *arrivals);
    if (!arrivals) FAIL("fh_malloc failed");
    CHECK(fh_atomic_set_u64(ctx, 0, arrivals, 0));
  }
  uint64_t a = (uint64_t)(uintptr_t)arrivals;
  CHECK(fh_broadcast(ctx, 0, &a, sizeof a));
  arrivals = (uint64_t *)(uintptr_t)a;

  double sum_ms[NMODES] = {0}; /* per way: episode times */
  double before_ms = 0;         /* try: work done before the barrier completed */
  double alone_ms = 0;          /* plain: the work by itself */
  for (int e = 0; e < NMODES * neps; e++) {
    int mode = e % NMODES;
    int64_t id = 1000 + e;
    int flags = late ? FH_BARRIER_ANONYMOUS : 0;
    CHECK(fh_barrier(ctx)); /* line everybody up */
    double t0 = MPI_Wtime();
    if (late) nap_ms(late_ms);
    CHECK(fh_atomic_add_u64(ctx, 0, arrivals, 1));
    if (late) { /* arrive, no work */
      if (mode == PLAIN) {
        CHECK(fh_barrier(ctx));
      } else {
        CHECK(fh_barrier_notify(ctx, id, flags));
        CHECK(fh_barrier_wait(ctx, id, flags));
      }
      check_arrivals("the late rank's barrier");
    } else if (mode == PLAIN) {
      CHECK(fh_barrier(ctx));
      check_arrivals("fh_barrier");
      alone_ms += work_for(work_ms);
    } else if (mode == SPLIT) {
      CHECK(fh_barrier_notify(ctx, id, flags));
      work_for(work_ms);
      CHECK(fh_barrier_wait(ctx, id, flags));
      check_arrivals("fh_barrier_wait");
    } else {
      double done = 0;
      CHECK(fh_barrier_notify(ctx, id, flags));
      int rc;
      while ((rc = fh_barrier_try(ctx, id, flags)) == FH_NOT_READY)
        if (done < work_ms) done += work_for(work_ms - done < work_ms / 50 ? work_ms - done : work_ms / 50);
      CHECK(rc);
      check_arrivals("fh_barrier_try");
      before_ms += done;
      if (done < work_ms) work_for(work_ms - done);
    }
    if (!late) sum_ms[mode] += (MPI_Wtime() - t0) * 1e3;
    episodes_done++;
  }

  /* Means over the ranks that are not late. */
  double loc[NMODES + 2], tot[NMODES + 2];
  for (int m = 0; m < NMODES; m++) loc[m] = sum_ms[m] / neps;
  loc[NMODES] = before_ms / neps;
  loc[NMODES + 1] = alone_ms / neps;
  CHECK(fh_reduce(ctx, 0, loc, tot, NMODES + 2, FH_DOUBLE, FH_SUM));
  if (rank == 0) {
    for (int m = 0; m < NMODES + 2; m++) tot[m] /= size - 1;
    double w = tot[NMODES + 1], hidden = tot[PLAIN] - tot[SPLIT];
    printf("split_barrier: %d ranks, rank %d arrives %.1f ms late, the others have %.1f ms of\n"
           "  independent work per barrier (%d episodes each way; means over the %d ranks on time)\n",
           size, size - 1, late_ms, work_ms, neps, size - 1);
    printf("  %s %7.2f ms per episode (the work alone took %.2f ms)\n", mode_name[PLAIN], tot[PLAIN], w);
    printf("  %s %7.2f ms  -> %.2f ms of work overlapped with the wait (%.0f %% of it)\n",
           mode_name[SPLIT], tot[SPLIT], hidden, w > 0 ? 100.0 * hidden / w : 0.0);
    printf("  %s %7.2f ms  -> %.2f ms of work done before the barrier completed\n", mode_name[TRY],
           tot[TRY], tot[NMODES]);
    printf("  every barrier: no rank left before all %d had arrived (arrival counter checked)\n", size);
  }
  CHECK(fh_barrier(ctx));
  if (rank == 0) fh_free(ctx, arrivals);
  example_finalize(ctx);
  return 0;
}
