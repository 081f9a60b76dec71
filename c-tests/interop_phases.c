/* interop_phases.c -- a plain MPI program using firehose for RMA, synchronised only
 * with MPI (no fh_barrier anywhere).
 *
 * Five kinds of target memory on every rank: the library heap (fh_malloc), a malloc
 * buffer registered with fh_mem_register, a plain (unregistered) malloc buffer, an
 * array on main's stack and a static array. Addresses go round with MPI_Allgather.
 *
 * Phase "classic": rank 0 sleeps, then makes the first fh_put into rank 1's
 * registered memory while rank 1 (and everyone else) already waits in MPI_Barrier.
 *
 * Ring phases 0..NPHASES-1: each rank fh_put's a pattern into IN[p%2] of its right
 * neighbour's buffer of every kind and fh_get's OUT[p%2] of its left neighbour's
 * (checking it at once); MPI_Barrier; the target checks what landed in its IN[p%2].
 * OUT[(p+1)%2] is rewritten before the barrier (nobody reads it in phase p), so
 * gets never race with the owner. Sizes alternate between 8 KiB and 37 words (small
 * enough to ride inside a firehose move). Skew: in odd phases odd ranks sleep up to
 * 50 ms *before* their accesses (their targets are already in MPI_Barrier); in
 * phases 2 and 6 they sleep *after* them, just before the barrier.
 */
#include <mpi.h>
#include "firehose.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

#define W 1024      /* words per IN or OUT area */
#define SMALL_W 37  /* words moved in odd phases */
#define AREA (4 * W) /* IN[0] IN[1] OUT[0] OUT[1] */
#define NPHASES 8
enum { K_HEAP, K_REG, K_PLAIN, K_STACK, K_STATIC, NKINDS };
static const char *kind_name[NKINDS] = {"heap", "registered", "plain malloc", "stack",
                                        "static"};

static uint64_t static_buf[AREA];

static uint64_t *in_area(uint64_t *base, int p) { return base + (p % 2) * W; }
static uint64_t *out_area(uint64_t *base, int p) { return base + 2 * W + (p % 2) * W; }

/* Word i of what `writer` puts (dir 0) or offers for getting (dir 1) in phase p. */
static uint64_t pat(int writer, int p, int kind, int dir, int i) {
  uint64_t x = ((uint64_t)(writer + 1) << 40) ^ ((uint64_t)(p + 1) << 28) ^
               ((uint64_t)(kind + 1) << 24) ^ ((uint64_t)dir << 23) ^ (uint64_t)i;
  x *= 0x9E3779B97F4A7C15ull;
  return x ^ (x >> 29);
}

static int nwords(int p) { return (p % 2) ? SMALL_W : W; }

