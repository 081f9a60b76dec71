/* bench_firehose.c -- the firehose benchmarks of issue 3 (seed 000: firehose
 * remote pinning of plain, unregistered user memory).
 *
 * Usage: bench_firehose <mode> <outdir>      modes:
 *
 *  sweep  Seed 000 Fig. 3. Rank 0 is the target; every other rank does random 64 KiB
 *         puts into rank 0's plain malloc'd memory. The working set (the part of
 *         rank 0's buffer the random offsets fall in) is swept from M/8 to 4 M; it is
 *         split evenly between the initiators (initiator i draws from its own slice),
 *         so each initiator's f = M / (ranks - 1) firehoses cover its slice exactly
 *         while the working set is <= M. All strategies run in the same launch: one
 *         context per strategy of BENCH_STRATEGIES (default firehose,
 *         rendezvous-unpin, rendezvous-keep, pin-everything; FH_REGISTRATION is set
 *         before each fh_init), each with its own target buffer (mlock is not
 *         reference counted, so variants must not share pages), plus raw MPI:
 *         MPI_Put + MPI_Win_flush to an MPI_Win_create window over a fifth buffer
 *         (the "pin-everything ideal"). Buffers are used from their first address
 *         aligned to the pinning unit. Per working set: a warm-up pass puts once to
 *         every 64 KiB chunk of the slice (not timed), then batches of 16 random puts
 *         of every variant alternate, rotating the order, for BENCH_SWEEP_SECONDS or
 *         BENCH_SWEEP_PUTS per variant. Bandwidth = bytes / time measured by each
 *         initiator, summed over the initiators (aggregate at rank 0). With one
 *         initiator (2 ranks) the CSV's bandwidth_MBps is 64 KiB / the median
 *         per-put time of the batches and bandwidth_alt_MBps is all bytes / all time
 *         (which also charges every preemption). With several initiators the two
 *         swap: busy ranks beyond the core count do not all run at once, so a sum of
 *         per-initiator medians would overstate the aggregate. Column "method" says
 *         which (median-batch | bytes/time). Hit rate = hits / (hits + misses) from
 *         fh_stats over the timed puts. A strategy that returns FH_ERR_NO_RESOURCE
 *         records the point as "failed (NO_RESOURCE)" and leaves the sweep; the
 *         others go on. Each point ends with a data check per strategy (fh_put +
 *         fh_get of a pattern, and rank 0 compares its memory).
 *         CSV: <outdir>/fh_sweep.csv.
 *  hit    8-byte fh_put / fh_get from rank 0 to a hot firehose on rank 1's plain
 *         malloc'd memory vs MPI_Put / MPI_Get + MPI_Win_flush on an
 *         MPI_Win_create_dynamic window where rank 1 attached that same memory.
 *         Batches of 16 alternate; medians; ratio. CSV: <outdir>/bench_firehose_hit.csv
 *         (bench.h columns).
 *  miss   Cost of a firehose miss: rank 0 does 8-byte fh_put / fh_get, each to a new
 *         pinning unit of rank 1's plain malloc'd buffer, walking cyclically over
 *         more units than M + MAXVICTIM can hold (so every access misses and, once
 *         warm, every move also unpins a victim). Baseline, interleaved in the same
 *         run: one AM short round trip (fh_am_request_short -> handler
 *         fh_am_reply_short) measured by rank 0, plus mlock + munlock and
 *         MPI_Win_attach + MPI_Win_detach of the bytes one move pins, measured on
 *         rank 1 over a walk of 32 other units. Every op is timed; medians (and
 *         p90/p99/max). An 8-byte put that misses travels inside the move
 *         (put-in-move); a get needs the move, then the one-sided get. The pinning unit comes from the library's settings
 *         (FH_FIREHOSE_MODE, FH_FIREHOSE_MAXREGION_SIZE): launch once per setting.
 *         CSV: <outdir>/bench_firehose_miss.csv (bench.h columns, fh = miss,
 *         baseline = AM RTT + pin) and bench_firehose_miss_parts.csv (components).
 *
 * Env: BENCH_STRATEGIES (sweep), BENCH_SWEEP_PUTS (max timed puts per point, variant
 * and initiator, default 16384), BENCH_SWEEP_SECONDS (time per point, default 2.0),
 * BENCH_MISS_ROUNDS (miss: rounds of 8 ops per variant, default 150),
 * FH_FIREHOSE_M / FH_FIREHOSE_MAXVICTIM_M are read here too, to place the sweep
 * points (fallback: derived from fh_stats_t).
 *
 * Every rank keeps calling fh_poll while it waits (the target runs the move
 * handlers): all synchronisation here is non-blocking MPI + fh_poll. */
#include "bench.h"
#include <ctype.h>
#include <sys/mman.h>
#include <unistd.h>

#define CHUNK ((size_t)64 << 10)
#define BATCH 16

static fh_ctx_t *ctx;
static int nranks;
/* sweep: one more context per strategy; every wait polls them all. */
#define MAXSTRAT 8
static fh_ctx_t *xctx[MAXSTRAT];
static int nx;

/* ------------------------------------------------------------------ helpers */
static void poll_all(void) {
  FHB(fh_poll(ctx));
  for (int i = 0; i < nx; i++) FHB(fh_poll(xctx[i]));
}

static void pwait(MPI_Request *r) {
  int done = 0;
  while (!done) {
    poll_all();
    MPIB(MPI_Test(r, &done, MPI_STATUS_IGNORE));
  }
}

/* A barrier that keeps serving every context's AMs. */
static void pbarrier(void) {
  MPI_Request r;
  MPIB(MPI_Ibarrier(MPI_COMM_WORLD, &r));
  pwait(&r);
}

static size_t parse_size(const char *s) {
  if (!s || !*s) return 0;
  char *end;
  double v = strtod(s, &end);
  while (*end == ' ') end++;
  switch (toupper((unsigned char)*end)) {
  case 'K': v *= 1024.0; break;
  case 'M': v *= 1024.0 * 1024.0; break;
  case 'G': v *= 1024.0 * 1024.0 * 1024.0; break;
  default: break;
  }
  return (size_t)v;
}

static inline uint64_t rng_next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
  *s = x;
  return x * 2685821657736338717ULL;
}

