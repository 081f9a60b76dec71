/* bench_sync.c -- NIC-style synchronisation (issue 6, seed 004) against what MPI offers.
 *
 * Usage: bench_sync <mode> [outdir]          (outdir default "."; modes below)
 * Run (Open MPI; scripts/run-bench.sh does this, see its sync section):
 *   mpirun -np 2 bench_sync atomic out          (and FH_SHM=0 mpirun -np 2 ... atomic out)
 *   mpirun -np 8 bench_sync lock out            (contention 1..8; seed 004 Fig. 5.8)
 *   mpirun -np 2|4|8 bench_sync barrier out
 *   mpirun -np 2|4|8 bench_sync coll out
 * Every result is a time measured in the same launch as its baseline: the variants are
 * interleaved (batch of A, batch of B, ..., rotating which goes first every round, so
 * that the machine's changes of speed hit all alike) and each reported time is the
 * median over many such batches; ratios are fh / baseline (> 1: firehose is slower),
 * except where a line says "higher is better". Nothing here asserts a timing; what is
 * checked (aborting on failure) is the result of every operation: fetched values,
 * counters incremented under each lock (a lost update fails), broadcast and
 * allreduce data.
 *
 *  atomic   rank 0 operates on words in rank 1's memory (ranks >= 2 only sleep; rank
 *           1 waits polling the library and MPI, i.e. it is "in the library", which
 *           an MPI target may need for progress):
 *             fh     fh_atomic_fetch_add_u64 / fh_atomic_cas_u64 on fh_malloc memory
 *                    of rank 1 (one node, FH_SHM=1: CPU atomics on the node-shared
 *                    heap; FH_SHM=0: MPI compare-and-swap loops through the heap's
 *                    MPI_Win_create window);
 *             MPI    MPI_Fetch_and_op(MPI_SUM) / MPI_Compare_and_swap + MPI_Win_flush
 *                    in an MPI_Win_lock_all epoch, on three windows: MPI_Win_allocate
 *                    (the baseline; Open MPI 4.1 gives it to osc/rdma here, whose
 *                    Compare_and_swap into such a window crashes the target, so cas
 *                    on it runs only with BENCH_SYNC_ALLOC_CAS=1), MPI_Win_create
 *                    over malloc memory (the window kind FH_SHM=0 goes through) and
 *                    MPI_Win_allocate_shared (osc/sm: plain shared memory).
 *           Time per op = batch of BENCH_SYNC_ATOMIC_OPS (200) ops / 200; median over
 *           BENCH_SYNC_ATOMIC_ROUNDS (300) batches of each. Every fetched value is
 *           checked, and rank 1 checks the final words. Target: fh <= 1.10 x MPI.
 *           CSV bench_sync_atomic.csv (benchmark names end in _shm0 under FH_SHM=0).
 *
 *  lock     (a) Contention: the lock's home is the LAST rank; for k = 1 .. np
 *           (BENCH_SYNC_LOCK_K, e.g. "1 2 4 8", picks some) ranks 0 .. k-1 each do L
 *           acquire / critical section / release in a phase (L = ceil(
 *           BENCH_SYNC_LOCK_ACQ (2000) / k)); ranks not contending sleep. The critical
 *           section is the same in every variant: read a 64-bit counter at the home,
 *           add 1, write it back (no atomics: a lost update shows in the final count,
 *           which is checked for every variant and k):
 *             fh     fh_lock_acquire / fh_get + fh_put of the counter (fh_malloc at the
 *                    home) / fh_lock_release (MCS queue lock, FIFO)
 *             CAS    spin lock on a word of an MPI_Win_allocate_shared window
 *                    (BENCH_SYNC_CAS_WIN=allocate|create|shared; lock_all epoch):
 *                    MPI_Compare_and_swap(0 -> me+1) + flush until it succeeds
 *                    (sched_yield after each failure: ranks may outnumber cores),
 *                    MPI_Get + flush, MPI_Put + flush, release by MPI_Compare_and_swap
 *                    (me+1 -> 0) + flush
 *             mutex  MPI_Win_lock(MPI_LOCK_EXCLUSIVE, home) / MPI_Get + MPI_Win_flush /
 *                    MPI_Put / MPI_Win_unlock on an MPI_Win_allocate window
 *                    (BENCH_SYNC_MUTEX_WIN; what PGAS runtimes over MPI do today)
 *           Phase time = slowest contender's time from a common start to its last
 *           release; reported per rank per acquire+release (phase time / L), median
 *           over BENCH_SYNC_LOCK_ROUNDS (15) rounds of the three. Also the fairness:
 *           first contender's finish time / last's (1 for a FIFO lock). Target under
 *           contention (k = 4..8): fh >= 2x faster than the mutex (ratio <= 0.5). With
 *           more contenders than cores a FIFO lock hands over to a rank that may not
 *           be running; unfair locks let the running rank take it again.
 *           (b) Seed 004 Fig. 5.8: the home (last rank) computes for
 *           BENCH_SYNC_FIG_MS (60) ms in fixed chunks of arithmetic without calling any
 *           library, counting chunks; ranks 0 .. np-2 meanwhile loop acquire / critical
 *           section / release (variants as above) or, for "idle", sleep. Reported: the
 *           home's chunks per second (higher is better), relative to idle, and the
 *           others' acquisitions per second; median over BENCH_SYNC_FIG_ROUNDS (6).
 *           BENCH_SYNC_LOCK_PARTS ("contention fig58") picks the parts.
 *           CSV bench_sync_lock.csv (size column = contending ranks k; names end in _np<N>),
 *           bench_sync_fig58.csv.
 *
 *  barrier  (a) Latency: batches of BENCH_SYNC_BAR_BATCH (20) back-to-back barriers,
 *           time per barrier = slowest rank's batch time / batch; fh_barrier of the
 *           main context (FH_BARRIER as in the environment, default dissemination) vs
 *           MPI_Barrier (target <= 1.2), plus informational: fh_barrier of two more
 *           contexts created with FH_BARRIER=tree and FH_BARRIER=mpi. Rounds until
 *           BENCH_SYNC_BAR_SECONDS (1.5) s or 300 rounds.
 *           (b) Split phase with one late rank: rank 0 sleeps BENCH_SYNC_LATE_MS (20)
 *           ms, then notifies and waits. The others notify at once, then compute in
 *           chunks of BENCH_SYNC_CHUNK_US (50) us, calling fh_barrier_try (named id)
 *           between chunks until it returns FH_OK; reported: the CPU time of their
 *           own computation / their wall time from notify to barrier done (mean over
 *           ranks, median over reps), the same relative to a
 *           "reference" variant where they just compute for T with no barrier (what
 *           np-1 ranks on this many cores can get: 1.0 = the barrier cost them
 *           nothing), the CPU the library used meanwhile (process CPU time minus the
 *           chunks', per wall second), and how long after rank 0's notify the barrier
 *           completed on the last rank (overshoot). Against: a blocking fh_barrier in the same
 *           situation (no computation; CPU burnt waiting). BENCH_SYNC_LATE_REPS (10)
 *           reps of each, interleaved.
 *           CSV bench_sync_barrier.csv, bench_sync_split.csv.
 *
 *  coll     fh_broadcast (root 0) vs MPI_Bcast and fh_allreduce (doubles, FH_SUM) vs
 *           MPI_Allreduce (MPI_DOUBLE, MPI_SUM) at 8 B, 1 KiB, 64 KiB, 1 MiB, 16 MiB
 *           (BENCH_SYNC_COLL_SIZES, e.g. "8 64K 16M"); time per operation = slowest
 *           rank's time for a batch / batch, median over rounds (until
 *           BENCH_SYNC_COLL_SECONDS (1.0) s per size, at least 5 rounds). Target
 *           <= 1.2. Plus the tree: a second context created with FH_BCAST_LAMBDA=1
 *           (the binomial tree) broadcasts in the same rounds; reported: postal /
 *           binomial. The main context's lambda (auto = measured at its first broadcast
 *           unless FH_BCAST_LAMBDA is set) is read from fh_config_print's "broadcast
 *           tree" line and printed; when it is 1 both trees are the same, so
 *           BENCH_SYNC_LAMBDA (default 3; 0 = off) adds a third context with that
 *           lambda forced. Data: broadcast payloads carry a per-operation tag at both
 *           ends (checked on every rank after every operation, the whole buffer on
 *           the first of each size); allreduce sums exact integers (checked).
 *           CSV bench_sync_coll.csv.
 *
 * All CSVs but bench_sync_split.csv use bench.h's columns. Progress lines go to stderr. */
