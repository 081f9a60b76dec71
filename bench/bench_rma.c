/* bench_rma.c -- latency and bandwidth of firehose put/get against raw MPI RMA.
 * Run on exactly 2 ranks: rank 0 issues every operation to rank 1.
 *
 * Baseline: MPI_Put / MPI_Get + MPI_Win_flush on an MPI_Win_create_dynamic window
 * this program creates itself, with a buffer MPI_Win_attach'ed on rank 1, inside
 * MPI_Win_lock_all -- the same kind of window firehose uses internally for
 * fh_mem_register'ed memory. Firehose targets (a) fh_mem_register'ed user memory
 * and (b) fh_malloc heap memory (an MPI_Win_create window inside the library; a
 * second baseline on an MPI_Win_create window of our own is reported for it too),
 * and (c) fh_malloc memory beyond the first heap region (a segment the heap grew by;
 * "seg/heap" compares it with (b): on one node both are plain copies).
 *
 * Each firehose target kind lives in its own context, so the registered case never
 * flushes the heap window and vice versa (the MPI conduit flushes every window
 * ever used towards a rank). A last test shows what happens once both are used.
 *
 * Blocking latency: for each size, batches of BATCH operations of each variant are
 * interleaved (rotating which goes first); up to 32 KiB a batch is timed as a whole
 * (one sample = batch time / BATCH), above that every operation is timed on its
 * own; the median is reported. An extra 8-byte pass times single operations. Non-blocking bandwidth: a window of W fh_put_nbi +
 * fh_wait_nbi vs W MPI_Put + MPI_Win_flush_all, median time per window.
 *
 * Usage: bench_rma <outdir>   (writes <outdir>/bench_rma.csv) */
#include "bench.h"

#define MAXSZ ((size_t)4 << 20)
#define BATCH 16

enum { V_REG, V_HEAP, V_RAW_DYN, V_RAW_CREATED, V_SEG, NV };

static fh_ctx_t *ctx_reg, *ctx_heap;
static MPI_Win win_dyn, win_created;
/* Rank 1's addresses. */
static void *reg_remote, *heap_remote, *seg_remote;
static MPI_Aint dyn_disp;
static unsigned char *src, *dst;

/* One blocking operation of variant v. */
static inline void op(int v, int is_put, size_t off, size_t n) {
  switch (v) {
  case V_REG:
    if (is_put) FHB(fh_put(ctx_reg, 1, (char *)reg_remote + off, src, n));
    else FHB(fh_get(ctx_reg, dst, 1, (char *)reg_remote + off, n));
    break;
  case V_HEAP:
    if (is_put) FHB(fh_put(ctx_heap, 1, (char *)heap_remote + off, src, n));
    else FHB(fh_get(ctx_heap, dst, 1, (char *)heap_remote + off, n));
    break;
  case V_SEG:
    if (is_put) FHB(fh_put(ctx_heap, 1, (char *)seg_remote + off, src, n));
    else FHB(fh_get(ctx_heap, dst, 1, (char *)seg_remote + off, n));
    break;
  case V_RAW_DYN:
    if (is_put) MPIB(MPI_Put(src, (int)n, MPI_BYTE, 1, dyn_disp + (MPI_Aint)off, (int)n, MPI_BYTE, win_dyn));
    else MPIB(MPI_Get(dst, (int)n, MPI_BYTE, 1, dyn_disp + (MPI_Aint)off, (int)n, MPI_BYTE, win_dyn));
    MPIB(MPI_Win_flush(1, win_dyn));
    break;
  case V_RAW_CREATED:
    if (is_put) MPIB(MPI_Put(src, (int)n, MPI_BYTE, 1, (MPI_Aint)off, (int)n, MPI_BYTE, win_created));
    else MPIB(MPI_Get(dst, (int)n, MPI_BYTE, 1, (MPI_Aint)off, (int)n, MPI_BYTE, win_created));
    MPIB(MPI_Win_flush(1, win_created));
    break;
  }
}

