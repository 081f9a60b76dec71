/* bench_smp.c -- Firehose-SMP benchmarks (issue 4): one firehose context shared by
 * the threads of a rank (MPI_THREAD_MULTIPLE; the program aborts if MPI does not
 * provide it).
 *
 * Usage: bench_smp <mode> [outdir]          modes (outdir default "."):
 *
 *  fig8   Seed 000 Fig. 8: fairness and deadlock avoidance under contention.
 *         2 ranks (more: ranks >= 2 only wait). Run it with
 *         FH_FIREHOSE_MODE=page FH_FIREHOSE_M=32K (f = 8 pages). Rank 1 allocates a
 *         plain malloc'd region (BENCH_FIG8_REGION, default 64M; not fh_malloc'd) and
 *         only serves firehose moves (it polls in a barrier). Rank 0 runs T threads
 *         (BENCH_FIG8_THREADS, default "1 2 4 8"); each does blocking 32 KiB fh_put
 *         from its own source buffer to random page-aligned offsets of that region
 *         for BENCH_FIG8_SECONDS (default 1.0). A 32 KiB put needs all f = 8
 *         firehoses, so with T > 1 threads the requests compete for the whole table.
 *         BENCH_FIG8_RUNS (default 10) runs per T, as rounds: each round runs every T
 *         once, rotating which goes first (drift in machine speed during the launch
 *         then hits every T alike). Per thread: puts/s and its
 *         fh_stats_thread_get counters. Per run: aggregate puts/s (sum over threads),
 *         slowest/fastest thread (target >= 0.7), deadlock-avoidance fraction =
 *         sum(da_entries) / sum(requests), da_wins, rollbacks. Medians over the runs.
 *         After every round, one 32 KiB put + get checks the data.
 *         CSV: smp_fig8_threads.csv (every thread), smp_fig8_runs.csv (every run),
 *         smp_fig8.csv (medians per T).
 *
 *  gups   Seed 000 Fig. 7: random 8-byte updates (fh_get of a word, xor, fh_put back)
 *         to a table distributed over "nodes", shared firehose table vs one table per
 *         process, the same 2 computation threads per node in both. Needs an even
 *         number of ranks >= 4 (default: 4, i.e. 2 nodes); node k = world ranks 2k
 *         and 2k+1. Both layouts run in the same launch, alternating:
 *           shared    one process per node (world rank 2k) with 2 threads, one context
 *                     on the communicator of the even ranks (the odd ranks sleep);
 *           separate  both processes of each node, 1 thread each, one context on
 *                     MPI_COMM_WORLD.
 *         The table (BENCH_GUPS_SIZES, total MiB over all nodes, default
 *         "8 32 64 128 256") is split evenly over the nodes and, in "separate",
 *         evenly between the node's two processes; every update goes to a uniformly
 *         random word of another node's part (local updates are not counted: they
 *         need no firehose). BENCH_GUPS_UPDATES (default 12000) updates per thread.
 *         Region mode with regions of BENCH_GUPS_UNIT (default 1M = the region-mode
 *         default) and f_shared = BENCH_GUPS_F (default 16) firehoses from each node
 *         into each other node: the program sets FH_FIREHOSE_MODE=region,
 *         FH_FIREHOSE_MAXREGION_SIZE and FH_FIREHOSE_MAXREGIONS before each fh_init so
 *         that both layouts give a node the same number of firehoses into another
 *         node (shared: R = f (N-1), f per peer; separate: each process f/4 per peer,
 *         R = f/4 (2N-1), 2 processes x 2 remote processes x f/4 = f). Misses
 *         (fh_stats_get) summed over the node's processes; BENCH_GUPS_REPS (default 3)
 *         repetitions, medians; reduction = 1 - shared / separate.
 *         CSV: smp_gups_runs.csv, smp_gups.csv.
 *
 *  hit    Per-operation cost of the hit path, 1 thread vs 8 threads sharing the
 *         context, each thread with its own peer. 9 ranks (with fewer, T = ranks - 1).
 *         Thread t of rank 0 does blocking 8-byte fh_put to a small plain malloc'd
 *         buffer of rank t + 1 (warmed up: every timed op is a hit, checked with
 *         fh_stats). Ranks 1.. wait in MPI_Test(MPI_Ibarrier) + fh_poll +
 *         usleep(1000) and use almost no CPU (their CPU time is reported). Baselines,
 *         same launch, same threads and peers: MPI_Put + MPI_Win_flush on one MPI
 *         dynamic window (lock_all) shared by the threads ("MPI"), and on a window
 *         per thread ("MPI-win/thread": is the cost per window or global to MPI?).
 *         BENCH_HIT_OPS (default 100000) ops per thread, BENCH_HIT_REPS (default 5)
 *         repetitions of {fh, MPI, MPI-win/thread} x {T=1, T=8}.
 *         Per thread: CPU ns per op (CLOCK_THREAD_CPUTIME_ID; with 8 threads on
 *         2 cores the wall time per op is mostly waiting for a core) and wall ns per
 *         op. Ratio of CPU ns/op (T=8 / T=1): target <= 1.5. BENCH_HIT_PIN=spread (default)
 *         pins thread t to the process's allowed CPU t mod count, so that threads run
 *         in parallel (as on an SMP node; unpinned, the scheduler sometimes stacks them on
 *         one core and contention varies between runs); BENCH_HIT_PIN=none does not pin.
 *         CSV: smp_hit_threads.csv, smp_hit.csv.
 *
 * Run (Open MPI):
 *   FH_FIREHOSE_MODE=page FH_FIREHOSE_M=32K mpirun -np 2 bench_smp fig8 out
 *   mpirun -np 4 bench_smp gups out
 *   mpirun -np 9 bench_smp hit out
 * (scripts/run-bench.sh does this; see there.) */
#include "bench.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

static fh_ctx_t *ctx; /* world context (fig8, hit) */
static int me, nranks;
static size_t page;