static fh_stats_t stats_of(fh_ctx_t *c) {
  fh_stats_t st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  FHB(fh_stats_get(c, &st));
  return st;
}
static fh_stats_t stats_now(void) { return stats_of(ctx); }

/* Percentile q (0..1) of samples sorted by samples_median. */
static double pct(const samples_t *s, double q) {
  if (s->n == 0) return 0;
  int i = (int)(q * (s->n - 1) + 0.5);
  return s->v[i];
}

static const char *mib(size_t n, char *buf, size_t len) {
  snprintf(buf, len, "%.4g MiB", (double)n / (1 << 20));
  return buf;
}

static void *xmalloc(size_t n) {
  void *p = malloc(n);
  if (!p) BENCH_DIE("malloc(%zu) failed", n);
  return p;
}

/* Print the library's firehose settings as the stats report them. */
static void print_settings(const char *mode, const char *strategy, const fh_stats_t *st) {
  char b1[32], b2[32];
  printf("== bench_firehose %s: %d ranks, FH_REGISTRATION=%s, firehose mode %s, unit %s, limit_bytes (M+MAXVICTIM) %s,"
         " f = %llu firehoses per peer\n",
         mode, nranks, strategy ? strategy : getenv("FH_REGISTRATION") ? getenv("FH_REGISTRATION") : "(unset: firehose)",
         st->mode == 0 ? "page" : st->mode == 1 ? "region" : "?", mib(st->unit_bytes, b1, sizeof b1),
         mib(st->limit_bytes, b2, sizeof b2), (unsigned long long)st->firehoses_per_peer);
}

/* ==================================================================== sweep */
/* Per initiator, variant (strategy or MPI) and point, gathered to rank 0. */
enum { R_FH_BYTES, R_FH_TIME, R_HITS, R_MISSES, R_FAILED, R_PUTS, R_CHECK_OFF, R_CHECK_SEED, R_BATCH_MED, NR };