/* Blocking latency of one size: fills s[NV] with per-operation times. Batches of
 * BATCH operations of each variant alternate (rotating which goes first). With
 * per_sample = 1 every operation is timed on its own; with per_sample = BATCH a
 * batch is timed as a whole and yields one sample (time / BATCH), which also
 * charges firehose's periodic AM polling (every 32nd call) to the operations. */
static void measure_blocking(int is_put, size_t n, int iters, samples_t *s, const int *which, int nwhich,
                             int per_sample) {
  for (int v = 0; v < NV; v++) samples_reset(&s[v]);
  for (int i = 0; i < 4 * nwhich; i++) /* warm-up */
    op(which[i % nwhich], is_put, 0, n);
  for (int done = 0, round = 0; done < iters; done += BATCH, round++) {
    for (int k = 0; k < nwhich; k++) {
      int v = which[(k + round) % nwhich];
      for (int j = 0; j < BATCH; j += per_sample) {
        double t0 = bench_now();
        for (int q = 0; q < per_sample; q++) op(v, is_put, 0, n);
        samples_add(&s[v], (bench_now() - t0) / per_sample);
      }
    }
  }
}

static void row(FILE *csv, const char *bench, const char *base, size_t n, samples_t *f, samples_t *b) {
  bench_row_t r = {bench, base, n, 0, 0, samples_mean(f) * 1e6, samples_mean(b) * 1e6, f->n};
  r.fh_us = samples_median(f) * 1e6;
  r.base_us = samples_median(b) * 1e6;
  bench_csv_row(csv, &r);
}

/* Non-blocking window of W puts. */
static double nbi_window(int v, size_t n, int W) {
  double t0 = bench_now();
  for (int i = 0; i < W; i++) {
    size_t off = ((size_t)i * n) % MAXSZ;
    if (off + n > MAXSZ) off = 0;
    switch (v) {
    case V_REG: FHB(fh_put_nbi(ctx_reg, 1, (char *)reg_remote + off, src + off, n)); break;
    case V_HEAP: FHB(fh_put_nbi(ctx_heap, 1, (char *)heap_remote + off, src + off, n)); break;
    default:
      MPIB(MPI_Put(src + off, (int)n, MPI_BYTE, 1, dyn_disp + (MPI_Aint)off, (int)n, MPI_BYTE, win_dyn));
    }
  }
  switch (v) {
  case V_REG: FHB(fh_wait_nbi(ctx_reg, FH_NBI_PUTS)); break;
  case V_HEAP: FHB(fh_wait_nbi(ctx_heap, FH_NBI_PUTS)); break;
  default: MPIB(MPI_Win_flush_all(win_dyn));
  }
  return bench_now() - t0;
}