/* ------------------------------------------------------------------ helpers */
static double mono(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static double cpu_clock(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline uint64_t rng_next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
  *s = x;
  return x * 2685821657736338717ULL;
}

static void *xalloc(size_t align, size_t n) {
  void *p = NULL;
  if (posix_memalign(&p, align, n) != 0) BENCH_DIE("posix_memalign(%zu, %zu) failed", align, n);
  return p;
}

static size_t parse_size(const char *s, size_t dflt) {
  if (!s || !*s) return dflt;
  char *end;
  double v = strtod(s, &end);
  switch (*end) {
  case 'k': case 'K': v *= 1024.0; break;
  case 'm': case 'M': v *= 1024.0 * 1024.0; break;
  case 'g': case 'G': v *= 1024.0 * 1024.0 * 1024.0; break;
  default: break;
  }
  return (size_t)v;
}
static long env_long(const char *name, long dflt) {
  const char *s = getenv(name);
  return s && *s ? atol(s) : dflt;
}
static double env_double(const char *name, double dflt) {
  const char *s = getenv(name);
  return s && *s ? atof(s) : dflt;
}
/* Parse a list of numbers ("1 2 4 8" or "1,2,4,8"). */
static int parse_list(const char *s, long *out, int max) {
  int n = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s);
  for (char *save = NULL, *t = strtok_r(buf, " ,", &save); t && n < max; t = strtok_r(NULL, " ,", &save))
    out[n++] = atol(t);
  return n;
}

/* Wait for an MPI request while serving `c`'s AMs (c may be NULL). */
static void poll_wait(fh_ctx_t *c, MPI_Request *r) {
  int done = 0;
  while (!done) {
    if (c) FHB(fh_poll(c));
    MPIB(MPI_Test(r, &done, MPI_STATUS_IGNORE));
  }
}
/* The same, sleeping 1 ms between tests: for ranks that must not burn CPU. */
static void sleepy_wait(fh_ctx_t *c, MPI_Request *r) {
  int done = 0;
  for (;;) {
    if (c) FHB(fh_poll(c));
    MPIB(MPI_Test(r, &done, MPI_STATUS_IGNORE));
    if (done) break;
    usleep(1000);
  }
}
static void pbarrier(fh_ctx_t *c, MPI_Comm comm) {
  MPI_Request r;
  MPIB(MPI_Ibarrier(comm, &r));
  poll_wait(c, &r);
}
static void sleepy_barrier(fh_ctx_t *c, MPI_Comm comm) {
  MPI_Request r;
  MPIB(MPI_Ibarrier(comm, &r));
  sleepy_wait(c, &r);
}

static fh_stats_t stats_of(fh_ctx_t *c) {
  fh_stats_t st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  FHB(fh_stats_get(c, &st));
  return st;
}
static fh_thread_stats_t thread_stats(void) {
  fh_thread_stats_t t;
  memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  FHB(fh_stats_thread_get(&t));
  return t;
}

static double median_of(double *v, int n) {
  if (n <= 0) return 0;
  double *t = malloc(sizeof(double) * (size_t)n);
  if (!t) BENCH_DIE("out of memory");
  memcpy(t, v, sizeof(double) * (size_t)n);
  qsort(t, (size_t)n, sizeof(double), bench_cmp_double);
  double m = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
  free(t);
  return m;
}
static double min_of(const double *v, int n) {
  double m = n ? v[0] : 0;
  for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
  return m;
}
static double max_of(const double *v, int n) {
  double m = n ? v[0] : 0;
  for (int i = 1; i < n; i++) m = v[i] > m ? v[i] : m;
  return m;
}

static FILE *csv_open(const char *dir, const char *name, const char *header) {
  char path[4096];
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) BENCH_DIE("cannot create directory %s: %s", dir, strerror(errno));
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) BENCH_DIE("cannot open %s: %s", path, strerror(errno));
  fprintf(f, "%s\n", header);
  return f;
}

static pthread_t spawn(void *(*fn)(void *), void *arg) {
  pthread_t t;
  int rc = pthread_create(&t, NULL, fn, arg);
  if (rc != 0) BENCH_DIE("pthread_create: %s", strerror(rc));
  return t;
}

static pthread_barrier_t start_bar;

/* CPUs this process may run on (mpirun may bind a rank to one core). */
static int allowed_cpus(int *list, int max) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  int n = 0;
  for (int c = 0; c < CPU_SETSIZE && n < max; c++)
    if (CPU_ISSET(c, &set)) list[n++] = c;
  return n;
}
/* Pin the calling thread to one CPU. */
static void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  if (rc != 0) BENCH_DIE("pthread_setaffinity_np(%d): %s", cpu, strerror(rc));
}

/* ===================================================================== fig8 */
#define F8_MAXT 64
#define F8_PUT ((size_t)32 << 10)

typedef struct {
  int tid;
  uint64_t seed;
  const char *src;
  char *dst; /* page-aligned base of rank 1's region */
  size_t npages;
  uint64_t puts;
  double secs;
  fh_thread_stats_t ts;
} f8_arg_t;

static atomic_int f8_stop;

static void *f8_worker(void *p) {
  f8_arg_t *a = p;
  FHB(fh_stats_thread_reset());
  pthread_barrier_wait(&start_bar);
  const double t0 = mono();
  const size_t span = a->npages - F8_PUT / page + 1;
  uint64_t s = a->seed, n = 0;
  while (!atomic_load_explicit(&f8_stop, memory_order_relaxed)) {
    size_t pg = (size_t)(rng_next(&s) % span);
    FHB(fh_put(ctx, 1, a->dst + pg * page, a->src, F8_PUT));
    n++;
  }
  a->secs = mono() - t0;
  a->puts = n;
  a->ts = thread_stats();
  return NULL;
}

