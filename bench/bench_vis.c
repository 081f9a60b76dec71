/* bench_vis.c -- non-contiguous put and get (seed 002 VIS) against MPI derived
 * datatypes, on 2 ranks.
 *
 * The shape: 32 KiB of a contiguous buffer on rank 1 scattered into (put) or
 * gathered from (get) every other run of R bytes of a plain malloc'd buffer on
 * rank 0 (a strided section: count = {R, 32K / R}, destination stride 2R), for
 * R = 8 B .. 4 KiB. The target never registered its buffer.
 *
 * Variants, interleaved in batches in one launch (so load drift hits all alike):
 *   mpi            MPI_Put / MPI_Get of the contiguous origin into an
 *                  MPI_Type_vector target datatype on a window created over the
 *                  target buffer (MPI_Win_create, lock_all), + MPI_Win_flush: the
 *                  baseline of every row;
 *   node_direct    fh_puts / fh_gets on a context with the defaults (rank 0 is a
 *                  node peer: one vectored kernel copy for the section);
 *   offnode_direct the same on a context with FH_SHM=0 FH_CMA=0 (the off-node path:
 *                  one RMA per run through firehose) and FH_VIS_ALGORITHM=direct;
 *   offnode_pack   the same with FH_VIS_ALGORITHM=pack (the runs in AM mediums,
 *                  unpacked by rank 0's handler);
 *   offnode_registered_direct / _datatype  off-node, into a second buffer rank 0
 *                  registered (fh_mem_register): one MPI_Put per run, or
 *                  FH_VIS_ALGORITHM=datatype (one MPI_Put with hindexed types).
 * Rank 0 waits in MPI_Barrier meanwhile (which serves the library's handlers, as
 * in an ordinary MPI program). Each sample is one blocking call; medians.
 *
 * Usage: bench_vis <outdir>   (writes <outdir>/bench_vis.csv) */
#include "bench.h"

#define TOTAL (32 * 1024)
#define BATCH 8
enum { V_MPI, V_NODE, V_OFF_DIRECT, V_OFF_PACK, V_REG_DIRECT, V_REG_TYPED, NV };
static const char *vname[NV] = {"mpi", "node_direct", "offnode_direct", "offnode_pack",
                                "offnode_registered_direct", "offnode_registered_datatype"};

static fh_ctx_t *ctx[NV];
static MPI_Win win;
static unsigned char *src, *target, *rtarget;
static uintptr_t remote, rremote; /* rank 0's target buffers: plain, registered */

static fh_ctx_t *init_ctx(const char *shm, const char *algo) {
  setenv("FH_SHM", shm, 1);
  setenv("FH_CMA", shm, 1);
  setenv("FH_VIS_ALGORITHM", algo, 1);
  fh_ctx_t *c;
  FHB(fh_init(MPI_COMM_WORLD, NULL, &c));
  return c;
}

static void op(int v, int is_put, size_t run) {
  size_t n = TOTAL / run;
  size_t count[2] = {run, n}, dstr[1] = {2 * run}, sstr[1] = {run};
  if (v == V_MPI) {
    MPI_Datatype t;
    MPIB(MPI_Type_vector((int)n, (int)run, (int)(2 * run), MPI_BYTE, &t));
    MPIB(MPI_Type_commit(&t));
    if (is_put) MPIB(MPI_Put(src, TOTAL, MPI_BYTE, 0, 0, 1, t, win));
    else MPIB(MPI_Get(src, TOTAL, MPI_BYTE, 0, 0, 1, t, win));
    MPIB(MPI_Win_flush(0, win));
    MPIB(MPI_Type_free(&t));
  } else {
    void *r = (void *)(v >= V_REG_DIRECT ? rremote : remote);
    if (is_put) FHB(fh_puts(ctx[v], 0, r, dstr, src, sstr, count, 1));
    else FHB(fh_gets(ctx[v], src, sstr, 0, r, dstr, count, 1));
  }
}

static void row(FILE *csv, const char *bench, size_t run, samples_t *f, samples_t *b) {
  bench_row_t r = {bench, "MPI_Put/MPI_Get of an MPI_Type_vector + MPI_Win_flush (created window)", run,
                   0, 0, samples_mean(f) * 1e6, samples_mean(b) * 1e6, f->n};
  r.fh_us = samples_median(f) * 1e6;
  r.base_us = samples_median(b) * 1e6;
  bench_csv_row(csv, &r);
}

