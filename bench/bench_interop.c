/* bench_interop -- the interoperability issue's benchmarks, each against a baseline
 * in the same launch (interleaved batches, medians):
 *
 *   cma       2 ranks: 8 B and 64 KiB fh_put/fh_get to the peer's plain malloc memory
 *             (nobody registered it: the kernel's single copy) vs MPI_Put/MPI_Get +
 *             flush on a dynamic window where the same memory is attached.
 *             Targets: <= 0.9 at 8 B, <= 1.0 at 64 KiB.
 *   first     2 ranks: AMs and firehose moves this rank sends for its first put into
 *             the peer's fh_mem_register'ed memory (fh_stats_get counts). Target: 0 AMs.
 *   progress  any rank count: MPI_Barrier, 8 B MPI_Allreduce and MPI_Wait (ring
 *             exchange) as the application calls them (interposed by firehose: they
 *             serve the library while they wait) vs the same calls straight to MPI
 *             (PMPI_*), with a live context. Target: <= 1.10.
 *
 * Usage: bench_interop MODE [outdir]   (results also in <outdir>/bench_interop_MODE.csv) */
#include "bench.h"

#define BATCHES 41

static void report(FILE *csv, const char *name, const char *base, size_t size, samples_t *f, samples_t *b) {
  bench_row_t r = {name, base, size, 0, 0, samples_mean(f), samples_mean(b), f->n};
  r.fh_us = samples_median(f);
  r.base_us = samples_median(b);
  char sz[32];
  if (bench_rank == 0) {
    printf("%-26s %8s  fh %9.3f us  base %9.3f us  ratio %6.3f   (baseline: %s)\n", name,
           bench_size_str(size, sz, sizeof sz), r.fh_us, r.base_us, r.base_us > 0 ? r.fh_us / r.base_us : 0, base);
    fflush(stdout);
    bench_csv_row(csv, &r);
  }
}

static void mode_cma(fh_ctx_t *ctx, FILE *csv) {
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (n != 2) BENCH_DIE("cma mode runs on 2 ranks");
  const size_t big = 65536;
  char *target = malloc(big), *local = malloc(big);
  bench_fill(target, big, 1);
  bench_fill(local, big, 2);
  MPI_Win win;
  MPIB(MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win));
  MPIB(MPI_Win_attach(win, target, big));
  MPI_Aint mine, his;
  MPIB(MPI_Get_address(target, &mine));
  MPI_Aint addrs[2];
  MPIB(MPI_Allgather(&mine, 1, MPI_AINT, addrs, 1, MPI_AINT, MPI_COMM_WORLD));
  his = addrs[1 - rank];
  MPIB(MPI_Win_lock_all(MPI_MODE_NOCHECK, win));
  size_t sizes[2] = {8, big};
  for (int si = 0; si < 2; si++) {
    size_t s = sizes[si];
    int iters = s == 8 ? 2000 : 200;
    for (int put = 1; put >= 0; put--) {
      samples_t f, b;
      samples_init(&f, BATCHES);
      samples_init(&b, BATCHES);
      if (rank == 0) {
        /* Warm both paths once. */
        if (put) FHB(fh_put(ctx, 1, (void *)his, local, s));
        else FHB(fh_get(ctx, local, 1, (void *)his, s));
        for (int bt = 0; bt < BATCHES; bt++) {
          double t0 = bench_now();
          for (int i = 0; i < iters; i++) {
            if (put) FHB(fh_put(ctx, 1, (void *)his, local, s));
            else FHB(fh_get(ctx, local, 1, (void *)his, s));
          }
          double t1 = bench_now();
          for (int i = 0; i < iters; i++) {
            if (put) MPIB(MPI_Put(local, (int)s, MPI_BYTE, 1, his, (int)s, MPI_BYTE, win));
            else MPIB(MPI_Get(local, (int)s, MPI_BYTE, 1, his, (int)s, MPI_BYTE, win));
            MPIB(PMPI_Win_flush(1, win));
          }
          double t2 = bench_now();
          samples_add(&f, (t1 - t0) * 1e6 / iters);
          samples_add(&b, (t2 - t1) * 1e6 / iters);
        }
      }
      report(csv, put ? "put_plain_node_peer" : "get_plain_node_peer", put ? "MPI_Put+flush (dynamic window)" : "MPI_Get+flush (dynamic window)", s, &f, &b);
      samples_free(&f);
      samples_free(&b);
      PMPI_Barrier(MPI_COMM_WORLD);
    }
  }
  MPIB(MPI_Win_unlock_all(win));
  MPIB(MPI_Win_detach(win, target));
  MPIB(MPI_Win_free(&win));
  free(target);
  free(local);
}