static int run_fig8(const char *outdir) {
  if (nranks < 2) BENCH_DIE("fig8 needs at least 2 ranks");
  long Ts[16];
  int nT = parse_list(getenv("BENCH_FIG8_THREADS") ? getenv("BENCH_FIG8_THREADS") : "1 2 4 8", Ts, 16);
  const int runs = (int)env_long("BENCH_FIG8_RUNS", 10);
  const double secs = env_double("BENCH_FIG8_SECONDS", 1.0);
  const size_t region = parse_size(getenv("BENCH_FIG8_REGION"), (size_t)64 << 20);
  for (int i = 0; i < nT; i++)
    if (Ts[i] < 1 || Ts[i] > F8_MAXT) BENCH_DIE("BENCH_FIG8_THREADS: %ld out of 1..%d", Ts[i], F8_MAXT);
  if (runs < 1 || region < 2 * F8_PUT) BENCH_DIE("bad BENCH_FIG8_RUNS / BENCH_FIG8_REGION");

  /* Rank 1's target: plain heap memory, page-aligned, touched. */
  char *target = NULL;
  uint64_t taddr = 0;
  if (me == 1) {
    target = xalloc(page, region);
    memset(target, 0, region);
    taddr = (uint64_t)(uintptr_t)target;
  }
  MPIB(MPI_Bcast(&taddr, 1, MPI_UINT64_T, 1, MPI_COMM_WORLD));
  char *dst = (char *)(uintptr_t)taddr;
  const size_t npages = region / page;

  fh_stats_t st = stats_of(ctx);
  FILE *ft = NULL, *fr = NULL, *fs = NULL;
  if (me == 0) {
    printf("== bench_smp fig8 (seed 000 Fig. 8): %d ranks, %s, firehose %s mode, unit %zu B, f = %llu per peer,"
           " M+MAXVICTIM = %llu B\n",
           nranks, "MPI_THREAD_MULTIPLE", st.mode == 0 ? "page" : "region", (size_t)st.unit_bytes,
           (unsigned long long)st.firehoses_per_peer, (unsigned long long)st.limit_bytes);
    int cl[256];
    printf("   rank 0 may run on %d CPU(s) (threads not pinned)\n", allowed_cpus(cl, 256));
    printf("   rank 0: T threads, blocking 32 KiB fh_put to random page-aligned offsets of a %zu MiB plain malloc'd"
           " region of rank 1; %.2f s per run, %d runs per T, medians over the runs\n",
           region >> 20, secs, runs);
    if (st.mode == 0 && st.firehoses_per_peer * st.unit_bytes != F8_PUT)
      printf("   NOTE: f x page = %llu B, not 32 KiB: run with FH_FIREHOSE_MODE=page FH_FIREHOSE_M=32K for Fig. 8\n",
             (unsigned long long)(st.firehoses_per_peer * st.unit_bytes));
    fflush(stdout);
    ft = csv_open(outdir, "smp_fig8_threads.csv",
                  "threads,run,thread,puts,seconds,puts_per_s,requests,da_entries,da_wins,rollbacks,da_waits,stall_ns");
    fr = csv_open(outdir, "smp_fig8_runs.csv",
                  "threads,run,aggregate_puts_per_s,slowest_over_fastest,da_fraction,requests,da_entries,da_wins,"
                  "rollbacks,da_waits,ctx_hits,ctx_misses,ctx_pending_hits,ctx_da_entries");
    fs = csv_open(outdir, "smp_fig8.csv",
                  "threads,runs,aggregate_puts_per_s,aggregate_min,aggregate_max,slowest_over_fastest,"
                  "slowest_over_fastest_min,da_fraction,da_wins_per_run,rollbacks_per_run,da_waits_per_run,"
                  "aggregate_over_1_thread,per_thread_puts_per_s");
  }

  /* Per-thread source buffers. */
  char *src[F8_MAXT] = {0};
  if (me == 0)
    for (int t = 0; t < F8_MAXT; t++) {
      src[t] = xalloc(page, F8_PUT);
      bench_fill(src[t], F8_PUT, (unsigned)t + 1);
    }

  f8_arg_t args[F8_MAXT];
  pthread_t th[F8_MAXT];
  /* Per (T, run): index ti * runs + run. */
  const size_t nr = (size_t)nT * (size_t)runs;
  double *agg = calloc(nr, sizeof(double)), *ratio = calloc(nr, sizeof(double));
  double *frac = calloc(nr, sizeof(double)), *wins = calloc(nr, sizeof(double));
  double *rolls = calloc(nr, sizeof(double)), *waits = calloc(nr, sizeof(double));
  double *per = calloc(nr * F8_MAXT, sizeof(double));
  if (!agg || !ratio || !frac || !wins || !rolls || !waits || !per) BENCH_DIE("out of memory");

  /* Runs are rounds over every T (rotating which T goes first), so that drift in the
   * machine's speed between launches' phases hits every T alike. */
  for (int run = 0; run < runs; run++) {
    for (int k = 0; k < nT; k++) {
      const int ti = (k + run) % nT;
      const int T = (int)Ts[ti];
      const size_t ix = (size_t)ti * (size_t)runs + (size_t)run;
      pbarrier(ctx, MPI_COMM_WORLD);
      if (me == 0) {
        bench_progress("fig8: run %d of %d, T = %d", run + 1, runs, T);
        fh_stats_t s0 = stats_of(ctx);
        atomic_store(&f8_stop, 0);
        if (pthread_barrier_init(&start_bar, NULL, (unsigned)T + 1) != 0) BENCH_DIE("pthread_barrier_init");
        for (int t = 0; t < T; t++) {
          args[t] = (f8_arg_t){.tid = t, .seed = 0x9E3779B97F4A7C15ULL * (uint64_t)(1000 * T + 100 * run + t + 1),
                               .src = src[t], .dst = dst, .npages = npages};
          th[t] = spawn(f8_worker, &args[t]);
        }
        pthread_barrier_wait(&start_bar);
        struct timespec d = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
        nanosleep(&d, NULL);
        atomic_store(&f8_stop, 1);
        for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
        pthread_barrier_destroy(&start_bar);
        fh_stats_t s1 = stats_of(ctx);
        double sum = 0, lo = 0, hi = 0;
        uint64_t req = 0, dae = 0, daw = 0, rb = 0, dwt = 0;
        for (int t = 0; t < T; t++) {
          double r = args[t].secs > 0 ? (double)args[t].puts / args[t].secs : 0;
          per[ix * F8_MAXT + (size_t)t] = r;
          sum += r;
          lo = t == 0 || r < lo ? r : lo;
          hi = t == 0 || r > hi ? r : hi;
          const fh_thread_stats_t *x = &args[t].ts;
          req += x->requests; dae += x->da_entries; daw += x->da_wins; rb += x->rollbacks; dwt += x->da_waits;
          fprintf(ft, "%d,%d,%d,%llu,%.6f,%.1f,%llu,%llu,%llu,%llu,%llu,%llu\n", T, run + 1, t,
                  (unsigned long long)args[t].puts, args[t].secs, r, (unsigned long long)x->requests,
                  (unsigned long long)x->da_entries, (unsigned long long)x->da_wins,
                  (unsigned long long)x->rollbacks, (unsigned long long)x->da_waits,
                  (unsigned long long)x->stall_ns);
        }
        agg[ix] = sum;
        ratio[ix] = hi > 0 ? lo / hi : 0;
        frac[ix] = req ? (double)dae / (double)req : 0;
        wins[ix] = (double)daw;
        rolls[ix] = (double)rb;
        waits[ix] = (double)dwt;
        fprintf(fr, "%d,%d,%.1f,%.4f,%.5f,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu\n", T, run + 1, sum, ratio[ix],
                frac[ix], (unsigned long long)req, (unsigned long long)dae, (unsigned long long)daw,
                (unsigned long long)rb, (unsigned long long)dwt, (unsigned long long)(s1.hits - s0.hits),
                (unsigned long long)(s1.misses - s0.misses), (unsigned long long)(s1.pending_hits - s0.pending_hits),
                (unsigned long long)(s1.da_entries - s0.da_entries));
        fflush(ft);
        fflush(fr);
      }
      pbarrier(ctx, MPI_COMM_WORLD); /* rank 1 serves the moves in here */
    }
    /* Data check after every round: one 32 KiB put and get back (no contention). */
    if (me == 0) {
      char *chk = xalloc(page, F8_PUT), *back = xalloc(page, F8_PUT);
      bench_fill(chk, F8_PUT, 77u + (unsigned)run);
      char *where = dst + (size_t)(run % 13) * 7 * page;
      FHB(fh_put(ctx, 1, where, chk, F8_PUT));
      memset(back, 0, F8_PUT);
      FHB(fh_get(ctx, back, 1, where, F8_PUT));
      if (memcmp(chk, back, F8_PUT) != 0) BENCH_DIE("fig8 data check failed (round %d)", run + 1);
      free(chk);
      free(back);
    }
    pbarrier(ctx, MPI_COMM_WORLD);
  }
  if (me == 0) {
    double base = 0;
    printf("\n%3s %12s %21s %9s %8s %9s %8s %8s %8s   %s\n", "T", "agg puts/s", "(min..max)", "slow/fast",
           "(min)", "DA frac", "da_wins", "rollbk", "da_wait", "per-thread puts/s (median over runs, by thread)");
    for (int ti = 0; ti < nT; ti++) {
      const int T = (int)Ts[ti];
      double *A = agg + (size_t)ti * runs, *R = ratio + (size_t)ti * runs, *F = frac + (size_t)ti * runs;
      double *W = wins + (size_t)ti * runs, *B = rolls + (size_t)ti * runs, *Q = waits + (size_t)ti * runs;
      char pt[512] = "";
      size_t o = 0;
      for (int t = 0; t < T && o < sizeof pt - 16; t++) {
        double v[256];
        int n = runs < 256 ? runs : 256;
        for (int r = 0; r < n; r++) v[r] = per[((size_t)ti * runs + (size_t)r) * F8_MAXT + (size_t)t];
        o += (size_t)snprintf(pt + o, sizeof pt - o, "%s%.0f", t ? " " : "", median_of(v, n));
      }
      if (T == 1) base = median_of(A, runs);
      printf("%3d %12.0f %10.0f..%-10.0f %9.3f %8.3f %9.4f %8.1f %8.1f %8.1f   %s\n", T, median_of(A, runs),
             min_of(A, runs), max_of(A, runs), median_of(R, runs), min_of(R, runs), median_of(F, runs),
             median_of(W, runs), median_of(B, runs), median_of(Q, runs), pt);
      fprintf(fs, "%d,%d,%.1f,%.1f,%.1f,%.4f,%.4f,%.5f,%.1f,%.1f,%.1f,%.4f,\"%s\"\n", T, runs, median_of(A, runs),
              min_of(A, runs), max_of(A, runs), median_of(R, runs), min_of(R, runs), median_of(F, runs),
              median_of(W, runs), median_of(B, runs), median_of(Q, runs),
              base > 0 ? median_of(A, runs) / base : 0, pt);
    }
    fflush(stdout);
    fflush(fs);
  }
  if (me == 0) {
    printf("\n(agg = sum over threads of puts/s; slow/fast = slowest / fastest thread's puts/s, target >= 0.7;\n"
           " DA frac = sum(da_entries) / sum(requests) from fh_stats_thread_get; da_wins, rollbk, da_wait:\n"
           " per run, summed over threads. Medians over %d runs.)\n", runs);
    fclose(ft);
    fclose(fr);
    fclose(fs);
    for (int t = 0; t < F8_MAXT; t++) free(src[t]);
  }
  free(agg); free(ratio); free(frac); free(wins); free(rolls); free(waits); free(per);
  pbarrier(ctx, MPI_COMM_WORLD);
  free(target);
  return 0;
}