static void trace(const char *what, int p) {
  if (g_rank == 0 && getenv("INTEROP_TRACE")) {
    fprintf(stderr, "interop_phases: %s %d\n", what, p);
    fflush(stderr);
  }
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
  CHECK(fh_rank(ctx) == me && fh_size(ctx) == np, "fh_rank/fh_size disagree with MPI");
  int right = (me + 1) % np, left = (me + np - 1) % np;
  srand(7919u * (unsigned)me + 1u);

  uint64_t stack_buf[AREA];
  uint64_t *base[NKINDS];
  size_t bytes = sizeof(uint64_t) * AREA;
  base[K_HEAP] = fh_malloc(ctx, bytes);
  CHECK(base[K_HEAP] != NULL, "fh_malloc(%zu)", bytes);
  base[K_REG] = aligned_alloc(4096, bytes);
  CHECK(base[K_REG] != NULL, "aligned_alloc");
  CHECK_RC(fh_mem_register(ctx, base[K_REG], bytes));
  base[K_PLAIN] = malloc(bytes);
  CHECK(base[K_PLAIN] != NULL, "malloc");
  base[K_STACK] = stack_buf;
  base[K_STATIC] = static_buf;
  /* A separate registered buffer for the classic case, so its first access is it. */
  uint64_t *classic = aligned_alloc(4096, 4096);
  CHECK(classic != NULL, "aligned_alloc");
  memset(classic, 0, 4096);
  CHECK_RC(fh_mem_register(ctx, classic, 4096));

  for (int k = 0; k < NKINDS; k++) {
    memset(base[k], 0, bytes);
    for (int i = 0; i < W; i++) {
      out_area(base[k], 0)[i] = pat(me, 0, k, 1, i);
      out_area(base[k], 1)[i] = pat(me, 1, k, 1, i);
    }
  }

  /* Addresses of every kind (plus the classic buffer) from every rank. */
  uint64_t mine[NKINDS + 1], *all = malloc(sizeof(uint64_t) * (NKINDS + 1) * np);
  CHECK(all != NULL, "malloc");
  for (int k = 0; k < NKINDS; k++) mine[k] = (uint64_t)(uintptr_t)base[k];
  mine[NKINDS] = (uint64_t)(uintptr_t)classic;
  MPI_Allgather(mine, NKINDS + 1, MPI_UINT64_T, all, NKINDS + 1, MPI_UINT64_T,
                MPI_COMM_WORLD);
  CHECK(memcmp(all + me * (NKINDS + 1), mine, sizeof mine) == 0, "MPI_Allgather");
#define RADDR(r, k) ((uint64_t *)(uintptr_t)all[(size_t)(r) * (NKINDS + 1) + (k)])

  /* Classic: rank 1 sits in MPI_Barrier when rank 0's first put to its registered
   * memory arrives. */
  trace("classic", 0);
  uint64_t src[W], got[W];
  if (me == 0) {
    usleep(200 * 1000);
    for (int i = 0; i < 64; i++) src[i] = pat(0, 99, K_REG, 0, i);
    CHECK_RC(fh_put(ctx, 1, RADDR(1, NKINDS), src, 64 * sizeof(uint64_t)));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 1)
    for (int i = 0; i < 512; i++) {
      uint64_t want = i < 64 ? pat(0, 99, K_REG, 0, i) : 0;
      CHECK(classic[i] == want, "classic: word %d is %#llx, want %#llx", i,
            (unsigned long long)classic[i], (unsigned long long)want);
    }

  for (int p = 0; p < NPHASES; p++) {
    trace("phase", p);
    int n = nwords(p);
    int sleep_before = (p % 2 == 1) && (me % 2 == 1);
    int sleep_after = (p == 2 || p == 6) && (me % 2 == 1);
    if (sleep_before) usleep((useconds_t)(rand() % 50) * 1000);
    for (int k = 0; k < NKINDS; k++) {
      for (int i = 0; i < n; i++) src[i] = pat(me, p, k, 0, i);
      CHECK_RC(fh_put(ctx, right, in_area(RADDR(right, k), p), src, n * sizeof(uint64_t)));
    }
    for (int k = 0; k < NKINDS; k++) {
      memset(got, 0xee, sizeof got);
      CHECK_RC(fh_get(ctx, got, left, out_area(RADDR(left, k), p), n * sizeof(uint64_t)));
      for (int i = 0; i < n; i++)
        CHECK(got[i] == pat(left, p, k, 1, i),
              "phase %d: fh_get of rank %d's %s memory: word %d is %#llx, want %#llx", p,
              left, kind_name[k], i, (unsigned long long)got[i],
              (unsigned long long)pat(left, p, k, 1, i));
    }
    /* Offer the next phase's data in the other OUT area (nobody reads it now). */
    for (int k = 0; k < NKINDS; k++)
      for (int i = 0; i < W; i++) out_area(base[k], p + 1)[i] = pat(me, p + 1, k, 1, i);
    if (sleep_after) usleep((useconds_t)(rand() % 50) * 1000);
    MPI_Barrier(MPI_COMM_WORLD);
    /* Target side: what the left neighbour put must be here now. */
    for (int k = 0; k < NKINDS; k++) {
      const volatile uint64_t *in = in_area(base[k], p);
      for (int i = 0; i < n; i++)
        CHECK(in[i] == pat(left, p, k, 0, i),
              "phase %d: my %s memory, word %d is %#llx, want %#llx (put by rank %d)", p,
              kind_name[k], i, (unsigned long long)in[i],
              (unsigned long long)pat(left, p, k, 0, i), left);
    }
  }

  /* Each rank unregisters; peers that cached the registrations are inside
   * fh_mem_unregister or fh_finalize, both of which serve the library. */
  trace("finalize", NPHASES);
  CHECK_RC(fh_mem_unregister(ctx, base[K_REG], bytes));
  CHECK_RC(fh_mem_unregister(ctx, classic, 4096));
  fh_free(ctx, base[K_HEAP]);
  CHECK_RC(fh_finalize(ctx));
  free(base[K_REG]);
  free(base[K_PLAIN]);
  free(classic);
  free(all);
  if (me == 0) printf("interop_phases: OK (np=%d)\n", np);
  MPI_Finalize();
  return 0;
}