#include "bench.h"
#include <sched.h>
#include <unistd.h>

static fh_ctx_t *ctx;
static int me, np;

static long env_long(const char *name, long def) {
  const char *v = getenv(name);
  if (!v || !*v) return def;
  char *end;
  long x = strtol(v, &end, 10);
  if (*end == 'K' || *end == 'k') x <<= 10;
  else if (*end == 'M' || *end == 'm') x <<= 20;
  return x;
}
static double env_double(const char *name, double def) {
  const char *v = getenv(name);
  return v && *v ? atof(v) : def;
}

/* A clock every rank of the node shares (cross-rank comparisons). */
static double mono(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static void nap_us(long us) {
  struct timespec t = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&t, NULL);
}

/* A barrier over `comm` for ranks with nothing to do: serves the library, but sleeps
 * between looks so the ranks that work keep the cores (ranks may outnumber cores). */
static void sleepy_barrier(MPI_Comm comm) {
  MPI_Request req;
  int done = 0;
  MPIB(MPI_Ibarrier(comm, &req));
  for (;;) {
    FHB(fh_poll(ctx));
    MPIB(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (done) break;
    nap_us(200);
  }
}

/* Rank 0 decides whether another round runs (at least rmin, at most rmax, while the
 * time since t_start is under budget s) and tells everyone in comm. */
static int more_rounds(MPI_Comm comm, int round, int rmin, int rmax, double t_start, double budget) {
  int rank, go;
  MPI_Comm_rank(comm, &rank);
  if (rank == 0) go = round < rmin || (round < rmax && mono() - t_start < budget);
  MPIB(MPI_Bcast(&go, 1, MPI_INT, 0, comm));
  return go;
}

/* A fixed amount of arithmetic the compiler cannot drop (the "application"). */
static volatile double sink;
static void compute(long n) {
  double x = 1.0, y = 0.5;
  for (long i = 0; i < n; i++) {
    x = x * 0.9999999 + y;
    y = y * 0.9999998 + 1e-9;
  }
  sink = x + y;
}
/* Iterations of compute() that take about `us` microseconds (rank-local). */
static long calibrate_compute(double us) {
  long n = 1000;
  for (;;) {
    double t0 = mono();
    compute(n);
    double t = mono() - t0;
    if (t > 2e-3) return (long)((double)n * us * 1e-6 / t) + 1;
    n *= 2;
  }
}

/* A new context with one environment variable set (restored afterwards); the rest of
 * its settings are the main context's. */
static fh_ctx_t *ctx_with_env(const char *var, const char *val) {
  const char *old = getenv(var);
  char *saved = old ? strdup(old) : NULL;
  setenv(var, val, 1);
  fh_ctx_t *c;
  FHB(fh_init(MPI_COMM_WORLD, NULL, &c));
  if (saved) setenv(var, saved, 1);
  else unsetenv(var);
  free(saved);
  return c;
}

static void row(FILE *csv, const char *bm, const char *base, size_t size, samples_t *f, samples_t *b) {
  if (!csv) return;
  bench_row_t r = {bm, base, size, 0, 0, samples_mean(f) * 1e6, samples_mean(b) * 1e6, f->n};
  r.fh_us = samples_median(f) * 1e6;
  r.base_us = samples_median(b) * 1e6;
  bench_csv_row(csv, &r);
}

/* ===================================================================== atomic */
/* Variants: op (fetch_add, cas) x where (fh heap, MPI_Win_allocate, MPI_Win_create,
 * MPI_Win_allocate_shared). */
enum { W_FH, W_ALLOC, W_CREATE, W_SHARED, NW };
#define NA (2 * NW)
static const char *wname[NW] = {"fh", "MPI_Win_allocate", "MPI_Win_create", "MPI_Win_allocate_shared"};
static const char *opname[2] = {"fetch_add", "cas"};

/* An MPI window of `bytes` (zeroed) of the given kind. */
static void make_win(int kind, MPI_Aint bytes, uint64_t **base, MPI_Win *win) {
  if (kind == W_ALLOC) MPIB(MPI_Win_allocate(bytes, 8, MPI_INFO_NULL, MPI_COMM_WORLD, base, win));
  else if (kind == W_SHARED) MPIB(MPI_Win_allocate_shared(bytes, 8, MPI_INFO_NULL, MPI_COMM_WORLD, base, win));
  else {
    *base = aligned_alloc(64, (size_t)bytes);
    if (!*base) BENCH_DIE("out of memory");
    MPIB(MPI_Win_create(*base, bytes, 8, MPI_INFO_NULL, MPI_COMM_WORLD, win));
  }
  memset(*base, 0, (size_t)bytes);
}
static void free_win(int kind, uint64_t *base, MPI_Win *win) {
  MPIB(MPI_Win_free(win));
  if (kind == W_CREATE) free(base);
}
static int win_kind(const char *env, int def) {
  const char *v = getenv(env);
  if (!v || !*v) return def;
  if (!strcmp(v, "allocate")) return W_ALLOC;
  if (!strcmp(v, "create")) return W_CREATE;
  if (!strcmp(v, "shared")) return W_SHARED;
  BENCH_DIE("%s=%s: expected allocate, create or shared", env, v);
  return def;
}

static int run_atomic(const char *outdir) {
  if (np < 2) BENCH_DIE("atomic needs at least 2 ranks");
  const int tgt = 1;
  const char *shm = getenv("FH_SHM");
  const int shm0 = shm && !strcmp(shm, "0");
  /* Open MPI 4.1.4 (osc/rdma, chosen for MPI_Win_allocate here) crashes the target on
   * MPI_Compare_and_swap into an MPI_Win_allocate window: skipped unless asked for. */
  const int alloc_cas = env_long("BENCH_SYNC_ALLOC_CAS", 0) != 0;
  /* fh words: fh_malloc memory of rank 1 (word 0: fetch_add, 1: cas). */
  uint64_t *fw = NULL;
  if (me == tgt) {
    fw = fh_malloc(ctx, 64);
    if (!fw) BENCH_DIE("fh_malloc");
    for (int i = 0; i < 8; i++) FHB(fh_atomic_set_u64(ctx, tgt, &fw[i], 0));
  }
  uint64_t a = (uint64_t)(uintptr_t)fw;
  MPIB(MPI_Bcast(&a, 1, MPI_UINT64_T, tgt, MPI_COMM_WORLD));
  fw = (uint64_t *)(uintptr_t)a;
  uint64_t *wbase[NW] = {NULL};
  MPI_Win win[NW];
  for (int w = W_ALLOC; w < NW; w++) {
    make_win(w, 64, &wbase[w], &win[w]);
    MPIB(MPI_Win_lock_all(MPI_MODE_NOCHECK, win[w]));
  }
  bench_poll_barrier(ctx);

  const int ops = (int)env_long("BENCH_SYNC_ATOMIC_OPS", 200);
  const int rounds = (int)env_long("BENCH_SYNC_ATOMIC_ROUNDS", 300);
  uint64_t cnt[NA] = {0};
  samples_t s[NA];
  for (int v = 0; v < NA; v++) samples_init(&s[v], rounds);
  if (me == 0) {
    bench_progress("atomic: %d rounds of %d ops per variant (FH_SHM=%s)", rounds, ops, shm ? shm : "default");
    const uint64_t one = 1;
    for (int round = -5; round < rounds; round++) { /* 5 warm-up rounds */
      for (int q = 0; q < NA; q++) {
        const int v = (q + (round < 0 ? 0 : round)) % NA, op = v / NW, w = v % NW;
        if (op == 1 && w == W_ALLOC && !alloc_cas) continue;
        uint64_t old;
        double t0 = bench_now();
        for (int j = 0; j < ops; j++) {
          if (w == W_FH) {
            if (op == 0) FHB(fh_atomic_fetch_add_u64(ctx, tgt, &fw[0], 1, &old));
            else FHB(fh_atomic_cas_u64(ctx, tgt, &fw[1], cnt[v], cnt[v] + 1, &old));
          } else if (op == 0) {
            MPIB(MPI_Fetch_and_op(&one, &old, MPI_UINT64_T, tgt, 0, MPI_SUM, win[w]));
            MPIB(MPI_Win_flush(tgt, win[w]));
          } else {
            uint64_t desired = cnt[v] + 1;
            MPIB(MPI_Compare_and_swap(&desired, &cnt[v], &old, MPI_UINT64_T, tgt, 1, win[w]));
            MPIB(MPI_Win_flush(tgt, win[w]));
          }
          if (old != cnt[v])
            BENCH_DIE("%s %s: fetched %llu, expected %llu", opname[op], wname[w], (unsigned long long)old,
                      (unsigned long long)cnt[v]);
          cnt[v]++;
        }
        double t = bench_now() - t0;
        if (round >= 0) samples_add(&s[v], t / ops);
      }
    }
  }
  /* Rank 1 polls (library and MPI) meanwhile; the others sleep. */
  if (me == 0 || me == tgt) bench_poll_barrier(ctx);
  else sleepy_barrier(MPI_COMM_WORLD);
  MPIB(MPI_Bcast(cnt, NA, MPI_UINT64_T, 0, MPI_COMM_WORLD));
  if (me == tgt) {
    for (int v = 0; v < NA; v++) {
      const int op = v / NW, w = v % NW;
      uint64_t got;
      if (w == W_FH) FHB(fh_atomic_fetch_u64(ctx, tgt, &fw[op], &got));
      else {
        MPIB(MPI_Win_sync(win[w]));
        got = __atomic_load_n(&wbase[w][op], __ATOMIC_ACQUIRE);
      }
      if (got != cnt[v])
        BENCH_DIE("%s %s: the target's word is %llu after %llu operations", opname[op], wname[w],
                  (unsigned long long)got, (unsigned long long)cnt[v]);
    }
  }
  if (me == 0) {
    FILE *csv = bench_csv_open(outdir, "bench_sync_atomic");
    double med[NA];
    for (int v = 0; v < NA; v++) med[v] = s[v].n ? samples_median(&s[v]) * 1e6 : 0;
    printf("== bench_sync atomic (FH_SHM=%s): rank 0 -> 64-bit word in rank 1's memory, us per operation\n"
           "   (median of %d batches of %d; variants interleaved). fh = fh_atomic_* on fh_malloc memory;\n"
           "   MPI = MPI_Fetch_and_op(SUM) / MPI_Compare_and_swap + MPI_Win_flush in a lock_all epoch on a window\n"
           "   from MPI_Win_allocate (the baseline; osc/rdma on this Open MPI), MPI_Win_create, or\n"
           "   MPI_Win_allocate_shared (osc/sm: plain shared memory). Target fh/MPI <= 1.10.%s\n",
           shm ? shm : "1 (default)", rounds, ops,
           alloc_cas ? "" : "\n   (cas on MPI_Win_allocate: not run, Open MPI 4.1.4's osc/rdma crashes the target; "
                            "BENCH_SYNC_ALLOC_CAS=1 runs it)");
    printf("%-10s %8s %9s %7s %9s %7s %9s %7s\n", "op", "fh us", "alloc us", "fh/all", "create us", "fh/cre",
           "shared us", "fh/shm");
    for (int op = 0; op < 2; op++) {
      const double *m = &med[op * NW];
      printf("%-10s %8.3f", opname[op], m[W_FH]);
      for (int w = W_ALLOC; w < NW; w++) {
        if (m[w] > 0) printf(" %9.3f %7.2f", m[w], m[W_FH] / m[w]);
        else printf(" %9s %7s", "-", "-");
      }
      printf("\n");
    }
    fflush(stdout);
    static const char *wtag[NW] = {"", "", "_vs_create", "_vs_shared"};
    static const char *mpiop[2] = {"MPI_Fetch_and_op(SUM)+MPI_Win_flush", "MPI_Compare_and_swap+MPI_Win_flush"};
    for (int op = 0; op < 2; op++)
      for (int w = W_ALLOC; w < NW; w++) {
        if (!s[op * NW + w].n) continue;
        char bm[64], base[128];
        snprintf(bm, sizeof bm, "atomic_%s%s%s", op ? "cas" : "fadd", wtag[w], shm0 ? "_shm0" : "");
        snprintf(base, sizeof base, "%s (%s)", mpiop[op], wname[w]);
        row(csv, bm, base, 8, &s[op * NW + W_FH], &s[op * NW + w]);
      }
    fclose(csv);
  }
  for (int w = W_ALLOC; w < NW; w++) MPIB(MPI_Win_unlock_all(win[w]));
  bench_poll_barrier(ctx);
  for (int w = W_ALLOC; w < NW; w++) free_win(w, wbase[w], &win[w]);
  if (me == tgt) fh_free(ctx, fw);
  for (int v = 0; v < NA; v++) samples_free(&s[v]);
  return 0;
}

/* ======================================================================= lock */
enum { L_FH, L_CAS, L_MUTEX, NL };
static const char *lname[NL] = {"fh", "CAS", "mutex"};
static int home;
static fh_lock_t *lk;
static uint64_t *fctr;       /* fh counter at the home (fh_malloc) */
static MPI_Win wcas, wmtx;   /* [0] lock word, [1] counter / [0] counter */
static uint64_t *cas_base, *mtx_base;
static int cas_kind, mtx_kind; /* window kinds (W_*) */
static uint64_t acq_done[NL]; /* acquisitions this rank completed */

static void cas_acquire(void) {
  const uint64_t mine = (uint64_t)me + 1, zero = 0;
  uint64_t old;
  for (;;) {
    MPIB(MPI_Compare_and_swap(&mine, &zero, &old, MPI_UINT64_T, home, 0, wcas));
    MPIB(MPI_Win_flush(home, wcas));
    if (old == 0) return;
    sched_yield();
  }
}
static void cas_release(void) {
  const uint64_t mine = (uint64_t)me + 1, zero = 0;
  uint64_t old;
  MPIB(MPI_Compare_and_swap(&zero, &mine, &old, MPI_UINT64_T, home, 0, wcas));
  MPIB(MPI_Win_flush(home, wcas));
  if (old != mine) BENCH_DIE("CAS lock: released a lock word holding %llu", (unsigned long long)old);
}

/* One acquire / critical section (counter += 1 by get + put) / release. */
static void lock_once(int v) {
  uint64_t x;
  switch (v) {
  case L_FH:
    FHB(fh_lock_acquire(lk));
    FHB(fh_get(ctx, &x, home, fctr, 8));
    x++;
    FHB(fh_put(ctx, home, fctr, &x, 8));
    FHB(fh_lock_release(lk));
    break;
  case L_CAS:
    cas_acquire();
    MPIB(MPI_Get(&x, 1, MPI_UINT64_T, home, 1, 1, MPI_UINT64_T, wcas));
    MPIB(MPI_Win_flush(home, wcas));
    x++;
    MPIB(MPI_Put(&x, 1, MPI_UINT64_T, home, 1, 1, MPI_UINT64_T, wcas));
    MPIB(MPI_Win_flush(home, wcas));
    cas_release();
    break;
  default:
    MPIB(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, home, 0, wmtx));
    MPIB(MPI_Get(&x, 1, MPI_UINT64_T, home, 0, 1, MPI_UINT64_T, wmtx));
    MPIB(MPI_Win_flush(home, wmtx));
    x++;
    MPIB(MPI_Put(&x, 1, MPI_UINT64_T, home, 0, 1, MPI_UINT64_T, wmtx));
    MPIB(MPI_Win_unlock(home, wmtx));
    break;
  }
  acq_done[v]++;
}