/* ===================================================================== gups */
#define GU_MAXTGT 256

typedef struct {
  fh_ctx_t *c;
  uint64_t seed;
  long updates;
  int ntgt;
  const int *trank;
  char *const *tbase;
  size_t twords; /* words per target process */
  double secs;
} gu_arg_t;

static void *gu_worker(void *p) {
  gu_arg_t *a = p;
  pthread_barrier_wait(&start_bar);
  const double t0 = mono();
  uint64_t s = a->seed;
  for (long i = 0; i < a->updates; i++) {
    uint64_t r = rng_next(&s);
    int k = (int)(r % (uint64_t)a->ntgt);
    size_t w = (size_t)(rng_next(&s) % a->twords);
    char *addr = a->tbase[k] + w * 8;
    uint64_t v;
    FHB(fh_get(a->c, &v, a->trank[k], addr, 8));
    v ^= r;
    FHB(fh_put(a->c, a->trank[k], addr, &v, 8));
  }
  a->secs = mono() - t0;
  return NULL;
}

enum { G_MISSES, G_HITS, G_PENDING, G_MOVES, G_DAE, G_DAW, G_RB, G_SECS, G_F, G_UPD, G_PART, G_UNIT, NG };

/* One phase: layout 0 = shared (even ranks, 2 threads), 1 = separate (all ranks, 1
 * thread). Fills `node` (per-node sums, NG values per node) on rank 0. Returns the
 * slowest participant's seconds. */