static int run_sweep(const char *outdir) {
  if (nranks < 2) BENCH_DIE("sweep needs at least 2 ranks");
  const int ninit = nranks - 1;
  /* The strategies, one context each (FH_REGISTRATION is read at fh_init). */
  char slist[256];
  snprintf(slist, sizeof slist, "%s",
           getenv("BENCH_STRATEGIES") ? getenv("BENCH_STRATEGIES")
                                      : "firehose,rendezvous-unpin,rendezvous-keep,pin-everything");
  const char *sname[MAXSTRAT];
  int ns = 0;
  for (char *save = NULL, *t = strtok_r(slist, ",", &save); t && ns < MAXSTRAT; t = strtok_r(NULL, ",", &save))
    sname[ns++] = t;
  if (ns == 0) BENCH_DIE("BENCH_STRATEGIES is empty");
  const char *old = getenv("FH_REGISTRATION");
  char *saved = old ? strdup(old) : NULL;
  for (int k = 0; k < ns; k++) {
    if (setenv("FH_REGISTRATION", sname[k], 1) != 0) BENCH_DIE("setenv");
    FHB(fh_init(MPI_COMM_WORLD, NULL, &xctx[k]));
    nx = k + 1;
  }
  if (saved) setenv("FH_REGISTRATION", saved, 1);
  else unsetenv("FH_REGISTRATION");
  free(saved);
  pbarrier();

  fh_stats_t st0[MAXSTRAT];
  for (int k = 0; k < ns; k++) st0[k] = stats_of(xctx[k]);
  const size_t limit = st0[0].limit_bytes;
  size_t M = parse_size(getenv("FH_FIREHOSE_M"));
  size_t V = parse_size(getenv("FH_FIREHOSE_MAXVICTIM_M"));
  if (M == 0 || M > limit) M = (size_t)(st0[0].firehoses_per_peer * st0[0].unit_bytes) * (size_t)ninit;
  if (M == 0 || M > limit) M = limit;
  if (V == 0 || M + V != limit) V = limit > M ? limit - M : 0;
  const int maxputs = getenv("BENCH_SWEEP_PUTS") ? atoi(getenv("BENCH_SWEEP_PUTS")) : 16384;
  const double maxsec = getenv("BENCH_SWEEP_SECONDS") ? atof(getenv("BENCH_SWEEP_SECONDS")) : 2.0;

  /* Working-set points: M/8 .. 4M, plus M + MAXVICTIM; each a multiple of
   * CHUNK * initiators so every initiator gets a whole number of chunks. */
  size_t pts[32];
  int npts = 0;
  const double fr[] = {0.125, 0.25, 0.5, 0.75, 1.0, -1.0, 1.25, 1.5, 2.0, 3.0, 4.0};
  const size_t q = CHUNK * (size_t)ninit;
  for (size_t k = 0; k < sizeof fr / sizeof *fr; k++) {
    double ws = fr[k] < 0 ? (double)(M + V) : fr[k] * (double)M;
    size_t w = ((size_t)ws + q / 2) / q * q;
    if (w < q) w = q;
    int dup = 0;
    for (int j = 0; j < npts; j++) dup |= pts[j] == w;
    if (!dup) pts[npts++] = w;
  }
  for (int i = 1; i < npts; i++) /* sort */
    for (int j = i; j > 0 && pts[j - 1] > pts[j]; j--) { size_t t = pts[j]; pts[j] = pts[j - 1]; pts[j - 1] = t; }
  const size_t bufsz = pts[npts - 1];

  /* Rank 0: one target buffer per strategy and one for MPI (so no two variants
   * share pages: mlock is not reference counted), plain malloc, used from the first
   * address aligned to the pinning unit (at least 64 KiB), so that a slice of f
   * units is exactly f firehoses and the knee sits at M, not one unit earlier. */
  const int nv = ns + 1, VMPI = ns; /* variants: strategies, then MPI */
  size_t align = CHUNK;
  for (int k = 0; k < ns; k++)
    if (st0[k].unit_bytes > align) align = st0[k].unit_bytes;
  unsigned char *raw[MAXSTRAT + 1] = {0}, *tbuf[MAXSTRAT + 1] = {0};
  uint64_t tbase[MAXSTRAT + 1] = {0};
  if (bench_rank == 0)
    for (int v = 0; v < nv; v++) {
      raw[v] = xmalloc(bufsz + align);
      tbuf[v] = (unsigned char *)(((uintptr_t)raw[v] + align - 1) & ~(uintptr_t)(align - 1));
      memset(tbuf[v], 0, bufsz); /* fault the pages in */
      tbase[v] = (uint64_t)(uintptr_t)tbuf[v];
    }
  MPIB(MPI_Bcast(tbase, nv, MPI_UINT64_T, 0, MPI_COMM_WORLD));
  MPI_Win win;
  MPIB(MPI_Win_create(bench_rank == 0 ? tbuf[VMPI] : NULL, bench_rank == 0 ? (MPI_Aint)bufsz : 0, 1, MPI_INFO_NULL,
                      MPI_COMM_WORLD, &win));
  MPIB(MPI_Win_lock_all(MPI_MODE_NOCHECK, win));
  unsigned char *src = xmalloc(CHUNK), *chk = xmalloc(CHUNK), *want = xmalloc(CHUNK);
  bench_fill(src, CHUNK, (unsigned)bench_rank * 31u);

  FILE *csv = NULL;
  char b1[32], b2[32], b3[32];
  if (bench_rank == 0) {
    char path[4096];
    if (mkdir(outdir, 0755) != 0 && errno != EEXIST) BENCH_DIE("cannot create %s: %s", outdir, strerror(errno));
    snprintf(path, sizeof path, "%s/fh_sweep.csv", outdir);
    csv = fopen(path, "w");
    if (!csv) BENCH_DIE("cannot open %s: %s", path, strerror(errno));
    fprintf(csv, "strategy,working_set_bytes,bandwidth_MBps,hit_rate,status,ratio_vs_mpi,launch,puts,hits,misses,"
                 "us_per_put_median,bandwidth_alt_MBps,ratio_alt_vs_mpi,bytes_pinned_peak,M_bytes,maxvictim_bytes,"
                 "limit_bytes,unit_bytes,ranks,method\n");
    for (int k = 0; k < ns; k++) print_settings("sweep", sname[k], &st0[k]);
    printf("== sweep: random %zu KiB puts from %d initiator(s) into rank 0's malloc'd memory (one buffer per variant);\n"
           "   M = %s, MAXVICTIM = %s (M from %s); at each working set, batches of %d puts of every strategy and of\n"
           "   raw MPI alternate (rotating order) for up to %.1f s or %d puts per variant and initiator.\n",
           CHUNK >> 10, ninit, mib(M, b1, sizeof b1), mib(V, b2, sizeof b2),
           getenv("FH_FIREHOSE_M") ? "FH_FIREHOSE_M" : "fh_stats_t", BATCH, maxsec, maxputs);
    printf("   raw MPI: MPI_Put + MPI_Win_flush of %zu KiB to an MPI_Win_create window over a whole buffer\n"
           "   (the pin-everything ideal). MB/s = 10^6 B/s, aggregate at rank 0, %s.\n", CHUNK >> 10,
           ninit > 1 ? "bytes / time summed over the initiators" : "64 KiB / median per-put time of the batches");
    printf("%-16s %12s %10s %10s %6s %9s %8s %10s %s\n", "strategy", "working set", "MB/s", "MPI MB/s", "ratio",
           "hit rate", "misses", "pin peak", "status");
    fflush(stdout);
  }
  pbarrier();

  int failed[MAXSTRAT] = {0}; /* failed at an earlier point: left out */
  uint64_t seed = 0x9e3779b97f4a7c15ULL ^ ((uint64_t)bench_rank << 32);
  double r[MAXSTRAT + 1][NR];
  double *all = bench_rank == 0 ? xmalloc(sizeof r * (size_t)nranks) : NULL;
  samples_t smp[MAXSTRAT + 1];
  for (int v = 0; v < nv; v++) samples_init(&smp[v], 1024);
  for (int p = 0; p < npts; p++) {
    const size_t ws = pts[p];
    const size_t slice = ws / (size_t)ninit, nch = slice / CHUNK;
    const size_t my0 = bench_rank > 0 ? (size_t)(bench_rank - 1) * slice : 0;
    int nowfail[MAXSTRAT] = {0}; /* failed at this point */
    memset(r, 0, sizeof r);
    bench_progress("working set %s (%zu chunks per initiator)", mib(ws, b1, sizeof b1), nch);
    /* Warm-up: every chunk of my slice once per strategy, a few MPI puts. */
    if (bench_rank > 0) {
      for (int k = 0; k < ns; k++)
        for (size_t c = 0; c < nch && !failed[k] && !nowfail[k]; c++) {
          int rc = fh_put(xctx[k], 0, (char *)(uintptr_t)tbase[k] + my0 + c * CHUNK, src, CHUNK);
          if (rc == FH_ERR_NO_RESOURCE) nowfail[k] = 1;
          else if (rc != FH_OK) BENCH_DIE("%s: warm-up fh_put -> %s", sname[k], fh_strerror(rc));
        }
      for (int i = 0; i < 8; i++) {
        MPIB(MPI_Put(src, (int)CHUNK, MPI_BYTE, 0, (MPI_Aint)(my0 + (size_t)i % nch * CHUNK), (int)CHUNK, MPI_BYTE, win));
        MPIB(MPI_Win_flush(0, win));
      }
    }
    pbarrier();
    for (int k = 0; k < ns; k++) FHB(fh_stats_reset(xctx[k]));
    pbarrier();
    if (bench_rank > 0) {
      uint64_t rs[MAXSTRAT + 1];
      for (int v = 0; v < nv; v++) { rs[v] = seed ^ ws ^ ((uint64_t)v << 40); samples_reset(&smp[v]); }
      double t_start = bench_now();
      for (int round = 0;; round++) {
        int busy = 0;
        for (int j = 0; j < nv; j++) {
          const int v = (j + round) % nv;
          if (v < ns && (failed[v] || nowfail[v])) continue;
          if (r[v][R_PUTS] >= maxputs) continue;
          busy = 1;
          double t0 = bench_now();
          int done = 0;
          for (; done < BATCH; done++) {
            const size_t off = my0 + rng_next(&rs[v]) % nch * CHUNK;
            if (v < ns) {
              int rc = fh_put(xctx[v], 0, (char *)(uintptr_t)tbase[v] + off, src, CHUNK);
              if (rc == FH_ERR_NO_RESOURCE) { nowfail[v] = 1; break; }
              if (rc != FH_OK) BENCH_DIE("%s: fh_put of %zu B at offset %zu -> %s", sname[v], CHUNK, off, fh_strerror(rc));
            } else {
              MPIB(MPI_Put(src, (int)CHUNK, MPI_BYTE, 0, (MPI_Aint)off, (int)CHUNK, MPI_BYTE, win));
              MPIB(MPI_Win_flush(0, win));
            }
          }
          if (done < BATCH) continue; /* failed inside the batch */
          double dt = bench_now() - t0;
          r[v][R_FH_BYTES] += (double)(BATCH * CHUNK);
          r[v][R_FH_TIME] += dt;
          r[v][R_PUTS] += BATCH;
          samples_add(&smp[v], dt / BATCH);
        }
        if (!busy || (round >= 3 && bench_now() - t_start >= maxsec)) break;
      }
      for (int v = 0; v < nv; v++) r[v][R_BATCH_MED] = samples_median(&smp[v]);
      for (int k = 0; k < ns; k++) {
        if (failed[k]) continue;
        fh_stats_t st = stats_of(xctx[k]);
        r[k][R_HITS] = (double)st.hits;
        r[k][R_MISSES] = (double)st.misses;
        if (nowfail[k]) continue;
        /* Data check: put a pattern, get it back; rank 0 compares its memory. */
        unsigned cseed = (unsigned)(p * 131 + k * 17 + bench_rank * 7 + 1);
        size_t off = my0 + rng_next(&rs[k]) % nch * CHUNK;
        char *dst = (char *)(uintptr_t)tbase[k] + off;
        bench_fill(chk, CHUNK, cseed);
        int rc = fh_put(xctx[k], 0, dst, chk, CHUNK);
        if (rc == FH_OK) {
          memset(chk, 0, CHUNK);
          rc = fh_get(xctx[k], chk, 0, dst, CHUNK);
        }
        if (rc == FH_ERR_NO_RESOURCE) { nowfail[k] = 1; continue; }
        if (rc != FH_OK) BENCH_DIE("%s: check put/get -> %s", sname[k], fh_strerror(rc));
        bench_fill(want, CHUNK, cseed);
        if (memcmp(want, chk, CHUNK) != 0)
          BENCH_DIE("WRONG DATA (%s): fh_get after fh_put at rank 0 offset %zu (working set %zu) returned other bytes",
                    sname[k], off, ws);
        r[k][R_CHECK_OFF] = (double)off;
        r[k][R_CHECK_SEED] = cseed;
      }
    }
    for (int k = 0; k < ns; k++) r[k][R_FAILED] = failed[k] || nowfail[k];
    MPI_Request req;
    MPIB(MPI_Igather(r, nv * NR, MPI_DOUBLE, all, nv * NR, MPI_DOUBLE, 0, MPI_COMM_WORLD, &req));
    pwait(&req);
    int fl[MAXSTRAT] = {0};
    if (bench_rank == 0) {
      /* Aggregate per variant: bandwidth from the median batch (64 KiB / median
       * per-put time) and from bytes / time (which charges every preemption), both
       * summed over the initiators. Primary: the median one with one initiator; with
       * several, bytes / time (3+ busy ranks on 2 cores do not all run at once, so a
       * sum of per-initiator medians would overstate the aggregate). */
      double bwmed[MAXSTRAT + 1] = {0}, bwmean[MAXSTRAT + 1] = {0}, usmed[MAXSTRAT + 1] = {0};
      double hits[MAXSTRAT] = {0}, misses[MAXSTRAT] = {0}, puts[MAXSTRAT + 1] = {0};
      for (int i = 1; i < nranks; i++)
        for (int v = 0; v < nv; v++) {
          const double *x = all + ((size_t)i * (size_t)nv + (size_t)v) * NR;
          if (x[R_FH_TIME] > 0) bwmean[v] += x[R_FH_BYTES] / x[R_FH_TIME] / 1e6;
          if (x[R_BATCH_MED] > 0) bwmed[v] += (double)CHUNK / x[R_BATCH_MED] / 1e6;
          usmed[v] += x[R_BATCH_MED] / ninit;
          puts[v] += x[R_PUTS];
          if (v == VMPI) continue;
          fl[v] |= x[R_FAILED] != 0;
          hits[v] += x[R_HITS];
          misses[v] += x[R_MISSES];
          if (!x[R_FAILED] && x[R_CHECK_SEED] > 0) { /* rank 0's memory holds the pattern */
            bench_fill(want, CHUNK, (unsigned)x[R_CHECK_SEED]);
            if (memcmp(want, tbuf[v] + (size_t)x[R_CHECK_OFF], CHUNK) != 0)
              BENCH_DIE("WRONG DATA (%s): rank 0's memory at offset %zu does not hold rank %d's fh_put", sname[v],
                        (size_t)x[R_CHECK_OFF], i);
          }
        }
      const int multi = ninit > 1;
      double bw[MAXSTRAT + 1], alt[MAXSTRAT + 1];
      for (int v = 0; v < nv; v++) { bw[v] = multi ? bwmean[v] : bwmed[v]; alt[v] = multi ? bwmed[v] : bwmean[v]; }
      const char *method = multi ? "bytes/time" : "median-batch";
      for (int k = 0; k < ns; k++) {
        if (failed[k]) continue; /* reported at the point where it failed */
        fh_stats_t st = stats_of(xctx[k]);
        if (st.bytes_pinned_peak > st0[k].limit_bytes)
          fprintf(stderr, "bench_firehose: INVARIANT BROKEN (%s): rank 0 pinned %llu bytes > limit_bytes %llu\n", sname[k],
                  (unsigned long long)st.bytes_pinned_peak, (unsigned long long)st0[k].limit_bytes);
        const double hr = hits[k] + misses[k] > 0 ? hits[k] / (hits[k] + misses[k]) : 0;
        const char *tail = "%llu,%zu,%zu,%llu,%llu,%d,%s\n";
        if (fl[k]) {
          fprintf(csv, "%s,%zu,,,failed (NO_RESOURCE),,all,%.0f,%.0f,%.0f,,,,", sname[k], ws, puts[k], hits[k], misses[k]);
          fprintf(csv, tail, (unsigned long long)st.bytes_pinned_peak, M, V, (unsigned long long)st0[k].limit_bytes,
                  (unsigned long long)st0[k].unit_bytes, nranks, method);
          printf("%-16s %12s %10s %10s %6s %9s %8s %10s %s\n", sname[k], mib(ws, b1, sizeof b1), "-", "-", "-", "-", "-",
                 mib(st.bytes_pinned_peak, b3, sizeof b3), "failed (NO_RESOURCE)");
        } else {
          fprintf(csv, "%s,%zu,%.1f,%.6f,ok,%.4f,all,%.0f,%.0f,%.0f,%.3f,%.1f,%.4f,", sname[k], ws, bw[k], hr,
                  bw[VMPI] > 0 ? bw[k] / bw[VMPI] : 0, puts[k], hits[k], misses[k], usmed[k] * 1e6, alt[k],
                  alt[VMPI] > 0 ? alt[k] / alt[VMPI] : 0);
          fprintf(csv, tail, (unsigned long long)st.bytes_pinned_peak, M, V, (unsigned long long)st0[k].limit_bytes,
                  (unsigned long long)st0[k].unit_bytes, nranks, method);
          printf("%-16s %12s %10.0f %10.0f %6.2f %8.2f%% %8.0f %10s ok\n", sname[k], mib(ws, b1, sizeof b1), bw[k],
                 bw[VMPI], bw[VMPI] > 0 ? bw[k] / bw[VMPI] : 0, 100 * hr, misses[k],
                 mib(st.bytes_pinned_peak, b3, sizeof b3));
        }
      }
      fprintf(csv, "mpi-raw,%zu,%.1f,,ok,1.0,all,%.0f,,,%.3f,%.1f,1.0,,%zu,%zu,%llu,%llu,%d,%s\n", ws, bw[VMPI], puts[VMPI],
              usmed[VMPI] * 1e6, alt[VMPI], M, V, (unsigned long long)limit, (unsigned long long)st0[0].unit_bytes, nranks,
              method);
      printf("%-16s %12s %10.0f\n", "raw MPI", mib(ws, b1, sizeof b1), bw[VMPI]);
      fflush(csv);
      fflush(stdout);
    }
    MPIB(MPI_Ibcast(fl, ns, MPI_INT, 0, MPI_COMM_WORLD, &req));
    pwait(&req);
    for (int k = 0; k < ns; k++) failed[k] |= fl[k];
  }
  for (int v = 0; v < nv; v++) samples_free(&smp[v]);
  pbarrier();
  MPIB(MPI_Win_unlock_all(win));
  MPIB(MPI_Win_free(&win));
  if (bench_rank == 0) {
    fclose(csv);
    printf("bench_firehose sweep: done (CSV in %s/fh_sweep.csv)\n", outdir);
    /* Rank 0's buffers were reached through firehoses: drop them before freeing. */
    for (int k = 0; k < ns; k++) FHB(fh_mem_invalidate(xctx[k], tbuf[k], bufsz));
  }
  pbarrier();
  for (int k = 0; k < ns; k++) FHB(fh_finalize(xctx[k]));
  nx = 0;
  for (int v = 0; v < nv; v++) free(raw[v]);
  free(src);
  free(chk);
  free(want);
  free(all);
  return 0;
}