/* The three counters as the home sees them (home only). */
static void read_counters(uint64_t out[NL]) {
  out[L_FH] = __atomic_load_n(fctr, __ATOMIC_ACQUIRE);
  MPIB(MPI_Win_sync(wcas));
  out[L_CAS] = __atomic_load_n(&cas_base[1], __ATOMIC_ACQUIRE);
  MPIB(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, home, 0, wmtx));
  out[L_MUTEX] = __atomic_load_n(&mtx_base[0], __ATOMIC_ACQUIRE);
  MPIB(MPI_Win_unlock(home, wmtx));
}

/* Every rank's acquisitions summed must equal the home's counters. */
static void check_counters(const char *what) {
  sleepy_barrier(MPI_COMM_WORLD);
  uint64_t tot[NL];
  MPIB(MPI_Reduce(acq_done, tot, NL, MPI_UINT64_T, MPI_SUM, home, MPI_COMM_WORLD));
  if (me == home) {
    uint64_t got[NL];
    read_counters(got);
    for (int v = 0; v < NL; v++)
      if (got[v] != tot[v])
        BENCH_DIE("%s, %s lock: counter %llu after %llu acquisitions (lost update: mutual exclusion broken)", what,
                  lname[v], (unsigned long long)got[v], (unsigned long long)tot[v]);
  }
}