static double gups_phase(int layout, size_t total, size_t unit, long f, long updates, int rep, MPI_Comm even,
                         double *node) {
  const int N = nranks / 2;
  const int participate = layout == 1 || me % 2 == 0;
  const int threads = layout == 0 ? 2 : 1;
  MPI_Comm comm = layout == 0 ? even : MPI_COMM_WORLD;
  double mine[NG];
  memset(mine, 0, sizeof mine);
  double secs = 0;
  if (participate) {
    /* Same number of firehoses from a node into another node in both layouts. */
    long R = layout == 0 ? f * (N - 1) : f / 4 * (2 * N - 1);
    char v[64];
    setenv("FH_FIREHOSE_MODE", "region", 1);
    snprintf(v, sizeof v, "%zu", unit);
    setenv("FH_FIREHOSE_MAXREGION_SIZE", v, 1);
    snprintf(v, sizeof v, "%ld", R);
    setenv("FH_FIREHOSE_MAXREGIONS", v, 1);
    fh_ctx_t *c;
    FHB(fh_init(comm, NULL, &c));
    int crank, csize;
    MPI_Comm_rank(comm, &crank);
    MPI_Comm_size(comm, &csize);
    const size_t part = total / (size_t)N / (layout == 0 ? 1 : 2);
    char *table = xalloc(unit, part);
    memset(table, 0, part);
    uint64_t *bases = malloc(sizeof(uint64_t) * (size_t)csize);
    uint64_t b = (uint64_t)(uintptr_t)table;
    if (!bases) BENCH_DIE("out of memory");
    MPIB(MPI_Allgather(&b, 1, MPI_UINT64_T, bases, 1, MPI_UINT64_T, comm));
    int trank[GU_MAXTGT];
    char *tbase[GU_MAXTGT];
    int nt = 0;
    const int mynode = layout == 0 ? crank : crank / 2;
    for (int q = 0; q < csize && nt < GU_MAXTGT; q++) {
      int qnode = layout == 0 ? q : q / 2;
      if (qnode == mynode) continue;
      trank[nt] = q;
      tbase[nt++] = (char *)(uintptr_t)bases[q];
    }
    free(bases);
    fh_stats_t st = stats_of(c);
    pbarrier(c, comm);
    gu_arg_t a[2];
    pthread_t th[2];
    if (pthread_barrier_init(&start_bar, NULL, (unsigned)threads) != 0) BENCH_DIE("pthread_barrier_init");
    for (int t = 0; t < threads; t++) {
      a[t] = (gu_arg_t){.c = c, .seed = 0xD1B54A32D192ED03ULL * (uint64_t)(1 + me * 16 + t + 1000 * rep),
                        .updates = updates, .ntgt = nt, .trank = trank, .tbase = tbase, .twords = part / 8};
      th[t] = spawn(gu_worker, &a[t]);
    }
    for (int t = 0; t < threads; t++) {
      pthread_join(th[t], NULL);
      secs = a[t].secs > secs ? a[t].secs : secs;
    }
    pthread_barrier_destroy(&start_bar);
    pbarrier(c, comm); /* keep serving moves until every thread everywhere is done */
    fh_stats_t s1 = stats_of(c);
    mine[G_MISSES] = (double)s1.misses;
    mine[G_HITS] = (double)s1.hits;
    mine[G_PENDING] = (double)s1.pending_hits;
    mine[G_MOVES] = (double)s1.moves_sent;
    mine[G_DAE] = (double)s1.da_entries;
    mine[G_DAW] = (double)s1.da_wins;
    mine[G_RB] = (double)s1.rollbacks;
    mine[G_SECS] = secs;
    mine[G_F] = (double)st.firehoses_per_peer * (double)nt; /* into other nodes */
    mine[G_UPD] = (double)updates * threads;
    mine[G_PART] = (double)part;
    mine[G_UNIT] = (double)st.unit_bytes;
    FHB(fh_finalize(c));
    free(table);
    MPI_Request r;
    MPIB(MPI_Ibarrier(MPI_COMM_WORLD, &r));
    poll_wait(NULL, &r);
  } else {
    sleepy_barrier(NULL, MPI_COMM_WORLD);
  }
  double *all = me == 0 ? malloc(sizeof(double) * NG * (size_t)nranks) : NULL;
  MPIB(MPI_Gather(mine, NG, MPI_DOUBLE, all, NG, MPI_DOUBLE, 0, MPI_COMM_WORLD));
  double slowest = 0;
  if (me == 0) {
    memset(node, 0, sizeof(double) * NG * (size_t)N);
    for (int q = 0; q < nranks; q++) {
      double *x = all + (size_t)q * NG, *y = node + (size_t)(q / 2) * NG;
      for (int k = 0; k < NG; k++) {
        if (k == G_SECS) y[k] = x[k] > y[k] ? x[k] : y[k];
        else if (k == G_UNIT) y[k] = x[k] > y[k] ? x[k] : y[k];
        else y[k] += x[k];
      }
      slowest = x[G_SECS] > slowest ? x[G_SECS] : slowest;
    }
    free(all);
  }
  return slowest;
}