/* ====================================================================== hit */
enum { V_FH, V_MPI, NV };

static int run_hit(const char *outdir) {
  if (nranks < 2) BENCH_DIE("hit needs at least 2 ranks");
  const size_t BUFSZ = (size_t)1 << 20, N = 8;
  unsigned char *tbuf = xmalloc(BUFSZ); /* plain malloc, every rank (rank 1's is used) */
  memset(tbuf, 0, BUFSZ);
  MPI_Win win;
  MPIB(MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win));
  if (bench_rank == 1) MPIB(MPI_Win_attach(win, tbuf, BUFSZ));
  MPI_Aint disp;
  MPIB(MPI_Get_address(tbuf, &disp));
  uint64_t t1[2] = {(uint64_t)(uintptr_t)tbuf, (uint64_t)disp};
  MPIB(MPI_Bcast(t1, 2, MPI_UINT64_T, 1, MPI_COMM_WORLD));
  char *remote = (char *)(uintptr_t)t1[0];
  MPI_Aint rdisp = (MPI_Aint)t1[1];
  MPIB(MPI_Win_lock_all(MPI_MODE_NOCHECK, win));
  bench_poll_barrier(ctx);
  if (bench_rank == 0) {
    fh_stats_t st0 = stats_now();
    print_settings("hit", NULL, &st0);
    uint64_t src = 0x1122334455667788ULL, dst = 0;
    FHB(fh_put(ctx, 1, remote + 64, &src, N)); /* the one miss: moves a firehose */
    FHB(fh_get(ctx, &dst, 1, remote + 64, N));
    if (dst != src) BENCH_DIE("WRONG DATA: fh_get after fh_put to rank 1's malloc'd memory");
    FHB(fh_stats_reset(ctx));
    FILE *csv = bench_csv_open(outdir, "bench_firehose_hit");
    samples_t s[NV], s1[NV];
    for (int v = 0; v < NV; v++) { samples_init(&s[v], 4096); samples_init(&s1[v], 4096); }
    const int ITERS = 32000;
    printf("== hit: %zu-byte ops rank 0 -> rank 1's plain malloc'd memory through a hot firehose vs MPI op +\n"
           "   MPI_Win_flush on an MPI_Win_create_dynamic window where rank 1 attached the same memory (lock_all).\n"
           "   Batches of %d of each alternate; sample = batch time / %d (charges the periodic AM poll);\n"
           "   second pass: every op timed alone. %d ops per variant per pass; medians.\n", N, BATCH, BATCH, ITERS);
    printf("%-4s %10s %10s %7s %11s | %10s %10s %7s  (single op)\n", "op", "fh us", "MPI us", "ratio", "excess ns",
           "fh us", "MPI us", "ratio");
    for (int is_put = 1; is_put >= 0; is_put--) {
      for (int pass = 0; pass < 2; pass++) {
        samples_t *ss = pass ? s1 : s;
        int per = pass ? 1 : BATCH;
        for (int v = 0; v < NV; v++) samples_reset(&ss[v]);
        for (int warm = 1; warm >= 0; warm--)
          for (int done = 0, round = 0; done < (warm ? 256 : ITERS); done += BATCH, round++)
            for (int k = 0; k < NV; k++) {
              int v = (k + round) % NV;
              for (int j = 0; j < BATCH; j += per) {
                double t0 = bench_now();
                for (int q = 0; q < per; q++) {
                  if (v == V_FH) {
                    if (is_put) FHB(fh_put(ctx, 1, remote + 64, &src, N));
                    else FHB(fh_get(ctx, &dst, 1, remote + 64, N));
                  } else {
                    if (is_put) MPIB(MPI_Put(&src, (int)N, MPI_BYTE, 1, rdisp + 128, (int)N, MPI_BYTE, win));
                    else MPIB(MPI_Get(&dst, (int)N, MPI_BYTE, 1, rdisp + 128, (int)N, MPI_BYTE, win));
                    MPIB(MPI_Win_flush(1, win));
                  }
                }
                if (!warm) samples_add(&ss[v], (bench_now() - t0) / per);
              }
            }
      }
      const char *op = is_put ? "put" : "get";
      char name[64], base[128];
      snprintf(name, sizeof name, "%s_hit_malloc", op);
      snprintf(base, sizeof base, "MPI_%s+MPI_Win_flush (dynamic window, same memory attached)", is_put ? "Put" : "Get");
      bench_row_t r = {name, base, N, samples_median(&s[V_FH]) * 1e6, samples_median(&s[V_MPI]) * 1e6,
                       samples_mean(&s[V_FH]) * 1e6, samples_mean(&s[V_MPI]) * 1e6, s[V_FH].n};
      bench_csv_row(csv, &r);
      bench_row_t r1 = r;
      snprintf(name, sizeof name, "%s_hit_malloc_single_op", op);
      r1.benchmark = name;
      r1.fh_us = samples_median(&s1[V_FH]) * 1e6;
      r1.base_us = samples_median(&s1[V_MPI]) * 1e6;
      r1.fh_mean_us = samples_mean(&s1[V_FH]) * 1e6;
      r1.base_mean_us = samples_mean(&s1[V_MPI]) * 1e6;
      r1.samples = s1[V_FH].n;
      bench_csv_row(csv, &r1);
      printf("%-4s %10.3f %10.3f %7.2f %11.0f | %10.3f %10.3f %7.2f\n", op, r.fh_us, r.base_us, r.fh_us / r.base_us,
             (r.fh_us - r.base_us) * 1e3, r1.fh_us, r1.base_us, r1.fh_us / r1.base_us);
      fflush(stdout);
    }
    fh_stats_t st = stats_now();
    double hr = st.hits + st.misses ? (double)st.hits / (double)(st.hits + st.misses) : 0;
    printf("   firehose over the timed ops: hits %llu, misses %llu (hit rate %.4f%%), moves sent %llu\n",
           (unsigned long long)st.hits, (unsigned long long)st.misses, 100 * hr, (unsigned long long)st.moves_sent);
    if (st.misses > 0) printf("   WARNING: misses on a hot firehose\n");
    FHB(fh_get(ctx, &dst, 1, remote + 64, N));
    if (dst != src) BENCH_DIE("WRONG DATA at the end of the hit benchmark");
    fclose(csv);
    for (int v = 0; v < NV; v++) { samples_free(&s[v]); samples_free(&s1[v]); }
    printf("bench_firehose hit: done (CSV in %s/bench_firehose_hit.csv)\n", outdir);
  }
  bench_poll_barrier(ctx);
  MPIB(MPI_Win_unlock_all(win));
  if (bench_rank == 1) MPIB(MPI_Win_detach(win, tbuf));
  MPIB(MPI_Win_free(&win));
  if (bench_rank == 1) FHB(fh_mem_invalidate(ctx, tbuf, BUFSZ));
  bench_poll_barrier(ctx);
  free(tbuf);
  return 0;
}