static void lock_contention(const char *outdir) {
  int ks[64], nk = 0;
  const char *kv = getenv("BENCH_SYNC_LOCK_K");
  if (kv && *kv) {
    for (const char *c = kv; *c && nk < 64;) {
      char *end;
      long k = strtol(c, &end, 10);
      if (end == c) break;
      if (k >= 1 && k <= np) ks[nk++] = (int)k;
      c = end;
      while (*c == ' ' || *c == ',') c++;
    }
  } else {
    for (int k = 1; k <= np && nk < 64; k++) ks[nk++] = k;
  }
  const int acq = (int)env_long("BENCH_SYNC_LOCK_ACQ", 2000);
  const int rounds = (int)env_long("BENCH_SYNC_LOCK_ROUNDS", 15);
  FILE *csv = me == 0 ? bench_csv_open(outdir, "bench_sync_lock") : NULL;
  if (me == 0) {
    printf("== bench_sync lock, contention: home = rank %d; ranks 0..k-1 each do L = %d/k acquire + critical\n"
           "   section (get counter, +1, put) + release per phase; us per acquire+release per rank = slowest\n"
           "   rank's phase time / L (median of %d rounds, variants interleaved). fh = MCS queue lock;\n"
           "   CAS = MPI_Compare_and_swap spin lock (lock_all, yield on failure) on an %s window;\n"
           "   mutex = MPI_Win_lock(EXCLUSIVE) on an %s window.\n"
           "   'first/last' = first contender's finish time / last's (1 = fair; small = one rank ran ahead).\n"
           "   Target: mutex/fh >= 2 under contention (k = 4..8). Counters checked (no lost update).\n",
           home, acq, rounds, wname[cas_kind], wname[mtx_kind]);
    printf("%3s %5s %10s %10s %10s %8s %8s  %-23s  %s\n", "k", "L", "fh us", "CAS us", "mutex us", "CAS/fh", "mutex/fh",
           "us/acquisition fh CAS mtx", "first/last fh CAS mtx");
    fflush(stdout);
  }
  samples_t s[NL], fair[NL];
  for (int v = 0; v < NL; v++) {
    samples_init(&s[v], rounds);
    samples_init(&fair[v], rounds);
  }
  for (int ki = 0; ki < nk; ki++) {
    const int k = ks[ki];
    const int L = (acq + k - 1) / k;
    MPI_Comm cc;
    MPIB(MPI_Comm_split(MPI_COMM_WORLD, me < k ? 0 : MPI_UNDEFINED, me, &cc));
    bench_progress("lock contention: k = %d ranks, %d acquisitions each per phase, %d rounds", k, L, rounds);
    for (int v = 0; v < NL; v++) {
      samples_reset(&s[v]);
      samples_reset(&fair[v]);
    }
    if (me < k) {
      for (int round = -1; round < rounds; round++) { /* round -1: warm-up */
        for (int q = 0; q < NL; q++) {
          int v = (q + (round < 0 ? 0 : round) + ki) % NL;
          MPIB(MPI_Barrier(cc));
          double t0 = mono();
          for (int i = 0; i < L; i++) lock_once(v);
          double t = mono() - t0, tmax, tmin;
          MPIB(MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, cc));
          MPIB(MPI_Reduce(&t, &tmin, 1, MPI_DOUBLE, MPI_MIN, 0, cc));
          if (round >= 0 && me == 0) {
            samples_add(&s[v], tmax / L);
            samples_add(&fair[v], tmin / tmax);
          }
        }
      }
      MPIB(MPI_Comm_free(&cc));
    }
    check_counters("contention");
    if (me == 0) {
      double m[NL];
      for (int v = 0; v < NL; v++) m[v] = samples_median(&s[v]) * 1e6;
      printf("%3d %5d %10.3f %10.3f %10.3f %8.2f %8.2f  %7.3f %7.3f %7.3f  %5.2f %5.2f %5.2f\n", k, L, m[L_FH], m[L_CAS],
             m[L_MUTEX], m[L_CAS] / m[L_FH], m[L_MUTEX] / m[L_FH], m[L_FH] / k, m[L_CAS] / k, m[L_MUTEX] / k,
             samples_median(&fair[L_FH]), samples_median(&fair[L_CAS]), samples_median(&fair[L_MUTEX]));
      fflush(stdout);
      char bm[64];
      snprintf(bm, sizeof bm, "lock_vs_mutex_np%d", np);
      row(csv, bm, "MPI_Win_lock(EXCLUSIVE)+MPI_Get+flush+MPI_Put+MPI_Win_unlock", (size_t)k, &s[L_FH], &s[L_MUTEX]);
      snprintf(bm, sizeof bm, "lock_vs_casspin_np%d", np);
      row(csv, bm, "MPI_Compare_and_swap spin lock + MPI_Get/MPI_Put + flushes", (size_t)k, &s[L_FH], &s[L_CAS]);
    }
  }
  if (csv) fclose(csv);
  for (int v = 0; v < NL; v++) {
    samples_free(&s[v]);
    samples_free(&fair[v]);
  }
}