static int run_gups(const char *outdir) {
  if (nranks < 4 || nranks % 2) BENCH_DIE("gups needs an even number of ranks >= 4 (node k = ranks 2k, 2k+1)");
  const int N = nranks / 2;
  long sizes[16];
  int ns = parse_list(getenv("BENCH_GUPS_SIZES") ? getenv("BENCH_GUPS_SIZES") : "8 32 64 128 256", sizes, 16);
  const size_t unit = parse_size(getenv("BENCH_GUPS_UNIT"), (size_t)1 << 20);
  const long f = env_long("BENCH_GUPS_F", 16);
  const long updates = env_long("BENCH_GUPS_UPDATES", 12000);
  const int reps = (int)env_long("BENCH_GUPS_REPS", 3);
  if (f < 4 || f % 4) BENCH_DIE("BENCH_GUPS_F must be a multiple of 4 (separate layout: f/4 per peer)");
  if (unit < page || (unit & (unit - 1))) BENCH_DIE("BENCH_GUPS_UNIT must be a power of two >= the page");
  for (int i = 0; i < ns; i++) {
    size_t total = (size_t)sizes[i] << 20;
    if (sizes[i] < 1 || total % ((size_t)2 * N * unit))
      BENCH_DIE("BENCH_GUPS_SIZES: %ld MiB is not a multiple of 2 x nodes x unit", sizes[i]);
  }
  MPI_Comm even;
  MPIB(MPI_Comm_split(MPI_COMM_WORLD, me % 2 == 0 ? 0 : MPI_UNDEFINED, me, &even));

  FILE *fr = NULL, *fs = NULL;
  if (me == 0) {
    printf("== bench_smp gups (seed 000 Fig. 7): %d ranks = %d nodes of 2 ranks, MPI_THREAD_MULTIPLE; 2 computation"
           " threads per node in both layouts\n", nranks, N);
    printf("   shared:   1 process per node x 2 threads, one firehose table (context on the %d even ranks;"
           " odd ranks sleep)\n", N);
    printf("   separate: 2 processes per node x 1 thread, one table each (context on all %d ranks)\n", nranks);
    printf("   update = fh_get 8 B + xor + fh_put 8 B to a uniformly random word of another node's part of the"
           " table; %ld updates per thread (%ld per node); region mode, %zu KiB regions; f = %ld firehoses from a"
           " node into each other node in both layouts (separate: %ld per process and peer); %d repetitions,"
           " medians\n", updates, 2 * updates, unit >> 10, f, f / 4, reps);
    fflush(stdout);
    fr = csv_open(outdir, "smp_gups_runs.csv",
                  "table_MiB,layout,rep,node,misses,hits,pending_hits,moves,da_entries,da_wins,rollbacks,seconds,"
                  "firehoses_into_other_nodes,updates,part_bytes,unit_bytes");
    fs = csv_open(outdir, "smp_gups.csv",
                  "table_MiB,node_part_MiB,f_over_part,shared_misses_per_node,separate_misses_per_node,"
                  "reduction_pct,shared_hit_rate,separate_hit_rate,shared_s,separate_s,shared_da_entries,"
                  "predicted_reduction_pct,reps");
  }
  double *node = malloc(sizeof(double) * NG * (size_t)N);
  double *mis[2], *hr[2], *tm[2], *dae[2];
  for (int l = 0; l < 2; l++) {
    mis[l] = calloc((size_t)reps, sizeof(double));
    hr[l] = calloc((size_t)reps, sizeof(double));
    tm[l] = calloc((size_t)reps, sizeof(double));
    dae[l] = calloc((size_t)reps, sizeof(double));
    if (!mis[l] || !hr[l] || !tm[l] || !dae[l]) BENCH_DIE("out of memory");
  }
  if (!node) BENCH_DIE("out of memory");
  if (me == 0) {
    printf("\n%9s %9s %7s | %14s %14s %9s | %8s %8s | %7s %7s | %8s %9s\n", "table", "node part", "f/part",
           "shared miss/nd", "separate m/nd", "reduction", "hit shr", "hit sep", "shr s", "sep s", "shr DA",
           "predicted");
    fflush(stdout);
  }
  for (int si = 0; si < ns; si++) {
    const size_t total = (size_t)sizes[si] << 20;
    for (int rep = 0; rep < reps; rep++) {
      for (int k = 0; k < 2; k++) {
        /* Alternate which layout goes first. */
        const int layout = (rep + k) % 2;
        if (me == 0) bench_progress("gups: %ld MiB, rep %d, %s", sizes[si], rep + 1, layout ? "separate" : "shared");
        double secs = gups_phase(layout, total, unit, f, updates, rep, even, node);
        if (me == 0) {
          double m = 0, h = 0, d = 0;
          for (int n = 0; n < N; n++) {
            double *y = node + (size_t)n * NG;
            fprintf(fr, "%ld,%s,%d,%d,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.4f,%.0f,%.0f,%.0f,%.0f\n", sizes[si],
                    layout ? "separate" : "shared", rep + 1, n, y[G_MISSES], y[G_HITS], y[G_PENDING], y[G_MOVES],
                    y[G_DAE], y[G_DAW], y[G_RB], y[G_SECS], y[G_F], y[G_UPD], y[G_PART], y[G_UNIT]);
            m += y[G_MISSES];
            h += y[G_HITS] + y[G_PENDING];
            d += y[G_DAE];
            if ((long)y[G_F] != f * (N - 1))
              BENCH_DIE("node %d has %.0f firehoses into other nodes, expected %ld", n, y[G_F], f * (N - 1));
            if ((size_t)y[G_UNIT] != unit) BENCH_DIE("unit %.0f B, expected %zu", y[G_UNIT], unit);
          }
          fflush(fr);
          mis[layout][rep] = m / N;
          hr[layout][rep] = h + m > 0 ? h / (h + m) : 0;
          tm[layout][rep] = secs;
          dae[layout][rep] = d / N;
        }
      }
    }
    if (me == 0) {
      const double ms = median_of(mis[0], reps), mp = median_of(mis[1], reps);
      const double partmib = (double)total / N / (1 << 20);
      const double cover = (double)f * (double)unit / (1 << 20) / partmib; /* f per other node / its part */
      /* Uniform random accesses, LRU: steady-state miss rate 1 - coverage, where a
       * shared table covers f units of a node's part and each separate process f/2. */
      double ps = cover >= 1 ? 0 : 1 - cover, pp = cover / 2 >= 1 ? 0 : 1 - cover / 2;
      double pred = pp > 0 ? 100.0 * (1 - ps / pp) : 0;
      printf("%5ld MiB %5.0f MiB %7.3f | %14.0f %14.0f %8.1f%% | %7.2f%% %7.2f%% | %7.2f %7.2f | %8.0f %8.1f%%\n",
             sizes[si], partmib, cover, ms, mp, mp > 0 ? 100.0 * (1 - ms / mp) : 0, 100 * median_of(hr[0], reps),
             100 * median_of(hr[1], reps), median_of(tm[0], reps), median_of(tm[1], reps),
             median_of(dae[0], reps), pred);
      fflush(stdout);
      fprintf(fs, "%ld,%.3f,%.4f,%.1f,%.1f,%.2f,%.5f,%.5f,%.4f,%.4f,%.1f,%.2f,%d\n", sizes[si], partmib, cover, ms,
              mp, mp > 0 ? 100.0 * (1 - ms / mp) : 0, median_of(hr[0], reps), median_of(hr[1], reps),
              median_of(tm[0], reps), median_of(tm[1], reps), median_of(dae[0], reps), pred, reps);
      fflush(fs);
    }
  }
  if (me == 0) {
    printf("\n(miss/nd = firehose misses per node (fh_stats_get, summed over the node's processes), median over\n"
           " repetitions; reduction = 1 - shared / separate; hit = (hits + pending hits) / accesses;\n"
           " f/part = the node's firehoses into the other node / that node's part of the table (in units);\n"
           " predicted = reduction for uniform random accesses and LRU once warm (shared misses 1 - f/part,\n"
           " separate 1 - f/(2 part)), cold misses not counted; shr DA = deadlock-avoidance entries per node\n"
           " (shared). shr s / sep s: wall time of the slowest process.)\n");
    fclose(fr);
    fclose(fs);
  }
  for (int l = 0; l < 2; l++) { free(mis[l]); free(hr[l]); free(tm[l]); free(dae[l]); }
  free(node);
  if (even != MPI_COMM_NULL) MPI_Comm_free(&even);
  return 0;
}

/* ====================================================================== hit */
#define HIT_MAXT 64
#define NV 3 /* variants: fh_put, MPI (one window), MPI (a window per thread) */

typedef struct {
  int tid, peer, use_mpi;
  int cpu; /* -1: not pinned */
  long ops;
  char *dst;        /* fh: the peer's buffer */
  MPI_Aint disp;    /* MPI: the peer's window buffer */
  MPI_Win win;
  double cpu_ns, wall_ns;
  fh_thread_stats_t ts;
} hit_arg_t;