/* ===================================================================== miss */
enum { H_PING = 128, H_PONG };
static volatile uint64_t pongs;
static void on_ping(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  (void)buf; (void)nbytes; (void)user;
  int rc = fh_am_reply_short(tok, H_PONG, args, nargs);
  if (rc != FH_OK) BENCH_DIE("fh_am_reply_short -> %s", fh_strerror(rc));
}
static void on_pong(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  (void)tok; (void)buf; (void)nbytes; (void)args; (void)nargs; (void)user;
  pongs++;
}

enum { W_PUT, W_GET, W_AM, W_MLOCK, W_ATTACH, W_LOCK, W_UNLOCK, W_ATT, W_DET, NW_ };
#define PINW 32 /* units rank 1 walks for the pin baseline */

static int run_miss(const char *outdir) {
  if (nranks < 2) BENCH_DIE("miss needs at least 2 ranks");
  FHB(fh_am_register(ctx, H_PING, on_ping, NULL));
  FHB(fh_am_register(ctx, H_PONG, on_pong, NULL));
  fh_stats_t st0 = stats_now();
  size_t unit = st0.unit_bytes ? st0.unit_bytes : 4096;
  const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  /* Walk over more units than M + MAXVICTIM can hold: with FIFO/LRU victims a cyclic
   * walk then always misses. Capped at 1 GiB of target memory. */
  size_t nunits = 2 * (st0.limit_bytes / unit) + 16;
  if (nunits * unit > ((size_t)1 << 30)) nunits = ((size_t)1 << 30) / unit;
  if (nunits < 2 * PINW) nunits = 2 * PINW;
  const size_t bufsz = nunits * unit;
  unsigned char *raw = NULL, *tbuf = NULL, *pinbuf = NULL;
  if (bench_rank == 1) {
    raw = xmalloc(bufsz + unit);
    tbuf = (unsigned char *)(((uintptr_t)raw + unit - 1) & ~(uintptr_t)(unit - 1));
    memset(tbuf, 1, bufsz);
  }
  uint64_t tb = (uint64_t)(uintptr_t)tbuf;
  MPIB(MPI_Bcast(&tb, 1, MPI_UINT64_T, 1, MPI_COMM_WORLD));
  char *remote = (char *)(uintptr_t)tb;
  MPI_Win dwin; /* rank 1 times Win_attach + detach on it */
  MPIB(MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &dwin));
  if (bench_rank == 0) print_settings("miss", NULL, &st0);
  bench_poll_barrier(ctx);

  size_t wi = 0, pi = 0; /* the walks */
  uint64_t v8 = 42, d8 = 0;
  const size_t warm = st0.limit_bytes / unit + 16;
  char b1[32];
  if (bench_rank == 0) {
    bench_progress("miss: warm-up walk over %zu units of %s", warm, mib(unit, b1, sizeof b1));
    for (size_t i = 0; i < warm; i++, wi++) FHB(fh_put(ctx, 1, remote + (wi % nunits) * unit + 64, &v8, 8));
  }
  bench_poll_barrier(ctx);
  /* Bytes one move pins: what rank 1 holds pinned per live pin after the warm-up. */
  uint64_t pinsz = 0;
  if (bench_rank == 1) {
    fh_stats_t s = stats_now();
    uint64_t live = s.pins > s.unpins ? s.pins - s.unpins : 0;
    pinsz = live ? s.bytes_pinned / live : unit;
    pinsz = (pinsz + pg - 1) / pg * pg;
    if (pinsz == 0) pinsz = pg;
    if (pinsz > unit) pinsz = unit;
    /* A separate buffer of PINW units walked cyclically, so the pin baseline touches
     * cold page tables like the library's moves do (not one hot range). */
    pinbuf = aligned_alloc(pg, PINW * pinsz);
    if (!pinbuf) BENCH_DIE("aligned_alloc");
    memset(pinbuf, 2, PINW * pinsz);
  }
  MPI_Request req;
  MPIB(MPI_Ibcast(&pinsz, 1, MPI_UINT64_T, 1, MPI_COMM_WORLD, &req));
  pwait(&req);
  FHB(fh_stats_reset(ctx));
  bench_poll_barrier(ctx);

  samples_t s[NW_];
  for (int v = 0; v < NW_; v++) samples_init(&s[v], 2048);
  const int ROUNDS = getenv("BENCH_MISS_ROUNDS") ? atoi(getenv("BENCH_MISS_ROUNDS")) : 150, B = 8;
  double tstart = bench_now();
  uint64_t x = 0;
  for (int round = 0; round < ROUNDS; round++) {
    if (bench_rank == 0) {
      for (int k = 0; k < 3; k++) {
        int v = (k + round) % 3; /* W_PUT, W_GET, W_AM */
        for (int j = 0; j < B; j++) {
          double t0 = bench_now();
          if (v == W_PUT) {
            FHB(fh_put(ctx, 1, remote + (wi++ % nunits) * unit + 64, &v8, 8));
          } else if (v == W_GET) {
            FHB(fh_get(ctx, &d8, 1, remote + (wi++ % nunits) * unit + 64, 8));
          } else {
            uint64_t want = pongs + 1;
            x++;
            FHB(fh_am_request_short(ctx, 1, H_PING, &x, 1));
            while (pongs < want) FHB(fh_poll(ctx));
          }
          samples_add(&s[v], bench_now() - t0);
        }
      }
    }
    bench_poll_barrier(ctx);
    if (bench_rank == 1) {
      for (int k = 0; k < 2; k++) {
        int v = (k + round) % 2 ? W_ATTACH : W_MLOCK;
        for (int j = 0; j < B; j++) {
          unsigned char *pb = pinbuf + (pi++ % PINW) * pinsz;
          double t0 = bench_now(), tm;
          if (v == W_MLOCK) {
            if (mlock(pb, pinsz) != 0) BENCH_DIE("mlock(%llu) failed: %s", (unsigned long long)pinsz, strerror(errno));
            tm = bench_now();
            if (munlock(pb, pinsz) != 0) BENCH_DIE("munlock failed: %s", strerror(errno));
          } else {
            MPIB(MPI_Win_attach(dwin, pb, (MPI_Aint)pinsz));
            tm = bench_now();
            MPIB(MPI_Win_detach(dwin, pb));
          }
          double t2 = bench_now();
          samples_add(&s[v], t2 - t0);
          samples_add(&s[v == W_MLOCK ? W_LOCK : W_ATT], tm - t0);
          samples_add(&s[v == W_MLOCK ? W_UNLOCK : W_DET], t2 - tm);
        }
      }
    }
    bench_poll_barrier(ctx);
    if (round == 0 || (round + 1) % 50 == 0)
      bench_progress("miss: round %d of %d (%.1f s)", round + 1, ROUNDS, bench_now() - tstart);
  }
  if (bench_rank == 0 && d8 != 1 && d8 != 42 && d8 != 0x0101010101010101ULL)
    BENCH_DIE("WRONG DATA: a miss fh_get returned %#llx", (unsigned long long)d8);
  /* Rank 1 sends its medians and counters to rank 0. */
  double t1[15] = {0};
  if (bench_rank == 1) {
    fh_stats_t st = stats_now();
    samples_median(&s[W_MLOCK]); /* sorts */
    t1[8] = pct(&s[W_MLOCK], .9);
    t1[9] = pct(&s[W_MLOCK], .99);
    t1[10] = pct(&s[W_MLOCK], 1);
    t1[11] = samples_median(&s[W_LOCK]);
    t1[12] = samples_median(&s[W_UNLOCK]);
    t1[13] = samples_median(&s[W_ATT]);
    t1[14] = samples_median(&s[W_DET]);
    t1[0] = samples_median(&s[W_MLOCK]);
    t1[1] = samples_median(&s[W_ATTACH]);
    t1[2] = (double)st.moves_handled;
    t1[3] = (double)st.pins;
    t1[4] = (double)st.unpins;
    t1[5] = (double)st.am_sent;
    t1[6] = (double)st.bytes_pinned_peak;
    t1[7] = (double)st.limit_bytes;
  }
  MPIB(MPI_Ibcast(t1, 15, MPI_DOUBLE, 1, MPI_COMM_WORLD, &req));
  pwait(&req);
  if (bench_rank == 0) {
    fh_stats_t st = stats_now();
    double mput = samples_median(&s[W_PUT]) * 1e6, mget = samples_median(&s[W_GET]) * 1e6;
    double rtt = samples_median(&s[W_AM]) * 1e6, ml = t1[0] * 1e6, at = t1[1] * 1e6, base = rtt + ml + at;
    double ops = (double)(s[W_PUT].n + s[W_GET].n);
    double hr = st.hits + st.misses ? (double)st.hits / (double)(st.hits + st.misses) : 0;
    printf("== miss: 8-byte fh_put / fh_get from rank 0, each to a new %s unit of rank 1's malloc'd memory (cyclic walk over\n"
           "   %zu units, more than M+MAXVICTIM holds); %d samples each, every op timed; medians (means in brackets)\n",
           mib(unit, b1, sizeof b1), nunits, s[W_PUT].n);
    printf("   one move pins %llu bytes on rank 1 (bytes pinned / live pins after the warm-up)\n", (unsigned long long)pinsz);
    printf("   AM short round trip              %9.2f us (%.2f)\n", rtt, samples_mean(&s[W_AM]) * 1e6);
    printf("   mlock + munlock %8llu B (rank 1) %9.2f us  (mlock %.2f, munlock %.2f)\n", (unsigned long long)pinsz, ml,
           t1[11] * 1e6, t1[12] * 1e6);
    printf("   Win_attach + detach (rank 1)     %9.2f us  (attach %.2f, detach %.2f)\n", at, t1[13] * 1e6, t1[14] * 1e6);
    printf("   = AM RTT + pin                   %9.2f us\n", base);
    printf("   fh_put miss                      %9.2f us (%.2f)  ratio %.2f\n", mput, samples_mean(&s[W_PUT]) * 1e6, mput / base);
    printf("   fh_get miss                      %9.2f us (%.2f)  ratio %.2f\n", mget, samples_mean(&s[W_GET]) * 1e6, mget / base);
    printf("   tails (p90 / p99 / max, us): put miss %.1f / %.1f / %.1f; get miss %.1f / %.1f / %.1f; AM RTT %.1f / %.1f / %.1f\n",
           pct(&s[W_PUT], .9) * 1e6, pct(&s[W_PUT], .99) * 1e6, pct(&s[W_PUT], 1) * 1e6, pct(&s[W_GET], .9) * 1e6,
           pct(&s[W_GET], .99) * 1e6, pct(&s[W_GET], 1) * 1e6, pct(&s[W_AM], .9) * 1e6, pct(&s[W_AM], .99) * 1e6,
           pct(&s[W_AM], 1) * 1e6);
    printf("                                 mlock+munlock on rank 1 %.1f / %.1f / %.1f\n", t1[8] * 1e6, t1[9] * 1e6,
           t1[10] * 1e6);
    printf("   counters over the timed part: rank 0 misses %llu of %.0f ops (hit rate %.2f%%), putinmove %llu, AMs sent %llu"
           " (%.2f per miss, not counting the RTT pings);\n   rank 1 moves handled %.0f, pins %.0f, unpins %.0f, AMs sent %.0f"
           " (not counting pongs), pinned peak %.0f of limit %.0f\n",
           (unsigned long long)st.misses, ops, 100 * hr, (unsigned long long)st.putinmove, (unsigned long long)st.am_sent,
           st.misses ? (double)(st.am_sent - (uint64_t)s[W_AM].n) / (double)st.misses : 0, t1[2], t1[3], t1[4],
           t1[5] - s[W_AM].n, t1[6], t1[7]);
    if (t1[6] > t1[7]) printf("   INVARIANT BROKEN: rank 1 pinned more than limit_bytes\n");
    FILE *csv = bench_csv_open(outdir, "bench_firehose_miss");
    char name[64];
    snprintf(name, sizeof name, "miss_put_unit%zuK", unit >> 10);
    bench_row_t r = {name, "AM short RTT + mlock/munlock + Win_attach/detach of the bytes one move pins", unit, mput, base,
                     samples_mean(&s[W_PUT]) * 1e6, base, s[W_PUT].n};
    bench_csv_row(csv, &r);
    snprintf(name, sizeof name, "miss_get_unit%zuK", unit >> 10);
    r.fh_us = mget;
    r.fh_mean_us = samples_mean(&s[W_GET]) * 1e6;
    bench_csv_row(csv, &r);
    fclose(csv);
    char path[4096];
    snprintf(path, sizeof path, "%s/bench_firehose_miss_parts.csv", outdir);
    FILE *f = fopen(path, "w");
    if (!f) BENCH_DIE("cannot open %s", path);
    fprintf(f, "mode,unit_bytes,pin_bytes,miss_put_us,miss_get_us,am_rtt_us,mlock_munlock_us,attach_detach_us,"
               "ratio_put,ratio_get,hit_rate,misses,am_sent_per_miss,target_moves,target_pins,target_unpins,"
               "mlock_us,munlock_us,attach_us,detach_us\n");
    fprintf(f, "%s,%zu,%llu,%.3f,%.3f,%.3f,%.3f,%.3f,%.4f,%.4f,%.6f,%llu,%.3f,%.0f,%.0f,%.0f,%.3f,%.3f,%.3f,%.3f\n",
            st0.mode == 0 ? "page" : "region", unit, (unsigned long long)pinsz, mput, mget, rtt, ml, at, mput / base,
            mget / base, hr, (unsigned long long)st.misses,
            st.misses ? (double)(st.am_sent - (uint64_t)s[W_AM].n) / (double)st.misses : 0, t1[2],
            t1[3], t1[4], t1[11] * 1e6, t1[12] * 1e6, t1[13] * 1e6, t1[14] * 1e6);
    fclose(f);
    printf("bench_firehose miss: done (CSV in %s/bench_firehose_miss.csv, bench_firehose_miss_parts.csv)\n", outdir);
    fflush(stdout);
  }
  for (int v = 0; v < NW_; v++) samples_free(&s[v]);
  bench_poll_barrier(ctx);
  MPIB(MPI_Win_free(&dwin));
  if (bench_rank == 1) FHB(fh_mem_invalidate(ctx, tbuf, bufsz));
  bench_poll_barrier(ctx);
  free(raw);
  free(pinbuf);
  return 0;
}

int main(int argc, char **argv) {
  bench_mpi_init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &bench_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  const char *mode = argc > 1 ? argv[1] : "";
  const char *outdir = argc > 2 ? argv[2] : ".";
  if (strcmp(mode, "sweep") && strcmp(mode, "hit") && strcmp(mode, "miss")) {
    if (bench_rank == 0) fprintf(stderr, "usage: bench_firehose sweep|hit|miss <outdir>\n");
    MPI_Finalize();
    return 2;
  }
  FHB(fh_init(MPI_COMM_WORLD, NULL, &ctx));
  bench_poll_barrier(ctx);
  int rc = !strcmp(mode, "sweep") ? run_sweep(outdir) : !strcmp(mode, "hit") ? run_hit(outdir) : run_miss(outdir);
  bench_poll_barrier(ctx);
  FHB(fh_finalize(ctx));
  MPI_Finalize();
  return rc;
}