/* Seed 004 Fig. 5.8: the home computes while the others lock. */
enum { F_IDLE, F_FH, F_CAS, F_MUTEX, NF };
static const char *fname[NF] = {"idle", "fh", "CAS", "mutex"};

static void lock_fig58(const char *outdir) {
  if (np < 2) return;
  const double ms = env_double("BENCH_SYNC_FIG_MS", 60);
  const int rounds = (int)env_long("BENCH_SYNC_FIG_ROUNDS", 6);
  long chunk = 0;
  if (me == home) chunk = calibrate_compute(20); /* ~20 us chunks */
  samples_t rate[NF], acq[NF];
  for (int v = 0; v < NF; v++) {
    samples_init(&rate[v], rounds);
    samples_init(&acq[v], rounds);
  }
  bench_progress("lock fig 5.8: home computes %.0f ms while %d ranks lock; %d rounds", ms, np - 1, rounds);
  for (int round = -1; round < rounds; round++) {
    for (int q = 0; q < NF; q++) {
      int v = (q + (round < 0 ? 0 : round)) % NF;
      uint64_t before = v == F_IDLE ? 0 : acq_done[v - 1];
      MPIB(MPI_Barrier(MPI_COMM_WORLD));
      MPI_Request req;
      double chunks_per_s = 0;
      if (me == home) {
        double t0 = mono(), t;
        long n = 0;
        do {
          compute(chunk);
          n++;
        } while ((t = mono() - t0) < ms * 1e-3);
        chunks_per_s = (double)n / t;
        MPIB(MPI_Ibarrier(MPI_COMM_WORLD, &req));
        MPIB(MPI_Wait(&req, MPI_STATUS_IGNORE));
      } else {
        int done = 0;
        MPIB(MPI_Ibarrier(MPI_COMM_WORLD, &req));
        while (!done) {
          if (v == F_IDLE) nap_us(200);
          else lock_once(v - 1);
          MPIB(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
        }
      }
      double mine = v == F_IDLE ? 0 : (double)(acq_done[v - 1] - before), tot;
      MPIB(MPI_Reduce(&mine, &tot, 1, MPI_DOUBLE, MPI_SUM, home, MPI_COMM_WORLD));
      if (round >= 0 && me == home) {
        samples_add(&rate[v], chunks_per_s);
        samples_add(&acq[v], tot / (ms * 1e-3));
      }
    }
  }
  check_counters("fig 5.8");
  /* Report from the home rank: gather to rank 0 for printing. */
  double med[2 * NF];
  if (me == home)
    for (int v = 0; v < NF; v++) {
      med[v] = samples_median(&rate[v]);
      med[NF + v] = samples_median(&acq[v]);
    }
  if (home != 0) {
    if (me == home) MPIB(MPI_Send(med, 2 * NF, MPI_DOUBLE, 0, 58, MPI_COMM_WORLD));
    if (me == 0) MPIB(MPI_Recv(med, 2 * NF, MPI_DOUBLE, home, 58, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
  }
  if (me == 0) {
    printf("== bench_sync lock, seed 004 Fig. 5.8: the home (rank %d) computes %.0f ms in ~20 us chunks without\n"
           "   library calls while ranks 0..%d loop acquire + critical section + release (idle: they sleep).\n"
           "   Home chunks per second (higher is better; median of %d rounds, variants interleaved):\n",
           home, ms, np - 2, rounds);
    printf("%-8s %14s %9s %18s\n", "variant", "home chunks/s", "vs idle", "others' acq/s");
    for (int v = 0; v < NF; v++)
      printf("%-8s %14.0f %9.3f %18.0f\n", fname[v], med[v], med[v] / med[F_IDLE], med[NF + v]);
    printf("home compute under fh lock / under MPI mutex: %.3f (higher is better)\n", med[F_FH] / med[F_MUTEX]);
    fflush(stdout);
    FILE *csv = bench_csv_open(outdir, "bench_sync_fig58");
    /* bench.h columns with "time" = us per home chunk (1e6 / rate), so ratio < 1 is better for fh. */
    static const int base[] = {F_MUTEX, F_CAS, F_IDLE};
    static const char *bname[] = {"fig58_home_chunk_vs_mutex", "fig58_home_chunk_vs_casspin", "fig58_home_chunk_vs_idle"};
    for (int i = 0; i < 3; i++) {
      bench_row_t r = {bname[i], fname[base[i]], (size_t)(np - 1), 1e6 / med[F_FH], 1e6 / med[base[i]],
                       1e6 / med[F_FH], 1e6 / med[base[i]], rounds};
      bench_csv_row(csv, &r);
    }
    fclose(csv);
  }
  for (int v = 0; v < NF; v++) {
    samples_free(&rate[v]);
    samples_free(&acq[v]);
  }
}

static int run_lock(const char *outdir) {
  if (np < 2) BENCH_DIE("lock needs at least 2 ranks");
  home = np - 1;
  FHB(fh_lock_create(ctx, home, &lk));
  if (me == home) {
    fctr = fh_malloc(ctx, 64);
    if (!fctr) BENCH_DIE("fh_malloc");
    memset(fctr, 0, 64);
  }
  uint64_t a = (uint64_t)(uintptr_t)fctr;
  MPIB(MPI_Bcast(&a, 1, MPI_UINT64_T, home, MPI_COMM_WORLD));
  fctr = (uint64_t *)(uintptr_t)a;
  cas_kind = win_kind("BENCH_SYNC_CAS_WIN", W_SHARED);
  mtx_kind = win_kind("BENCH_SYNC_MUTEX_WIN", W_ALLOC);
  if (cas_kind == W_ALLOC)
    bench_progress("warning: Open MPI 4.1.4's osc/rdma crashes on MPI_Compare_and_swap into MPI_Win_allocate windows");
  make_win(cas_kind, 64, &cas_base, &wcas);
  make_win(mtx_kind, 64, &mtx_base, &wmtx);
  MPIB(MPI_Barrier(MPI_COMM_WORLD));
  MPIB(MPI_Win_lock_all(MPI_MODE_NOCHECK, wcas));
  bench_poll_barrier(ctx);
  const char *parts = getenv("BENCH_SYNC_LOCK_PARTS");
  if (!parts || !*parts) parts = "contention fig58";
  if (strstr(parts, "contention")) lock_contention(outdir);
  if (strstr(parts, "fig58")) lock_fig58(outdir);
  bench_poll_barrier(ctx);
  MPIB(MPI_Win_unlock_all(wcas));
  free_win(cas_kind, cas_base, &wcas);
  free_win(mtx_kind, mtx_base, &wmtx);
  FHB(fh_lock_destroy(lk));
  if (me == home) fh_free(ctx, fctr);
  return 0;
}

/* ==================================================================== barrier */
enum { B_FH, B_MPI, B_TREE, B_FHMPI, NB };


static int run_barrier(const char *outdir) {
  fh_ctx_t *c[NB] = {ctx, NULL, ctx_with_env("FH_BARRIER", "tree"), ctx_with_env("FH_BARRIER", "mpi")};
  const char *algo = getenv("FH_BARRIER");
  if (!algo || !*algo) algo = "dissemination";
  const int batch = (int)env_long("BENCH_SYNC_BAR_BATCH", 20);
  const double budget = env_double("BENCH_SYNC_BAR_SECONDS", 1.5);
  samples_t s[NB];
  for (int v = 0; v < NB; v++) samples_init(&s[v], 300);
  bench_progress("barrier latency: %d ranks, batches of %d, about %.1f s", np, batch, budget);
  double t_start = mono();
  for (int round = -2; more_rounds(MPI_COMM_WORLD, round + 2, 20, 300, t_start, budget); round++) {
    for (int q = 0; q < NB; q++) {
      int v = (q + (round < 0 ? 0 : round)) % NB;
      MPIB(MPI_Barrier(MPI_COMM_WORLD));
      double t0 = mono();
      for (int i = 0; i < batch; i++) {
        if (v == B_MPI) MPIB(MPI_Barrier(MPI_COMM_WORLD));
        else FHB(fh_barrier(c[v]));
      }
      double t = (mono() - t0) / batch, tmax;
      MPIB(MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
      if (round >= 0 && me == 0) samples_add(&s[v], tmax);
    }
  }
  FILE *csv = me == 0 ? bench_csv_open(outdir, "bench_sync_barrier") : NULL;
  if (me == 0) {
    double m[NB];
    for (int v = 0; v < NB; v++) m[v] = samples_median(&s[v]) * 1e6;
    printf("== bench_sync barrier, %d ranks: us per barrier (slowest rank, batches of %d back to back, median of\n"
           "   %d rounds, variants interleaved). fh = fh_barrier with FH_BARRIER=%s; informational: contexts\n"
           "   with FH_BARRIER=tree and =mpi. Target fh/MPI_Barrier <= 1.2.\n",
           np, batch, s[B_FH].n, algo);
    printf("%4s %10s %12s %7s %10s %8s %10s %8s\n", "np", "fh us", "MPI_Barr us", "fh/MPI", "tree us", "tree/MPI",
           "fh-mpi us", "mpi/MPI");
    printf("%4d %10.3f %12.3f %7.2f %10.3f %8.2f %10.3f %8.2f\n", np, m[B_FH], m[B_MPI], m[B_FH] / m[B_MPI], m[B_TREE],
           m[B_TREE] / m[B_MPI], m[B_FHMPI], m[B_FHMPI] / m[B_MPI]);
    fflush(stdout);
    char bm[64];
    snprintf(bm, sizeof bm, "barrier_np%d", np);
    row(csv, bm, "MPI_Barrier", 0, &s[B_FH], &s[B_MPI]);
    snprintf(bm, sizeof bm, "barrier_tree_np%d", np);
    row(csv, bm, "MPI_Barrier", 0, &s[B_TREE], &s[B_MPI]);
    snprintf(bm, sizeof bm, "barrier_fhmpi_np%d", np);
    row(csv, bm, "MPI_Barrier", 0, &s[B_FHMPI], &s[B_MPI]);
  }
  for (int v = 0; v < NB; v++) samples_free(&s[v]);

  /* ---- split phase with one late rank */
  const double late_ms = env_double("BENCH_SYNC_LATE_MS", 20);
  const double chunk_us = env_double("BENCH_SYNC_CHUNK_US", 50);
  const int reps = (int)env_long("BENCH_SYNC_LATE_REPS", 10);
  const long chunk = calibrate_compute(chunk_us);
  enum { S_SPLIT, S_BLOCK, S_REF, NS };
  static const char *sname[NS] = {"split", "blocking", "reference"};
  /* per variant, over ranks 1.. and reps: app CPU / T, library CPU / wall, overshoot */
  samples_t frac[NS], lcpu[NS], over[NS];
  for (int v = 0; v < NS; v++) {
    samples_init(&frac[v], reps * np);
    samples_init(&lcpu[v], reps * np);
    samples_init(&over[v], reps * np);
  }
  bench_progress("split-phase barrier: rank 0 late by %.0f ms, %.0f us chunks, %d reps", late_ms, chunk_us, reps);
  int64_t id = 1000;
  for (int rep = -1; rep < reps; rep++) {
    for (int q = 0; q < NS; q++) {
      int v = (q + (rep < 0 ? 0 : rep)) % NS;
      id++;
      MPIB(MPI_Barrier(MPI_COMM_WORLD));
      double t_notify0 = 0, app = 0, wall = 0, cpu = 0, t_done = 0;
      if (me == 0) {
        nap_us((long)(late_ms * 1e3));
        t_notify0 = mono();
        if (v == S_SPLIT) {
          FHB(fh_barrier_notify(ctx, id, 0));
          FHB(fh_barrier_wait(ctx, id, 0));
        } else if (v == S_BLOCK) {
          FHB(fh_barrier(ctx));
        }
      } else {
        double t0 = mono(), c0 = cpu_now();
        if (v == S_BLOCK) {
          FHB(fh_barrier(ctx));
        } else {
          if (v == S_SPLIT) FHB(fh_barrier_notify(ctx, id, 0));
          for (;;) {
            struct timespec a0, a1;
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a0);
            compute(chunk);
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a1);
            app += (double)(a1.tv_sec - a0.tv_sec) + 1e-9 * (double)(a1.tv_nsec - a0.tv_nsec);
            if (v == S_REF) {
              if (mono() - t0 >= late_ms * 1e-3) break;
              continue;
            }
            int rc = fh_barrier_try(ctx, id, 0);
            if (rc == FH_OK) break;
            if (rc != FH_NOT_READY) BENCH_DIE("fh_barrier_try -> %s", fh_strerror(rc));
          }
        }
        t_done = mono();
        wall = t_done - t0;
        cpu = cpu_now() - c0;
      }
      MPIB(MPI_Bcast(&t_notify0, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
      double mine[3] = {0, 0, 0};
      if (me != 0) {
        if (v != S_REF && t_done < t_notify0)
          BENCH_DIE("barrier %lld completed on rank %d before rank 0 notified", (long long)id, me);
        mine[0] = wall > 0 ? app / wall : 0;
        mine[1] = wall > 0 ? (cpu - app) / wall : 0;
        mine[2] = t_done - t_notify0;
      }
      double *all = me == 0 ? malloc(sizeof(double) * 3 * (size_t)np) : NULL;
      MPIB(MPI_Gather(mine, 3, MPI_DOUBLE, all, 3, MPI_DOUBLE, 0, MPI_COMM_WORLD));
      if (me == 0) {
        if (rep >= 0) { /* mean over ranks 1.. (CPU shares), slowest rank (overshoot) */
          double fa = 0, lb = 0, ov = 0;
          for (int r = 1; r < np; r++) {
            fa += all[3 * r];
            lb += all[3 * r + 1];
            if (all[3 * r + 2] > ov) ov = all[3 * r + 2];
          }
          samples_add(&frac[v], fa / (np - 1));
          samples_add(&lcpu[v], lb / (np - 1));
          samples_add(&over[v], ov);
        }
        free(all);
      }
    }
  }
  if (me == 0) {
    double fr[NS], lc[NS], ov[NS];
    for (int v = 0; v < NS; v++) {
      fr[v] = samples_median(&frac[v]);
      lc[v] = samples_median(&lcpu[v]);
      ov[v] = samples_median(&over[v]) * 1e6;
    }
    printf("== bench_sync barrier, split phase, %d ranks: rank 0 sleeps T = %.0f ms, then notifies + waits; the others\n"
           "   notify at once. split: they compute in %.0f us chunks calling fh_barrier_try between them; blocking:\n"
           "   they call fh_barrier; reference: they compute chunks for T with no barrier (what %d ranks on %ld\n"
           "   cores can get). Per rep, mean over ranks 1..%d of: 'app' = CPU time of their computation / their\n"
           "   wall time from notify to barrier done (reference: to the end of T), and 'lib CPU' = process CPU\n"
           "   time outside the computation / that wall time; 'overshoot' = last rank's barrier done minus\n"
           "   rank 0's notify. Medians over %d reps. 'app/ref' = app / reference's app (higher is better,\n"
           "   1 = they got all the CPU they could have had).\n",
           np, late_ms, chunk_us, np - 1, sysconf(_SC_NPROCESSORS_ONLN), np - 1, reps);
    printf("%-10s %4s %8s %8s %9s %13s\n", "variant", "np", "app", "app/ref", "lib CPU", "overshoot us");
    for (int v = 0; v < NS; v++) {
      printf("%-10s %4d %8.3f %8.3f %9.3f", sname[v], np, fr[v], fr[S_REF] > 0 ? fr[v] / fr[S_REF] : 0, lc[v]);
      if (v == S_REF) printf(" %13s\n", "-");
      else printf(" %13.1f\n", ov[v]);
    }
    fflush(stdout);
    char path[4096];
    snprintf(path, sizeof path, "%s/bench_sync_split.csv", outdir); /* own columns, not bench.h's */
    FILE *c2 = fopen(path, "w");
    if (!c2) BENCH_DIE("cannot open %s: %s", path, strerror(errno));
    fprintf(c2, "np,variant,late_ms,chunk_us,app_cpu_over_wall,app_over_reference,lib_cpu_per_wall,overshoot_us,samples\n");
    for (int v = 0; v < NS; v++)
      fprintf(c2, "%d,%s,%.1f,%.1f,%.4f,%.4f,%.4f,%.2f,%d\n", np, sname[v], late_ms, chunk_us, fr[v],
              fr[S_REF] > 0 ? fr[v] / fr[S_REF] : 0, lc[v], v == S_REF ? 0 : ov[v], frac[v].n);
    fclose(c2);
  }
  if (csv) fclose(csv);
  for (int v = 0; v < NS; v++) {
    samples_free(&frac[v]);
    samples_free(&lcpu[v]);
    samples_free(&over[v]);
  }
  bench_poll_barrier(ctx);
  FHB(fh_finalize(c[B_TREE]));
  FHB(fh_finalize(c[B_FHMPI]));
  return 0;
}

/* ======================================================================= coll */
/* The "broadcast tree" line of fh_config_print(c) (rank 0 only; "?" if absent). */
static void tree_line(fh_ctx_t *c, char *out, size_t len) {
  snprintf(out, len, "?");
  fflush(stdout);
  FILE *tmp = tmpfile();
  if (!tmp) return;
  int saved = dup(1);
  dup2(fileno(tmp), 1);
  fh_config_print(c);
  fflush(stdout);
  dup2(saved, 1);
  close(saved);
  rewind(tmp);
  char line[512];
  while (fgets(line, sizeof line, tmp)) {
    char *p = strstr(line, "broadcast tree:");
    if (p) {
      p[strcspn(p, "\r\n")] = 0;
      snprintf(out, len, "%s", p);
      break;
    }
  }
  fclose(tmp);
}

enum { C_FH_BC, C_BIN_BC, C_LAM_BC, C_MPI_BC, C_FH_AR, C_MPI_AR, NC };
static const char *cname[NC] = {"fh bcast", "fh bcast binomial", "fh bcast lambda", "MPI_Bcast", "fh allreduce",
                                "MPI_Allreduce"};

static int run_coll(const char *outdir) {
  size_t sizes[16] = {8, 1024, 65536, 1 << 20, 16 << 20};
  int nsizes = 5;
  const char *only = getenv("BENCH_SYNC_COLL_SIZES");
  if (only && *only) {
    nsizes = 0;
    for (const char *p = only; *p && nsizes < 16;) {
      char *end;
      long v = strtol(p, &end, 10);
      if (end == p) break;
      if (*end == 'K' || *end == 'k') v <<= 10, end++;
      else if (*end == 'M' || *end == 'm') v <<= 20, end++;
      if (v < 8 || v % 8 || v > (64L << 20)) BENCH_DIE("BENCH_SYNC_COLL_SIZES: %ld is not a multiple of 8 in 8..64M", v);
      sizes[nsizes++] = (size_t)v;
      p = end;
      while (*p == ' ' || *p == ',') p++;
    }
  }
  size_t maxn = 8;
  for (int i = 0; i < nsizes; i++)
    if (sizes[i] > maxn) maxn = sizes[i];
  const long lam = env_long("BENCH_SYNC_LAMBDA", 3);
  char lamv[16];
  snprintf(lamv, sizeof lamv, "%ld", lam);
  fh_ctx_t *cbin = ctx_with_env("FH_BCAST_LAMBDA", "1");
  fh_ctx_t *clam = lam >= 1 ? ctx_with_env("FH_BCAST_LAMBDA", lamv) : NULL;
  double *buf = aligned_alloc(4096, maxn), *src = aligned_alloc(4096, maxn), *dst = aligned_alloc(4096, maxn);
  if (!buf || !src || !dst) BENCH_DIE("out of memory");
  memset(buf, 0, maxn);
  memset(dst, 0, maxn);
  for (size_t i = 0; i < maxn / 8; i++) src[i] = (double)(me + (int)(i % 7));
  /* Warm up each context's tree (auto lambda is measured at the first broadcast). */
  FHB(fh_broadcast(ctx, 0, buf, 8));
  FHB(fh_broadcast(cbin, 0, buf, 8));
  if (clam) FHB(fh_broadcast(clam, 0, buf, 8));
  char tl[3][256] = {"", "", ""};
  if (me == 0) {
    tree_line(ctx, tl[0], sizeof tl[0]);
    tree_line(cbin, tl[1], sizeof tl[1]);
    if (clam) tree_line(clam, tl[2], sizeof tl[2]);
  }
  const double budget = env_double("BENCH_SYNC_COLL_SECONDS", 1.0);
  const double nsum = (double)np * (np - 1) / 2.0;
  samples_t s[NC];
  for (int v = 0; v < NC; v++) samples_init(&s[v], 64);
  FILE *csv = me == 0 ? bench_csv_open(outdir, "bench_sync_coll") : NULL;
  if (me == 0) {
    printf("== bench_sync coll, %d ranks: us per operation (slowest rank; median over rounds, variants interleaved).\n"
           "   bcast: root 0, fh_broadcast vs MPI_Bcast; allreduce: doubles, SUM. Target fh/MPI <= 1.2.\n"
           "   Trees -- main context: %s; binomial context: %s%s%s\n",
           np, tl[0], tl[1], clam ? "; extra context: " : "", clam ? tl[2] : "");
    printf("%8s %6s %10s %10s %7s %10s %10s %7s %9s %9s %9s\n", "size", "rounds", "bcast fh", "MPI_Bcast", "fh/MPI",
           "allred fh", "MPI_Allr", "fh/MPI", "binom us", "main/bin", clam ? "lam/bin" : "-");
    fflush(stdout);
  }
  uint64_t tag = 0;
  char sz[32];
  for (int k = 0; k < nsizes; k++) {
    const size_t n = sizes[k], cnt = n / 8;
    int batch = n <= 1024 ? 20 : n <= 65536 ? 4 : 1;
    for (int v = 0; v < NC; v++) samples_reset(&s[v]);
    bench_progress("coll %s: about %.1f s", bench_size_str(n, sz, sizeof sz), budget);
    double t_start = mono();
    int round;
    for (round = -1; more_rounds(MPI_COMM_WORLD, round + 1, 5 + 1, 300, t_start, budget); round++) {
      for (int q = 0; q < NC; q++) {
        int v = (q + (round < 0 ? 0 : round) + k) % NC;
        if (v == C_LAM_BC && !clam) continue;
        MPIB(MPI_Barrier(MPI_COMM_WORLD));
        double t0 = mono();
        for (int b = 0; b < batch; b++) {
          tag++;
          const int full = round < 0 && b == 0; /* first op of each variant and size: check everything */
          if (v <= C_MPI_BC) {
            const double tv = (double)tag;
            if (full) {
              if (me == 0)
                for (size_t i = 1; i + 1 < cnt; i++) buf[i] = (double)(i * 3 + (size_t)v);
              else memset(buf, 0, n);
            }
            if (me == 0) buf[0] = buf[cnt - 1] = tv;
            if (v == C_MPI_BC) MPIB(MPI_Bcast(buf, (int)cnt, MPI_DOUBLE, 0, MPI_COMM_WORLD));
            else FHB(fh_broadcast(v == C_FH_BC ? ctx : v == C_BIN_BC ? cbin : clam, 0, buf, n));
            if (buf[0] != tv || buf[cnt - 1] != tv) BENCH_DIE("%s %zu B: wrong data on rank %d", cname[v], n, me);
            if (full && me != 0)
              for (size_t i = 1; i + 1 < cnt; i++)
                if (buf[i] != (double)(i * 3 + (size_t)v))
                  BENCH_DIE("%s %zu B: element %zu is %g on rank %d", cname[v], n, i, buf[i], me);
          } else {
            if (full) memset(dst, 0xff, n);
            dst[0] = dst[cnt - 1] = -1;
            if (v == C_MPI_AR) MPIB(MPI_Allreduce(src, dst, (int)cnt, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
            else FHB(fh_allreduce(ctx, src, dst, cnt, FH_DOUBLE, FH_SUM));
            size_t chk[3] = {0, cnt / 2, cnt - 1};
            for (int j = 0; j < 3; j++)
              if (dst[chk[j]] != nsum + (double)np * (double)(chk[j] % 7))
                BENCH_DIE("%s %zu B: element %zu is %g on rank %d", cname[v], n, chk[j], dst[chk[j]], me);
            if (full)
              for (size_t i = 0; i < cnt; i++)
                if (dst[i] != nsum + (double)np * (double)(i % 7))
                  BENCH_DIE("%s %zu B: element %zu is %g on rank %d", cname[v], n, i, dst[i], me);
          }
        }
        double t = (mono() - t0) / batch, tmax;
        MPIB(MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
        if (round >= 0 && me == 0) samples_add(&s[v], tmax);
      }
    }
    if (me == 0) {
      double m[NC];
      for (int v = 0; v < NC; v++) m[v] = samples_median(&s[v]) * 1e6;
      printf("%8s %6d %10.2f %10.2f %7.2f %10.2f %10.2f %7.2f %9.2f %9.2f", bench_size_str(n, sz, sizeof sz), s[0].n,
             m[C_FH_BC], m[C_MPI_BC], m[C_FH_BC] / m[C_MPI_BC], m[C_FH_AR], m[C_MPI_AR], m[C_FH_AR] / m[C_MPI_AR],
             m[C_BIN_BC], m[C_FH_BC] / m[C_BIN_BC]);
      if (clam) printf(" %9.2f", m[C_LAM_BC] / m[C_BIN_BC]);
      printf("\n");
      fflush(stdout);
      char bm[64];
      snprintf(bm, sizeof bm, "bcast_np%d", np);
      row(csv, bm, "MPI_Bcast", n, &s[C_FH_BC], &s[C_MPI_BC]);
      snprintf(bm, sizeof bm, "allreduce_np%d", np);
      row(csv, bm, "MPI_Allreduce(MPI_DOUBLE,MPI_SUM)", n, &s[C_FH_AR], &s[C_MPI_AR]);
      snprintf(bm, sizeof bm, "bcast_main_vs_binomial_np%d", np);
      row(csv, bm, "fh_broadcast FH_BCAST_LAMBDA=1", n, &s[C_FH_BC], &s[C_BIN_BC]);
      if (clam) {
        snprintf(bm, sizeof bm, "bcast_lambda%ld_vs_binomial_np%d", lam, np);
        row(csv, bm, "fh_broadcast FH_BCAST_LAMBDA=1", n, &s[C_LAM_BC], &s[C_BIN_BC]);
      }
    }
  }
  if (csv) fclose(csv);
  for (int v = 0; v < NC; v++) samples_free(&s[v]);
  free(buf);
  free(src);
  free(dst);
  bench_poll_barrier(ctx);
  FHB(fh_finalize(cbin));
  if (clam) FHB(fh_finalize(clam));
  return 0;
}

int main(int argc, char **argv) {
  bench_mpi_init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &bench_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  me = bench_rank;
  const char *mode = argc > 1 ? argv[1] : "";
  const char *outdir = argc > 2 ? argv[2] : ".";
  if (strcmp(mode, "atomic") && strcmp(mode, "lock") && strcmp(mode, "barrier") && strcmp(mode, "coll")) {
    if (me == 0) fprintf(stderr, "usage: bench_sync atomic|lock|barrier|coll [outdir]\n");
    MPI_Finalize();
    return 2;
  }
  FHB(fh_init(MPI_COMM_WORLD, NULL, &ctx));
  int rc = !strcmp(mode, "atomic")    ? run_atomic(outdir)
           : !strcmp(mode, "lock")    ? run_lock(outdir)
           : !strcmp(mode, "barrier") ? run_barrier(outdir)
                                      : run_coll(outdir);
  bench_poll_barrier(ctx);
  FHB(fh_finalize(ctx));
  if (me == 0 && rc == 0) printf("bench_sync %s: done (CSV in %s)\n", mode, outdir);
  MPI_Finalize();
  return rc;
}