static void *hit_worker(void *p) {
  hit_arg_t *a = p;
  if (a->cpu >= 0) pin_to(a->cpu);
  FHB(fh_stats_thread_reset());
  uint64_t val = (uint64_t)a->tid << 32;
  pthread_barrier_wait(&start_bar);
  const double c0 = cpu_clock(CLOCK_THREAD_CPUTIME_ID), w0 = mono();
  if (a->use_mpi) {
    for (long i = 0; i < a->ops; i++) {
      val++;
      MPIB(MPI_Put(&val, 8, MPI_BYTE, a->peer, a->disp, 8, MPI_BYTE, a->win));
      MPIB(MPI_Win_flush(a->peer, a->win));
    }
  } else {
    for (long i = 0; i < a->ops; i++) {
      val++;
      FHB(fh_put(ctx, a->peer, a->dst, &val, 8));
    }
  }
  const double c1 = cpu_clock(CLOCK_THREAD_CPUTIME_ID), w1 = mono();
  a->cpu_ns = 1e9 * (c1 - c0) / (double)a->ops;
  a->wall_ns = 1e9 * (w1 - w0) / (double)a->ops;
  a->ts = thread_stats();
  return NULL;
}

static int run_hit(const char *outdir) {
  if (nranks < 2) BENCH_DIE("hit needs at least 2 ranks");
  const int Tmax = nranks - 1 < 8 ? nranks - 1 : 8;
  const long ops = env_long("BENCH_HIT_OPS", 100000);
  const int reps = (int)env_long("BENCH_HIT_REPS", 5);
  const char *pinmode = getenv("BENCH_HIT_PIN") ? getenv("BENCH_HIT_PIN") : "spread";
  const int spread = strcmp(pinmode, "none") != 0;
  int cpus[256];
  const int ncpu = allowed_cpus(cpus, 256);
  if (ops < 1 || reps < 1) BENCH_DIE("bad BENCH_HIT_OPS / BENCH_HIT_REPS");

  /* Targets: a small plain malloc'd buffer per rank for fh, another in an MPI
   * dynamic window for the baseline. */
  char *fbuf = malloc(4096), *mbuf = malloc(4096);
  if (!fbuf || !mbuf) BENCH_DIE("out of memory");
  memset(fbuf, 0, 4096);
  memset(mbuf, 0, 4096);
  /* wins[0]: the shared baseline window; wins[1 + t]: thread t's own window (same
   * memory attached to each), to tell contention on one window from MPI's global
   * thread-safety costs. */
  MPI_Win wins[1 + HIT_MAXT];
  for (int w = 0; w <= Tmax; w++) {
    MPIB(MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &wins[w]));
    MPIB(MPI_Win_attach(wins[w], mbuf, 4096));
  }
  uint64_t mine[2] = {(uint64_t)(uintptr_t)fbuf, 0}, *all = malloc(sizeof(uint64_t) * 2 * (size_t)nranks);
  MPI_Aint d;
  MPIB(MPI_Get_address(mbuf, &d));
  mine[1] = (uint64_t)d;
  if (!all) BENCH_DIE("out of memory");
  MPIB(MPI_Allgather(mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T, MPI_COMM_WORLD));

  FILE *ft = NULL, *fs = NULL;
  /* variant x {T=1, T=max} x reps: per-thread medians of cpu and wall ns per op */
  static const char *vname[NV] = {"fh", "MPI", "MPI-win/thread"};
  double *cpu[NV][2], *wall[NV][2], *agg[NV][2];
  for (int v = 0; v < NV; v++)
    for (int k = 0; k < 2; k++) {
      cpu[v][k] = calloc((size_t)reps, sizeof(double));
      wall[v][k] = calloc((size_t)reps, sizeof(double));
      agg[v][k] = calloc((size_t)reps, sizeof(double));
      if (!cpu[v][k] || !wall[v][k] || !agg[v][k]) BENCH_DIE("out of memory");
    }
  double peer_cpu0 = cpu_clock(CLOCK_PROCESS_CPUTIME_ID), peer_w0 = mono();
  uint64_t polls = 0;
  if (me == 0) {
    printf("== bench_smp hit: %d ranks, MPI_THREAD_MULTIPLE; rank 0 thread t does blocking 8-byte puts to rank t+1's"
           " small plain malloc'd buffer (T = 1: rank 1 only); %ld ops per thread, %d repetitions; ranks 1..%d wait"
           " in MPI_Test + fh_poll + usleep(1000)\n", nranks, ops, reps, nranks - 1);
    printf("   fh = fh_put (every op a firehose hit); MPI = MPI_Put + MPI_Win_flush, dynamic window, lock_all\n");
    printf("   rank 0 may run on %d CPU(s); BENCH_HIT_PIN=%s: %s\n", ncpu, pinmode,
           spread ? "thread t pinned to allowed CPU t mod count (threads really run in parallel, as on an SMP node)"
                  : "threads not pinned (the scheduler decides how many run at once)");
    fflush(stdout);
    ft = csv_open(outdir, "smp_hit_threads.csv", "variant,threads,rep,thread,peer,ops,cpu_ns_per_op,wall_ns_per_op,"
                                                   "requests,da_entries");
    /* Warm up: one put per peer (a miss; the peer runs the move in its fh_poll). */
    uint64_t x = 1;
    for (int p = 1; p <= Tmax; p++) FHB(fh_put(ctx, p, (char *)(uintptr_t)all[2 * p] + 64, &x, 8));
    for (int w = 0; w <= Tmax; w++) MPIB(MPI_Win_lock_all(MPI_MODE_NOCHECK, wins[w]));
  }
  for (int rep = 0; rep < reps; rep++)
    for (int v = 0; v < NV; v++)
      for (int k = 0; k < 2; k++) {
        const int T = k == 0 ? 1 : Tmax;
        if (me == 0) {
          pbarrier(ctx, MPI_COMM_WORLD);
          fh_stats_t s0 = stats_of(ctx);
          hit_arg_t a[HIT_MAXT];
          pthread_t th[HIT_MAXT];
          if (pthread_barrier_init(&start_bar, NULL, (unsigned)T) != 0) BENCH_DIE("pthread_barrier_init");
          for (int t = 0; t < T; t++) {
            a[t] = (hit_arg_t){.tid = t, .peer = t + 1, .use_mpi = v, .ops = ops,
                               .cpu = spread && ncpu > 0 ? cpus[t % ncpu] : -1,
                               .dst = (char *)(uintptr_t)all[2 * (t + 1)] + 64,
                               .disp = (MPI_Aint)all[2 * (t + 1) + 1] + 64, .win = wins[v == 2 ? 1 + t : 0]};
            th[t] = spawn(hit_worker, &a[t]);
          }
          double w0 = mono();
          for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
          double w1 = mono();
          pthread_barrier_destroy(&start_bar);
          fh_stats_t s1 = stats_of(ctx);
          if (v == 0 && (s1.misses != s0.misses || s1.hits - s0.hits != (uint64_t)(T * ops)))
            BENCH_DIE("hit: %llu misses and %llu hits for %ld ops: not all hits",
                      (unsigned long long)(s1.misses - s0.misses), (unsigned long long)(s1.hits - s0.hits), T * ops);
          double c[HIT_MAXT], w[HIT_MAXT];
          for (int t = 0; t < T; t++) {
            c[t] = a[t].cpu_ns;
            w[t] = a[t].wall_ns;
            fprintf(ft, "%s,%d,%d,%d,%d,%ld,%.2f,%.2f,%llu,%llu\n", vname[v], T, rep + 1, t, t + 1, ops,
                    c[t], w[t], (unsigned long long)a[t].ts.requests, (unsigned long long)a[t].ts.da_entries);
          }
          fflush(ft);
          cpu[v][k][rep] = median_of(c, T);
          wall[v][k][rep] = median_of(w, T);
          agg[v][k][rep] = (double)(T * ops) / (w1 - w0);
          bench_progress("hit: rep %d, %s T=%d: %.0f cpu ns/op, %.0f wall ns/op", rep + 1, vname[v], T,
                         cpu[v][k][rep], wall[v][k][rep]);
        } else {
          sleepy_barrier(ctx, MPI_COMM_WORLD);
          polls++;
        }
      }
  double peer_cpu = cpu_clock(CLOCK_PROCESS_CPUTIME_ID) - peer_cpu0, peer_w = mono() - peer_w0;
  if (me == 0)
    for (int w = 0; w <= Tmax; w++) MPIB(MPI_Win_unlock_all(wins[w]));
  pbarrier(ctx, MPI_COMM_WORLD);
  double pc[2] = {me == 0 ? 0 : peer_cpu, peer_w}, mx[2];
  MPIB(MPI_Reduce(pc, mx, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
  (void)polls;
  if (me == 0) {
    fs = csv_open(outdir, "smp_hit.csv", "variant,threads,cpu_ns_per_op,cpu_min,cpu_max,wall_ns_per_op,"
                                          "aggregate_ops_per_s,cpu_ratio_vs_1_thread,reps");
    printf("\n%-14s %7s %12s %19s %13s %15s %12s\n", "variant", "threads", "cpu ns/op", "(min..max)", "wall ns/op",
           "aggregate ops/s", "cpu ratio");
    for (int v = 0; v < NV; v++)
      for (int k = 0; k < 2; k++) {
        const int T = k == 0 ? 1 : Tmax;
        double mc = median_of(cpu[v][k], reps), r = mc / median_of(cpu[v][0], reps);
        printf("%-14s %7d %12.1f %8.1f..%-8.1f %13.1f %15.0f %12.3f\n", v ? vname[v] : "fh_put", T, mc,
               min_of(cpu[v][k], reps), max_of(cpu[v][k], reps), median_of(wall[v][k], reps),
               median_of(agg[v][k], reps), r);
        fprintf(fs, "%s,%d,%.2f,%.2f,%.2f,%.2f,%.1f,%.4f,%d\n", vname[v], T, mc, min_of(cpu[v][k], reps),
                max_of(cpu[v][k], reps), median_of(wall[v][k], reps), median_of(agg[v][k], reps), r, reps);
      }
    double rf = median_of(cpu[0][1], reps) / median_of(cpu[0][0], reps);
    double rm = median_of(cpu[1][1], reps) / median_of(cpu[1][0], reps);
    double rw = median_of(cpu[2][1], reps) / median_of(cpu[2][0], reps);
    printf("\nfh_put CPU ns/op, %d threads / 1 thread: %.3f (target <= 1.5: %s); MPI_Put+flush alone: %.3f"
           " (one window), %.3f (a window per thread)\n", Tmax, rf, rf <= 1.5 ? "met" : "MISSED", rm, rw);
    printf("fh_put T=1 vs MPI T=1: %.3f; fh_put T=%d vs MPI T=%d: %.3f\n",
           median_of(cpu[0][0], reps) / median_of(cpu[1][0], reps), Tmax, Tmax,
           median_of(cpu[0][1], reps) / median_of(cpu[1][1], reps));
    printf("firehose's own CPU ns/op (fh_put - MPI_Put+flush): %.1f with 1 thread, %.1f with %d threads\n",
           median_of(cpu[0][0], reps) - median_of(cpu[1][0], reps),
           median_of(cpu[0][1], reps) - median_of(cpu[1][1], reps), Tmax);
    printf("target ranks: most CPU used by one of them %.3f s in %.1f s (%.2f %%): they sleep while rank 0 puts,\n"
           " so the puts (about %.0f ns each, T=1) need no target CPU (a target poll every 1 ms would cap a\n"
           " blocking op at ~1000 per s).\n", mx[0], mx[1], 100 * mx[0] / mx[1], median_of(wall[0][0], reps));
    printf("(cpu ns/op = CLOCK_THREAD_CPUTIME_ID per op, median over threads, then median over %d repetitions;\n"
           " wall ns/op likewise; aggregate = all ops / wall time of the phase.)\n", reps);
    fclose(ft);
    fclose(fs);
    fflush(stdout);
  }
  for (int v = 0; v < NV; v++)
    for (int k = 0; k < 2; k++) { free(cpu[v][k]); free(wall[v][k]); free(agg[v][k]); }
  for (int w = 0; w <= Tmax; w++) {
    MPIB(MPI_Win_detach(wins[w], mbuf));
    MPIB(MPI_Win_free(&wins[w]));
  }
  free(all);
  free(fbuf);
  free(mbuf);
  return 0;
}

/* ===================================================================== main */
int main(int argc, char **argv) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &bench_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  me = bench_rank;
  page = (size_t)sysconf(_SC_PAGESIZE);
  const char *mode = argc > 1 ? argv[1] : "";
  const char *outdir = argc > 2 ? argv[2] : ".";
  if (strcmp(mode, "fig8") && strcmp(mode, "gups") && strcmp(mode, "hit")) {
    if (me == 0) fprintf(stderr, "usage: bench_smp fig8|gups|hit [outdir]\n");
    MPI_Finalize();
    return 2;
  }
  if (provided != MPI_THREAD_MULTIPLE) BENCH_DIE("MPI provides %s, bench_smp needs MPI_THREAD_MULTIPLE",
                                                 bench_thread_name(provided));
  int rc;
  if (!strcmp(mode, "gups")) {
    rc = run_gups(outdir); /* its own contexts, one per phase */
  } else {
    FHB(fh_init(MPI_COMM_WORLD, NULL, &ctx));
    pbarrier(ctx, MPI_COMM_WORLD);
    rc = !strcmp(mode, "fig8") ? run_fig8(outdir) : run_hit(outdir);
    pbarrier(ctx, MPI_COMM_WORLD);
    FHB(fh_finalize(ctx));
  }
  MPI_Finalize();
  return rc;
}