int main(int argc, char **argv) {
  bench_mpi_init(&argc, &argv);
  int np;
  MPI_Comm_rank(MPI_COMM_WORLD, &bench_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  if (np != 2) BENCH_DIE("bench_vis runs on 2 ranks");
  const char *outdir = argc > 1 ? argv[1] : "bench-results";
  ctx[V_NODE] = init_ctx("1", "direct");
  ctx[V_OFF_DIRECT] = init_ctx("0", "direct");
  ctx[V_OFF_PACK] = init_ctx("0", "pack");
  ctx[V_REG_DIRECT] = init_ctx("0", "direct");
  ctx[V_REG_TYPED] = init_ctx("0", "datatype");
  target = malloc(2 * TOTAL);
  rtarget = malloc(2 * TOTAL);
  src = malloc(TOTAL);
  if (!target || !rtarget || !src) BENCH_DIE("out of memory");
  FHB(fh_mem_register(ctx[V_REG_DIRECT], rtarget, 2 * TOTAL));
  FHB(fh_mem_register(ctx[V_REG_TYPED], rtarget, 2 * TOTAL));
  rremote = (uintptr_t)rtarget;
  MPIB(MPI_Bcast(&rremote, sizeof rremote, MPI_BYTE, 0, MPI_COMM_WORLD));
  bench_fill(src, TOTAL, 7);
  memset(target, 0, 2 * TOTAL);
  MPIB(MPI_Win_create(target, 2 * TOTAL, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win));
  MPIB(MPI_Win_lock_all(0, win));
  remote = (uintptr_t)target;
  MPIB(MPI_Bcast(&remote, sizeof remote, MPI_BYTE, 0, MPI_COMM_WORLD));

  FILE *csv = bench_rank == 1 ? bench_csv_open(outdir, "bench_vis") : NULL;
  samples_t s[NV];
  for (int v = 0; v < NV; v++) samples_init(&s[v], 4096);
  static const size_t runs[] = {8, 64, 256, 1024, 2048, 4096};
  if (bench_rank == 1) {
    printf("bench_vis: %d KiB scattered into / gathered from every other run of R bytes of rank 0's "
           "plain memory; us per call (median), ratio = firehose / MPI datatype\n", TOTAL / 1024);
    printf("%-6s %-4s %9s %9s %9s %9s %9s %9s %8s %8s %8s %8s %8s\n", "R", "op", "mpi", "node_dir", "off_dir",
           "off_pack", "reg_dir", "reg_type", "node", "offd", "offp", "regd", "regt");
  }
  for (int is_put = 1; is_put >= 0; is_put--)
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
      size_t run = runs[k];
      int iters = run <= 8 ? 24 : run <= 64 ? 48 : 96;
      if (bench_rank == 1) {
        bench_progress("%s R=%zu", is_put ? "put" : "get", run);
        for (int v = 0; v < NV; v++) samples_reset(&s[v]);
        for (int v = 0; v < NV; v++) op(v, is_put, run); /* warm-up: pins, moves */
        for (int done = 0, round = 0; done < iters; done += BATCH, round++)
          for (int j = 0; j < NV; j++) {
            int v = (j + round) % NV;
            for (int b = 0; b < BATCH; b++) {
              double t0 = bench_now();
              op(v, is_put, run);
              samples_add(&s[v], bench_now() - t0);
            }
          }
        char name[64];
        for (int v = 1; v < NV; v++) {
          snprintf(name, sizeof name, "vis_%s_%s", is_put ? "put" : "get", vname[v]);
          row(csv, name, run, &s[v], &s[V_MPI]);
        }
        double m = samples_median(&s[V_MPI]);
        printf("%-6zu %-4s %9.1f", run, is_put ? "put" : "get", m * 1e6);
        for (int v = 1; v < NV; v++) printf(" %9.1f", samples_median(&s[v]) * 1e6);
        for (int v = 1; v < NV; v++) printf(" %8.2f", samples_median(&s[v]) / m);
        printf("\n");
        fflush(stdout);
      }
      MPI_Barrier(MPI_COMM_WORLD); /* rank 0 serves the library in here */
    }
  /* Every byte arrived: the last put of each variant wrote src into the runs. */
  MPIB(MPI_Win_unlock_all(win));
  MPIB(MPI_Win_free(&win));
  FHB(fh_mem_unregister(ctx[V_REG_DIRECT], rtarget, 2 * TOTAL));
  FHB(fh_mem_unregister(ctx[V_REG_TYPED], rtarget, 2 * TOTAL));
  for (int v = 1; v < NV; v++) FHB(fh_finalize(ctx[v]));
  if (csv) fclose(csv);
  if (bench_rank == 1) printf("bench_vis: done (CSV in %s/bench_vis.csv)\n", outdir);
  for (int v = 0; v < NV; v++) samples_free(&s[v]);
  free(src);
  free(target);
  free(rtarget);
  MPI_Finalize();
  return 0;
}
