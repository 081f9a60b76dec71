/* bench.h -- shared helpers for the firehose benchmarks.
 *
 * Method: every benchmark measures firehose and a raw-MPI baseline in the same run,
 * interleaving batches of the two (so drift in machine load hits both alike), and
 * reports the median of many iterations of each plus the ratio fh / baseline
 * (> 1 means firehose is slower). Timing is MPI_Wtime. Results go to stdout (a
 * table) and to <outdir>/<benchmark>.csv with the columns of BENCH_CSV_HEADER. */
#ifndef FH_BENCH_H
#define FH_BENCH_H
#include <mpi.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "firehose.h"

static int bench_rank = -1;

#define BENCH_DIE(...)                                                         \
  do {                                                                         \
    char m_[512];                                                              \
    fh_last_error(m_, sizeof m_);                                              \
    fprintf(stderr, "[rank %d] bench FAILED at %s:%d: ", bench_rank, __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__);                                              \
    fprintf(stderr, "\n[rank %d]   (firehose last error: %s)\n", bench_rank, m_); \
    fflush(stderr);                                                            \
    MPI_Abort(MPI_COMM_WORLD, 1);                                              \
  } while (0)

/* A firehose call that must succeed. */
#define FHB(call)                                                              \
  do {                                                                         \
    int rc_ = (call);                                                          \
    if (rc_ != FH_OK) BENCH_DIE("%s -> %s", #call, fh_strerror(rc_));          \
  } while (0)

/* An MPI call that must succeed. */
#define MPIB(call)                                                             \
  do {                                                                         \
    int rc_ = (call);                                                          \
    if (rc_ != MPI_SUCCESS) BENCH_DIE("%s -> MPI error %d", #call, rc_);       \
  } while (0)

static inline double bench_now(void) { return MPI_Wtime(); }

/* MPI_Init, or MPI_Init_thread(MPI_THREAD_MULTIPLE) when BENCH_MPI_THREAD=multiple
 * (then firehose takes no serialising lock of its own around MPI calls, and MPI
 * itself runs its thread-safe paths). Returns the provided level. */
static inline int bench_mpi_init(int *argc, char ***argv) {
  const char *t = getenv("BENCH_MPI_THREAD");
  int provided = MPI_THREAD_SINGLE;
  if (t && strcmp(t, "multiple") == 0) MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  else MPI_Init(argc, argv);
  return provided;
}
static inline const char *bench_thread_name(int level) {
  return level == MPI_THREAD_MULTIPLE ? "MPI_THREAD_MULTIPLE"
         : level == MPI_THREAD_SERIALIZED ? "MPI_THREAD_SERIALIZED"
         : level == MPI_THREAD_FUNNELED ? "MPI_THREAD_FUNNELED" : "MPI_THREAD_SINGLE (MPI_Init)";
}

/* ------------------------------------------------------------------ samples */
typedef struct {
  double *v;
  int n, cap;
} samples_t;

static inline void samples_init(samples_t *s, int cap) {
  s->v = malloc(sizeof(double) * (size_t)(cap > 0 ? cap : 1));
  s->n = 0;
  s->cap = cap;
  if (!s->v) BENCH_DIE("out of memory");
}
static inline void samples_free(samples_t *s) { free(s->v); s->v = NULL; s->n = s->cap = 0; }
static inline void samples_reset(samples_t *s) { s->n = 0; }
static inline void samples_add(samples_t *s, double x) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 64;
    s->v = realloc(s->v, sizeof(double) * (size_t)s->cap);
    if (!s->v) BENCH_DIE("out of memory");
  }
  s->v[s->n++] = x;
}
static int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
/* Median (sorts the samples in place). */
static inline double samples_median(samples_t *s) {
  if (s->n == 0) return 0;
  qsort(s->v, (size_t)s->n, sizeof(double), bench_cmp_double);
  return s->n % 2 ? s->v[s->n / 2] : 0.5 * (s->v[s->n / 2 - 1] + s->v[s->n / 2]);
}
static inline double samples_mean(const samples_t *s) {
  double t = 0;
  for (int i = 0; i < s->n; i++) t += s->v[i];
  return s->n ? t / s->n : 0;
}

/* ---------------------------------------------------------------- output */
/* Progress lines go to stderr (rank 0 only) so stdout stays a clean report. */
static inline void bench_progress(const char *fmt, ...) {
  if (bench_rank != 0) return;
  char line[512] = "  .. ";
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line + 5, sizeof line - 6, fmt, ap);
  va_end(ap);
  strcat(line, "\n");
  fputs(line, stderr); /* one write: never split by the launcher's forwarding */
  fflush(stderr);
}

#define BENCH_CSV_HEADER                                                       \
  "benchmark,size,fh_us,baseline_us,ratio,fh_MBps,baseline_MBps,fh_ops_per_s,baseline_ops_per_s," \
  "fh_mean_us,baseline_mean_us,samples,baseline"

/* Open <dir>/<name>.csv (creating dir) and write the header. */
static inline FILE *bench_csv_open(const char *dir, const char *name) {
  char path[4096];
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) BENCH_DIE("cannot create directory %s: %s", dir, strerror(errno));
  snprintf(path, sizeof path, "%s/%s.csv", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) BENCH_DIE("cannot open %s: %s", path, strerror(errno));
  fprintf(f, "%s\n", BENCH_CSV_HEADER);
  return f;
}