static void mode_first(fh_ctx_t *ctx, FILE *csv) {
  (void)csv;
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const size_t len = 1 << 20;
  char *reg = malloc(len);
  FHB(fh_mem_register(ctx, reg, len));
  void **all = malloc(sizeof(void *) * (size_t)n);
  MPIB(MPI_Allgather(&reg, sizeof(void *), MPI_BYTE, all, sizeof(void *), MPI_BYTE, MPI_COMM_WORLD));
  fh_stats_t a, b;
  FHB(fh_stats_get(ctx, &a));
  int peer = (rank + 1) % n;
  uint64_t v = 42;
  double t0 = bench_now();
  FHB(fh_put(ctx, peer, all[peer], &v, sizeof v));
  double t1 = bench_now();
  FHB(fh_stats_get(ctx, &b));
  unsigned long ams = (unsigned long)(b.am_sent - a.am_sent), moves = (unsigned long)(b.moves_sent - a.moves_sent);
  unsigned long tot_ams = 0, tot_moves = 0;
  MPI_Reduce(&ams, &tot_ams, 1, MPI_UNSIGNED_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(&moves, &tot_moves, 1, MPI_UNSIGNED_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0)
    printf("first put into registered memory: %lu AMs and %lu firehose moves over %d ranks (%.1f us on rank 0)\n",
           tot_ams, tot_moves, n, (t1 - t0) * 1e6);
  MPI_Barrier(MPI_COMM_WORLD);
  FHB(fh_mem_unregister(ctx, reg, len));
  free(reg);
  free(all);
}

/* One timed batch of `which` (0 barrier, 1 allreduce, 2 ring wait) done `how`:
 * 0 through the interposed call, 1 straight to the blocking PMPI call, 2 as its
 * non-blocking PMPI form + PMPI_Wait (what the interposed call builds on). */
static double progress_batch(int which, int how, int iters) {
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  uint64_t x = (uint64_t)rank, y = 0, sbuf = 1, rbuf = 0;
  int right = (rank + 1) % n, left = (rank + n - 1) % n;
  PMPI_Barrier(MPI_COMM_WORLD);
  double t0 = bench_now();
  for (int i = 0; i < iters; i++) {
    MPI_Request r;
    if (which == 0) {
      if (how == 0) MPIB(MPI_Barrier(MPI_COMM_WORLD));
      else if (how == 1) MPIB(PMPI_Barrier(MPI_COMM_WORLD));
      else { MPIB(PMPI_Ibarrier(MPI_COMM_WORLD, &r)); MPIB(PMPI_Wait(&r, MPI_STATUS_IGNORE)); }
    } else if (which == 1) {
      if (how == 0) MPIB(MPI_Allreduce(&x, &y, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD));
      else if (how == 1) MPIB(PMPI_Allreduce(&x, &y, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD));
      else {
        MPIB(PMPI_Iallreduce(&x, &y, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD, &r));
        MPIB(PMPI_Wait(&r, MPI_STATUS_IGNORE));
      }
    } else {
      MPI_Request rq[2];
      MPIB(MPI_Irecv(&rbuf, 1, MPI_UINT64_T, left, 7, MPI_COMM_WORLD, &rq[0]));
      MPIB(MPI_Isend(&sbuf, 1, MPI_UINT64_T, right, 7, MPI_COMM_WORLD, &rq[1]));
      for (int k = 0; k < 2; k++) {
        if (how == 0) MPIB(MPI_Wait(&rq[k], MPI_STATUS_IGNORE));
        else MPIB(PMPI_Wait(&rq[k], MPI_STATUS_IGNORE));
      }
    }
  }
  return (bench_now() - t0) * 1e6 / iters;
}

static void mode_progress(fh_ctx_t *ctx, FILE *csv) {
  (void)ctx;
  const char *names[3] = {"MPI_Barrier", "MPI_Allreduce_8B", "MPI_Wait_ring_8B"};
  const char *floors[3] = {"PMPI_Ibarrier+PMPI_Wait", "PMPI_Iallreduce+PMPI_Wait", "PMPI_Wait"};
  for (int which = 0; which < 3; which++) {
    samples_t f, b, nb;
    samples_init(&f, BATCHES);
    samples_init(&b, BATCHES);
    samples_init(&nb, BATCHES);
    for (int bt = 0; bt < BATCHES; bt++)
      for (int k = 0; k < 3; k++) {
        int how = (k + bt) % 3; /* rotate which goes first */
        double us = progress_batch(which, how, 200);
        samples_add(how == 0 ? &f : how == 1 ? &b : &nb, us);
      }
    char label[64];
    report(csv, names[which], "the same call straight to MPI (PMPI_*)", 8, &f, &b);
    snprintf(label, sizeof label, "%s_vs_nb_floor", names[which]);
    samples_t f2;
    samples_init(&f2, BATCHES);
    for (int i = 0; i < f.n; i++) samples_add(&f2, f.v[i]);
    report(csv, label, floors[which], 8, &f2, &nb);
    samples_free(&f);
    samples_free(&f2);
    samples_free(&b);
    samples_free(&nb);
  }
}

int main(int argc, char **argv) {
  bench_mpi_init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &bench_rank);
  int n;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const char *mode = argc > 1 ? argv[1] : "progress";
  const char *dir = argc > 2 ? argv[2] : "bench-results";
  fh_ctx_t *ctx;
  FHB(fh_init(MPI_COMM_WORLD, NULL, &ctx));
  char name[64];
  snprintf(name, sizeof name, "bench_interop_%s", mode);
  FILE *csv = bench_rank == 0 ? bench_csv_open(dir, name) : NULL;
  if (bench_rank == 0) printf("bench_interop %s, %d ranks\n", mode, n);
  if (strcmp(mode, "cma") == 0) mode_cma(ctx, csv);
  else if (strcmp(mode, "first") == 0) mode_first(ctx, csv);
  else if (strcmp(mode, "progress") == 0) mode_progress(ctx, csv);
  else BENCH_DIE("unknown mode %s (cma, first, progress)", mode);
  if (csv) fclose(csv);
  FHB(fh_finalize(ctx));
  MPI_Finalize();
  return 0;
}
