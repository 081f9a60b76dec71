/* interop_compute.c -- a rank that computes without calling MPI or firehose while
 * the others access its memory; synchronised only with MPI (no fh_barrier).
 *
 * Rank 0 owns three buffers: library heap (fh_malloc), a malloc buffer registered
 * with fh_mem_register, and a plain malloc buffer. Each has a read-only area (a
 * pattern of rank 0) and one slot per rank. After an MPI_Barrier rank 0 busy-loops
 * for about a second (no MPI, no fh calls) while every other rank fh_put's its
 * pattern into its slot of each buffer and fh_get's the read-only area (checked at
 * once), timing each kind; the times are printed, never asserted (heap access is
 * one-sided; registered and plain memory need rank 0 to answer once, so they may
 * wait for the end of its computation). Then MPI_Barrier and rank 0 checks every
 * slot, and a second round with rank 0 computing again checks that later accesses
 * (now hits) work too.
 */
#include <mpi.h>
#include "firehose.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int g_rank = -1;

#define CHECK(cond, ...)                                                              \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      char eb_[512];                                                                  \
      fh_last_error(eb_, sizeof eb_);                                                 \
      fprintf(stderr, "[rank %d] %s:%d: CHECK(%s) failed: ", g_rank, __FILE__,       \
              __LINE__, #cond);                                                       \
      fprintf(stderr, __VA_ARGS__);                                                   \
      fprintf(stderr, "\n[rank %d]   fh_last_error: %s\n", g_rank, eb_);            \
      fflush(stderr);                                                                 \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                   \
    }                                                                                 \
  } while (0)
#define CHECK_RC(call)                                                                \
  do {                                                                                \
    int rc_ = (call);                                                                 \
    CHECK(rc_ == FH_OK, "%s returned %d (%s)", #call, rc_, fh_strerror(rc_));        \
  } while (0)

#define W 512 /* words per slot and in the read-only area */
#define ROUNDS 2
enum { K_HEAP, K_REG, K_PLAIN, NKINDS };
static const char *kind_name[NKINDS] = {"heap", "registered", "plain"};

static uint64_t pat(int who, int round, int kind, int i) {
  uint64_t x = ((uint64_t)(who + 1) << 40) ^ ((uint64_t)(round + 1) << 32) ^
               ((uint64_t)(kind + 1) << 28) ^ (uint64_t)i;
  x *= 0xD6E8FEB86659FD93ull;
  return x ^ (x >> 31);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* About `secs` of pure computation: no MPI, no firehose. */
static volatile uint64_t sink;
static void compute(double secs) {
  double t0 = now();
  uint64_t x = 1;
  while (now() - t0 < secs)
    for (int i = 0; i < 10000; i++) x = x * 6364136223846793005ull + 1442695040888963407ull;
  sink = x;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int me, np;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  g_rank = me;
  CHECK(np >= 2, "needs at least 2 ranks, got %d", np);
  fh_ctx_t *ctx;
  CHECK_RC(fh_init(MPI_COMM_WORLD, NULL, &ctx));

  /* Layout of each buffer: [read-only area][slot 0][slot 1]...[slot np-1]. */
  size_t words = (size_t)W * (1 + (size_t)np), bytes = words * sizeof(uint64_t);
  uint64_t *buf[NKINDS] = {NULL, NULL, NULL};
  uint64_t addr[NKINDS] = {0, 0, 0};
  if (me == 0) {
    buf[K_HEAP] = fh_malloc(ctx, bytes);
    CHECK(buf[K_HEAP] != NULL, "fh_malloc(%zu)", bytes);
    buf[K_REG] = malloc(bytes);
    buf[K_PLAIN] = malloc(bytes);
    CHECK(buf[K_REG] && buf[K_PLAIN], "malloc");
    CHECK_RC(fh_mem_register(ctx, buf[K_REG], bytes));
    for (int k = 0; k < NKINDS; k++) {
      memset(buf[k], 0, bytes);
      for (int i = 0; i < W; i++) buf[k][i] = pat(0, 0, k, i);
      addr[k] = (uint64_t)(uintptr_t)buf[k];
    }
  }
  MPI_Bcast(addr, NKINDS, MPI_UINT64_T, 0, MPI_COMM_WORLD);

  uint64_t src[W], got[W];
  for (int round = 0; round < ROUNDS; round++) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (me == 0) {
      double t0 = now();
      compute(1.0);
      printf("interop_compute: round %d: rank 0 computed %.3f s\n", round, now() - t0);
      fflush(stdout);
    } else {
      double t[NKINDS];
      for (int k = 0; k < NKINDS; k++) {
        uint64_t *base = (uint64_t *)(uintptr_t)addr[k];
        for (int i = 0; i < W; i++) src[i] = pat(me, round, k, i);
        memset(got, 0, sizeof got);
        double t0 = MPI_Wtime();
        CHECK_RC(fh_put(ctx, 0, base + (size_t)W * (1 + (size_t)me), src, sizeof src));
        CHECK_RC(fh_get(ctx, got, 0, base, sizeof got));
        t[k] = MPI_Wtime() - t0;
        for (int i = 0; i < W; i++)
          CHECK(got[i] == pat(0, round, k, i),
                "round %d: fh_get of rank 0's %s memory: word %d is %#llx, want %#llx",
                round, kind_name[k], i, (unsigned long long)got[i],
                (unsigned long long)pat(0, round, k, i));
      }
      printf("interop_compute: round %d: rank %d put+get while rank 0 computes: heap %.4f s, "
             "registered %.4f s, plain %.4f s\n",
             round, me, t[K_HEAP], t[K_REG], t[K_PLAIN]);
      fflush(stdout);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (me == 0) {
      for (int k = 0; k < NKINDS; k++) {
        for (int r = 1; r < np; r++)
          for (int i = 0; i < W; i++) {
            uint64_t v = buf[k][(size_t)W * (1 + (size_t)r) + (size_t)i];
            CHECK(v == pat(r, round, k, i),
                  "round %d: %s slot of rank %d, word %d is %#llx, want %#llx", round,
                  kind_name[k], r, i, (unsigned long long)v,
                  (unsigned long long)pat(r, round, k, i));
          }
        /* Next round's read-only data: the others read it only after the barrier
         * at the top of the loop. */
        for (int i = 0; i < W; i++) buf[k][i] = pat(0, round + 1, k, i);
      }
    }
  }

  if (me == 0) CHECK_RC(fh_mem_unregister(ctx, buf[K_REG], bytes));
  if (me == 0) fh_free(ctx, buf[K_HEAP]);
  CHECK_RC(fh_finalize(ctx));
  free(buf[K_REG]);
  free(buf[K_PLAIN]);
  if (me == 0) printf("interop_compute: OK (np=%d)\n", np);
  MPI_Finalize();
  return 0;
}