/* One result row. Times are per operation (us); bandwidth from size / time. */
typedef struct {
  const char *benchmark; /* e.g. "put_registered" */
  const char *baseline;  /* e.g. "MPI_Put+MPI_Win_flush (dynamic window)" */
  size_t size;           /* bytes per operation */
  double fh_us, base_us; /* medians */
  double fh_mean_us, base_mean_us;
  int samples;           /* samples per side */
} bench_row_t;

static inline double bench_mbps(size_t size, double us) { return us > 0 ? (double)size / us : 0; }

static inline void bench_csv_row(FILE *f, const bench_row_t *r) {
  fprintf(f, "%s,%zu,%.4f,%.4f,%.4f,%.2f,%.2f,%.1f,%.1f,%.4f,%.4f,%d,\"%s\"\n", r->benchmark, r->size, r->fh_us,
          r->base_us, r->base_us > 0 ? r->fh_us / r->base_us : 0, bench_mbps(r->size, r->fh_us),
          bench_mbps(r->size, r->base_us), r->fh_us > 0 ? 1e6 / r->fh_us : 0, r->base_us > 0 ? 1e6 / r->base_us : 0,
          r->fh_mean_us, r->base_mean_us, r->samples, r->baseline);
  fflush(f);
}

/* Human-readable size ("8 B", "4 KiB", "1 MiB"). */
static inline const char *bench_size_str(size_t n, char *buf, size_t len) {
  if (n >= (1u << 20) && n % (1u << 20) == 0) snprintf(buf, len, "%zu MiB", n >> 20);
  else if (n >= 1024 && n % 1024 == 0) snprintf(buf, len, "%zu KiB", n >> 10);
  else snprintf(buf, len, "%zu B", n);
  return buf;
}

/* Wait in a barrier while serving firehose AMs (a peer may need one of our
 * handlers, e.g. the first access check of registered memory, to get there). */
static inline void bench_poll_barrier(fh_ctx_t *ctx) {
  MPI_Request req;
  int done = 0;
  MPIB(MPI_Ibarrier(MPI_COMM_WORLD, &req));
  while (!done) {
    FHB(fh_poll(ctx));
    MPIB(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
  }
}

/* Iterations for a message size: many for small messages, fewer for large ones,
 * so that each size costs roughly the same time. */
static inline int bench_iters(size_t size, int small_iters, int min_iters) {
  double budget = 1.0e9; /* bytes moved per side per size, roughly */
  int n = size ? (int)(budget / (double)size) : small_iters;
  if (n > small_iters) n = small_iters;
  if (n < min_iters) n = min_iters;
  return n;
}

static inline void bench_fill(void *p, size_t n, unsigned seed) {
  unsigned char *c = p;
  for (size_t i = 0; i < n; i++) c[i] = (unsigned char)(seed + i * 13);
}

static inline void bench_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* The machine's floor for a small message between ranks 0 and 1: a counter in one
 * node-shared cache line passed back and forth (no library, `pause` in the spin),
 * ns per half round trip, as rank 0 measures it (-1 elsewhere, or when the two are
 * not on one node). On a VM the two ranks' vCPUs can land near each other or far
 * apart between launches; this says which, so a launch's ratios can be read. */
static inline double bench_line_crossing_ns(void) {
  MPI_Comm node;
  int nrank, nsize;
  MPIB(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  MPIB(MPI_Comm_rank(node, &nrank));
  MPIB(MPI_Comm_size(node, &nsize));
  int world;
  MPIB(MPI_Comm_rank(MPI_COMM_WORLD, &world));
  int ok = nsize >= 2 && nrank == world, all_ok = 0;
  MPIB(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  double ns = -1;
  if (all_ok) {
    volatile uint64_t *line;
    MPI_Win win;
    MPIB(MPI_Win_allocate_shared(nrank == 0 ? 64 : 0, 64, MPI_INFO_NULL, node, &line, &win));
    MPI_Aint len;
    int unit;
    MPIB(MPI_Win_shared_query(win, 0, &len, &unit, &line));
    if (nrank == 0) __atomic_store_n(line, 0, __ATOMIC_RELEASE);
    MPIB(MPI_Barrier(node));
    /* The median of 9 batches: a batch in which a rank lost its core says nothing. */
    enum { BATCHES = 9 };
    const uint64_t n = 20000;
    double batch[BATCHES];
    uint64_t at = (uint64_t)nrank;
    for (int b = 0; b < BATCHES; b++) {
      double t0 = MPI_Wtime();
      for (uint64_t k = 0; nrank < 2 && k < n; k++, at += 2) {
        while (__atomic_load_n(line, __ATOMIC_ACQUIRE) != at) bench_pause();
        __atomic_store_n(line, at + 1, __ATOMIC_RELEASE);
      }
      batch[b] = (MPI_Wtime() - t0) / (2.0 * (double)n) * 1e9;
    }
    qsort(batch, BATCHES, sizeof *batch, bench_cmp_double);
    if (nrank == 0) ns = batch[BATCHES / 2];
    MPIB(MPI_Barrier(node));
    MPIB(MPI_Win_free(&win));
  }
  MPIB(MPI_Comm_free(&node));
  return ns;
}
#endif