int main(int argc, char **argv) {
  int level = bench_mpi_init(&argc, &argv);
  int nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &bench_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  const char *outdir = argc > 1 ? argv[1] : ".";
  if (nranks != 2) {
    if (bench_rank == 0) fprintf(stderr, "bench_rma: run on exactly 2 ranks (got %d)\n", nranks);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  FHB(fh_init(MPI_COMM_WORLD, NULL, &ctx_reg));
  FHB(fh_init(MPI_COMM_WORLD, NULL, &ctx_heap));

  /* Target memory on every rank (only rank 1's is used). */
  unsigned char *reg_buf = aligned_alloc(4096, MAXSZ), *raw_buf = aligned_alloc(4096, MAXSZ);
  unsigned char *heap_buf = fh_malloc(ctx_heap, MAXSZ);
  /* More than the whole first region: a heap segment made on demand. */
  fh_config_t cfg;
  fh_config_init(&cfg); /* the defaults and the environment, as fh_init read them */
  size_t first = cfg.heap_size;
  unsigned char *seg_block = fh_malloc(ctx_heap, first + MAXSZ);
  unsigned char *seg_buf = seg_block ? seg_block + first : NULL;
  if (!reg_buf || !raw_buf || !heap_buf || !seg_buf) BENCH_DIE("allocation failed");
  memset(seg_buf, 0, MAXSZ);
  memset(reg_buf, 0, MAXSZ);
  memset(raw_buf, 0, MAXSZ);
  memset(heap_buf, 0, MAXSZ);
  FHB(fh_mem_register(ctx_reg, reg_buf, MAXSZ));
  src = aligned_alloc(4096, MAXSZ);
  dst = aligned_alloc(4096, MAXSZ);
  if (!src || !dst) BENCH_DIE("allocation failed");
  bench_fill(src, MAXSZ, 7);
  memset(dst, 0, MAXSZ);

  MPIB(MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win_dyn));
  MPIB(MPI_Win_attach(win_dyn, raw_buf, MAXSZ));
  MPIB(MPI_Win_create(raw_buf, MAXSZ, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win_created));
  MPI_Aint my_disp;
  MPIB(MPI_Get_address(raw_buf, &my_disp));
  uint64_t mine[4] = {(uint64_t)(uintptr_t)reg_buf, (uint64_t)(uintptr_t)heap_buf, (uint64_t)my_disp,
                      (uint64_t)(uintptr_t)seg_buf},
           all[8];
  MPIB(MPI_Allgather(mine, 4, MPI_UINT64_T, all, 4, MPI_UINT64_T, MPI_COMM_WORLD));
  reg_remote = (void *)(uintptr_t)all[4];
  heap_remote = (void *)(uintptr_t)all[5];
  dyn_disp = (MPI_Aint)all[6];
  seg_remote = (void *)(uintptr_t)all[7];
  MPIB(MPI_Win_lock_all(MPI_MODE_NOCHECK, win_dyn));
  MPIB(MPI_Win_lock_all(MPI_MODE_NOCHECK, win_created));

  FILE *csv = NULL;
  samples_t s[NV];
  for (int v = 0; v < NV; v++) samples_init(&s[v], 4096);
  char sz[32];

  if (bench_rank == 0) {
    csv = bench_csv_open(outdir, "bench_rma");
    /* First access to registered memory asks rank 1 once (it is polling in its
     * barrier below); check both targets really receive the data. */
    FHB(fh_put(ctx_reg, 1, reg_remote, src, 4096));
    FHB(fh_get(ctx_reg, dst, 1, reg_remote, 4096));
    if (memcmp(src, dst, 4096) != 0) BENCH_DIE("registered put/get returned wrong data");
    FHB(fh_put(ctx_heap, 1, heap_remote, src + 1, 4096));
    FHB(fh_get(ctx_heap, dst, 1, heap_remote, 4096));
    if (memcmp(src + 1, dst, 4096) != 0) BENCH_DIE("heap put/get returned wrong data");
    FHB(fh_put(ctx_heap, 1, seg_remote, src + 2, 4096));
    FHB(fh_get(ctx_heap, dst, 1, seg_remote, 4096));
    if (memcmp(src + 2, dst, 4096) != 0) BENCH_DIE("heap segment put/get returned wrong data");

    printf("== bench_rma: MPI thread level %s\n", bench_thread_name(level));
    printf("== bench_rma: blocking put/get latency, rank 0 -> rank 1; ratio = fh / MPI. Per-op time: median over\n"
           "   batches of %d back-to-back ops (<= 32 KiB) or over single ops (larger)\n", BATCH);
    printf("   baseline: MPI_Put|MPI_Get + MPI_Win_flush on an MPI_Win_create_dynamic window (attached buffer,\n"
           "   lock_all); 'created' = same on an MPI_Win_create window (the kind fh_malloc memory uses)\n");
    printf("%-4s %8s %9s %9s %9s %9s %7s %7s %7s %9s %8s %9s %9s\n", "op", "size", "fh reg", "fh heap", "MPI dyn", "MPI crt",
           "reg/dyn", "heap/dyn", "heap/crt", "fh seg", "seg/heap", "fh MB/s", "MPI MB/s");
    const int all4[4] = {V_REG, V_HEAP, V_RAW_DYN, V_RAW_CREATED};
    const int all5[5] = {V_REG, V_HEAP, V_SEG, V_RAW_DYN, V_RAW_CREATED};
    for (int is_put = 1; is_put >= 0; is_put--) {
      for (size_t n = 8; n <= MAXSZ; n *= 4) {
        size_t nn = n > MAXSZ ? MAXSZ : n;
        int iters = bench_iters(nn, 32000, 96);
        bench_progress("%s %s: %d iterations per variant", is_put ? "put" : "get", bench_size_str(nn, sz, sizeof sz), iters);
        measure_blocking(is_put, nn, iters, s, all5, 5, nn <= 32768 ? BATCH : 1);
        const char *op_name = is_put ? "put" : "get";
        char b1[64], b2[64], b3[64];
        snprintf(b1, sizeof b1, "%s_registered", op_name);
        snprintf(b2, sizeof b2, "%s_heap", op_name);
        snprintf(b3, sizeof b3, "%s_heap_vs_created_win", op_name);
        char b4[64];
        snprintf(b4, sizeof b4, "%s_heap_segment", op_name);
        const char *base_dyn = is_put ? "MPI_Put+MPI_Win_flush (dynamic window)" : "MPI_Get+MPI_Win_flush (dynamic window)";
        const char *base_crt = is_put ? "MPI_Put+MPI_Win_flush (MPI_Win_create window)"
                                      : "MPI_Get+MPI_Win_flush (MPI_Win_create window)";
        double mreg = samples_median(&s[V_REG]) * 1e6, mheap = samples_median(&s[V_HEAP]) * 1e6;
        double mdyn = samples_median(&s[V_RAW_DYN]) * 1e6, mcrt = samples_median(&s[V_RAW_CREATED]) * 1e6;
        row(csv, b1, base_dyn, nn, &s[V_REG], &s[V_RAW_DYN]);
        row(csv, b2, base_dyn, nn, &s[V_HEAP], &s[V_RAW_DYN]);
        row(csv, b3, base_crt, nn, &s[V_HEAP], &s[V_RAW_CREATED]);
        row(csv, b4, is_put ? "fh_put into the first heap region" : "fh_get from the first heap region", nn, &s[V_SEG],
            &s[V_HEAP]);
        double mseg = samples_median(&s[V_SEG]) * 1e6;
        printf("%-4s %8s %8.2fu %8.2fu %8.2fu %8.2fu %7.2f %7.2f %7.2f %8.2fu %8.2f", op_name,
               bench_size_str(nn, sz, sizeof sz), mreg, mheap, mdyn, mcrt, mreg / mdyn, mheap / mdyn, mheap / mcrt, mseg,
               mseg / mheap);
        if (nn >= 65536) printf(" %9.0f %9.0f", bench_mbps(nn, mreg), bench_mbps(nn, mdyn));
        printf("\n");
        fflush(stdout);
        if (n == MAXSZ) break;
        if (n * 4 > MAXSZ) n = MAXSZ / 4; /* end exactly at MAXSZ */
      }
    }
    /* The data of the last round trip is right. */
    FHB(fh_put(ctx_reg, 1, reg_remote, src, 1 << 16));
    memset(dst, 0, 1 << 16);
    FHB(fh_get(ctx_reg, dst, 1, reg_remote, 1 << 16));
    if (memcmp(src, dst, 1 << 16) != 0) BENCH_DIE("registered put/get returned wrong data");

    /* 8 bytes again, every operation timed on its own: the median then excludes
     * the AM poll firehose runs every 32nd call; the mean includes it. */
    printf("\n== bench_rma: 8-byte ops timed one by one (median excludes firehose's every-32nd-call AM poll)\n");
    for (int is_put = 1; is_put >= 0; is_put--) {
      measure_blocking(is_put, 8, 32000, s, all4, 4, 1);
      const char *names[2][2] = {{"get_registered_single_op", "get_heap_single_op"},
                                 {"put_registered_single_op", "put_heap_single_op"}};
      const char *base_dyn = is_put ? "MPI_Put+MPI_Win_flush (dynamic window)" : "MPI_Get+MPI_Win_flush (dynamic window)";
      double mreg = samples_median(&s[V_REG]) * 1e6, mheap = samples_median(&s[V_HEAP]) * 1e6;
      double mdyn = samples_median(&s[V_RAW_DYN]) * 1e6;
      printf("   %s: median fh reg %.2f us, fh heap %.2f us, MPI dyn %.2f us -> ratios %.2f / %.2f;"
             " means %.2f / %.2f / %.2f us\n", is_put ? "put" : "get", mreg, mheap, mdyn, mreg / mdyn, mheap / mdyn,
             samples_mean(&s[V_REG]) * 1e6, samples_mean(&s[V_HEAP]) * 1e6, samples_mean(&s[V_RAW_DYN]) * 1e6);
      row(csv, names[is_put][0], base_dyn, 8, &s[V_REG], &s[V_RAW_DYN]);
      row(csv, names[is_put][1], base_dyn, 8, &s[V_HEAP], &s[V_RAW_DYN]);
    }

    /* ---------------------------------------------- non-blocking bandwidth */
    const int W = 64;
    printf("\n== bench_rma: non-blocking put windows: %d x fh_put_nbi + fh_wait_nbi(PUTS) vs %d x MPI_Put + "
           "MPI_Win_flush_all\n", W, W);
    printf("%8s %10s %10s %10s %7s %7s %10s %10s %10s\n", "size", "fh reg/win", "fh heap/win", "MPI/win", "reg/MPI",
           "heap/MPI", "fh reg MB/s", "fh heap MB/s", "MPI MB/s");
    size_t nb_sizes[] = {8, 1024, 8192, 65536, 524288};
    for (size_t k = 0; k < sizeof nb_sizes / sizeof *nb_sizes; k++) {
      size_t n = nb_sizes[k];
      int reps = bench_iters(n * (size_t)W, 400, 24);
      bench_progress("nbi windows of %d x %s: %d repetitions", W, bench_size_str(n, sz, sizeof sz), reps);
      for (int v = 0; v < NV; v++) samples_reset(&s[v]);
      for (int v = 0; v < 3; v++) nbi_window(v, n, W); /* warm-up */
      for (int r = 0; r < reps; r++)
        for (int k2 = 0; k2 < 3; k2++) {
          int v = (k2 + r) % 3; /* V_REG, V_HEAP, V_RAW_DYN */
          samples_add(&s[v], nbi_window(v, n, W));
        }
      bench_row_t r1 = {"put_nbi_window_registered", "MPI_Put x W + MPI_Win_flush_all (dynamic window)", n, 0, 0,
                        samples_mean(&s[V_REG]) * 1e6 / W, samples_mean(&s[V_RAW_DYN]) * 1e6 / W, s[V_REG].n};
      bench_row_t r2 = r1;
      r2.benchmark = "put_nbi_window_heap";
      r2.fh_mean_us = samples_mean(&s[V_HEAP]) * 1e6 / W;
      double treg = samples_median(&s[V_REG]) * 1e6, theap = samples_median(&s[V_HEAP]) * 1e6;
      double traw = samples_median(&s[V_RAW_DYN]) * 1e6;
      /* CSV: per-operation times (window time / W) so MB/s and ops/s come out right. */
      r1.fh_us = treg / W; r1.base_us = traw / W;
      r2.fh_us = theap / W; r2.base_us = traw / W;
      bench_csv_row(csv, &r1);
      bench_csv_row(csv, &r2);
      printf("%8s %9.1fu %10.1fu %9.1fu %7.2f %7.2f %11.0f %12.0f %10.0f\n", bench_size_str(n, sz, sizeof sz), treg,
             theap, traw, treg / traw, theap / traw, bench_mbps(n * (size_t)W, treg), bench_mbps(n * (size_t)W, theap),
             bench_mbps(n * (size_t)W, traw));
      fflush(stdout);
    }

    /* ------------------- both windows used towards one rank (one context) */
    /* ctx_reg has only ever used the dynamic window towards rank 1. One put to
     * its heap makes every later flush towards rank 1 cover both windows. */
    printf("\n== bench_rma: 8-byte blocking put to registered memory before/after the same context also put to heap\n");
    const int two[2] = {V_REG, V_RAW_DYN};
    measure_blocking(1, 8, 32000, s, two, 2, BATCH);
    double before = samples_median(&s[V_REG]) * 1e6, before_raw = samples_median(&s[V_RAW_DYN]) * 1e6;
    MPIB(MPI_Send(NULL, 0, MPI_BYTE, 1, 99, MPI_COMM_WORLD)); /* ask rank 1 for ctx_reg heap memory */
    uint64_t h;
    MPIB(MPI_Recv(&h, 1, MPI_UINT64_T, 1, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    FHB(fh_put(ctx_reg, 1, (void *)(uintptr_t)h, src, 8));
    measure_blocking(1, 8, 32000, s, two, 2, BATCH);
    double after = samples_median(&s[V_REG]) * 1e6, after_raw = samples_median(&s[V_RAW_DYN]) * 1e6;
    row(csv, "put_registered_after_heap_used", "MPI_Put+MPI_Win_flush (dynamic window)", 8, &s[V_REG], &s[V_RAW_DYN]);
    printf("   before: fh %.2f us, MPI %.2f us, ratio %.2f;  after: fh %.2f us, MPI %.2f us, ratio %.2f\n", before,
           before_raw, before / before_raw, after, after_raw, after / after_raw);
    fclose(csv);
    MPIB(MPI_Send(NULL, 0, MPI_BYTE, 1, 98, MPI_COMM_WORLD)); /* done */
  } else {
    /* Rank 1: the target. Serve firehose AMs (the first access check of the
     * registered buffer) and answer rank 0's one question, until told to stop. */
    unsigned char *h = fh_malloc(ctx_reg, 64);
    if (!h) BENCH_DIE("fh_malloc");
    for (;;) {
      int flag = 0;
      MPI_Status st;
      FHB(fh_poll(ctx_reg));
      FHB(fh_poll(ctx_heap));
      MPIB(MPI_Iprobe(0, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
      if (!flag) continue;
      MPIB(MPI_Recv(NULL, 0, MPI_BYTE, 0, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
      if (st.MPI_TAG == 98) break;
      uint64_t a = (uint64_t)(uintptr_t)h;
      MPIB(MPI_Send(&a, 1, MPI_UINT64_T, 0, 99, MPI_COMM_WORLD));
    }
  }
  MPIB(MPI_Win_unlock_all(win_dyn));
  MPIB(MPI_Win_unlock_all(win_created));
  MPIB(MPI_Win_detach(win_dyn, raw_buf));
  MPIB(MPI_Win_free(&win_dyn));
  MPIB(MPI_Win_free(&win_created));
  bench_poll_barrier(ctx_reg);
  FHB(fh_mem_unregister(ctx_reg, reg_buf, MAXSZ));
  FHB(fh_finalize(ctx_reg));
  FHB(fh_finalize(ctx_heap));
  for (int v = 0; v < NV; v++) samples_free(&s[v]);
  free(reg_buf); free(raw_buf); free(src); free(dst);
  if (bench_rank == 0) printf("bench_rma: done (CSV in %s/bench_rma.csv)\n", outdir);
  MPI_Finalize();
  return 0;
}
