/* interop_am_storm.c -- active messages in a plain MPI program synchronised only
 * with MPI (no fh_barrier anywhere).
 *
 * Part A (within credits): every rank sends K_A short and K_A medium requests to
 *   every other rank (2*K_A <= 8, the smallest per-peer credit count, so no send
 *   waits for flow control), enters MPI_Barrier at once without polling, learns
 *   how many it should receive with MPI_Allreduce, then fh_poll's until all arrived.
 * Part B (request/reply): requests to every other rank (even ranks R_B per peer
 *   at once; odd ranks first serve the even ranks' requests, wait 100 ms, then
 *   send 3*R_B per peer); the handler answers each
 *   with fh_am_reply_short; the sender fh_poll's until all its replies are in and
 *   goes straight into MPI_Barrier while other ranks' requests to it are still
 *   unhandled (the late odd ranks'). After the barrier every request must have
 *   been handled.
 * Part C (storm beyond credits): as A, but even ranks send K_C_EVEN and odd ranks
 *   K_C_ODD of each kind per peer (more than any per-peer credit count, 64), odd
 *   ones 100 ms late, so odd senders wait for flow control while their even
 *   targets, done early, already sit in MPI_Barrier.
 * Every handler checks the source, the arguments and the medium payload bytes.
 * Optional argv[1]: a subset of parts to run, e.g. "A" or "BC" (default "ABC").
 */
#include <mpi.h>
#include "firehose.h"

#include <stdatomic.h>
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

#define H_COUNT 128
#define H_REQ 129
#define H_REP 130
#define K_A 4
#define R_B 20
#define K_C_EVEN 20
#define K_C_ODD 100
#define MAGIC 0xA11CE5ull
#define TIME_LIMIT 30.0

/* Handlers may run on a progress thread (FH_PROGRESS=thread): atomic counters. */
static atomic_long n_count, n_req, n_rep, n_bad;
static char bad_what[256];

static void bad(const char *what) {
  if (atomic_fetch_add(&n_bad, 1) == 0) snprintf(bad_what, sizeof bad_what, "%s", what);
}

static uint8_t payload_byte(int src, uint64_t seq, size_t j) {
  return (uint8_t)((src * 131u) ^ (seq * 29u) ^ (j * 7u) ^ (j >> 8));
}
static size_t payload_len(uint64_t seq) { return 1 + (size_t)((seq * 977u) % 3000u); }

/* args: src, seq, kind (0 short, 1 medium), MAGIC ^ src ^ seq */
static void on_count(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args,
                     size_t nargs, void *user) {
  (void)user;
  if (nargs != 4) { bad("count: nargs"); return; }
  int src = fh_am_source(tok);
  if (src < 0 || args[0] != (uint64_t)src) { bad("count: source"); return; }
  if (args[3] != (MAGIC ^ args[0] ^ args[1])) { bad("count: arg 3"); return; }
  if (args[2] == 0) {
    if (buf != NULL || nbytes != 0) { bad("count: short AM with a payload"); return; }
  } else {
    if (nbytes != payload_len(args[1])) { bad("count: medium length"); return; }
    const uint8_t *b = buf;
    for (size_t j = 0; j < nbytes; j++)
      if (b[j] != payload_byte(src, args[1], j)) { bad("count: medium payload"); return; }
  }
  atomic_fetch_add(&n_count, 1);
}

/* args: src, seq. Reply args: me, seq, 3*seq + 1000*src. */
static void on_req(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args,
                   size_t nargs, void *user) {
  (void)buf, (void)nbytes, (void)user;
  int src = fh_am_source(tok);
  if (nargs != 2 || args[0] != (uint64_t)src) { bad("req: args"); return; }
  uint64_t r[3] = {(uint64_t)g_rank, args[1], 3 * args[1] + 1000 * (uint64_t)src};
  atomic_fetch_add(&n_req, 1);
  if (fh_am_reply_short(tok, H_REP, r, 3) != FH_OK) bad("req: fh_am_reply_short failed");
}

static void on_rep(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args,
                   size_t nargs, void *user) {
  (void)buf, (void)nbytes, (void)user;
  int src = fh_am_source(tok);
  if (nargs != 3 || args[0] != (uint64_t)src ||
      args[2] != 3 * args[1] + 1000 * (uint64_t)g_rank) {
    bad("rep: args");
    return;
  }
  atomic_fetch_add(&n_rep, 1);
}

/* Poll until *ctr reaches want, failing clearly after TIME_LIMIT seconds (exact
 * totals are checked at the end: a fast rank's next part may already arrive). */
static void poll_until(fh_ctx_t *ctx, atomic_long *ctr, long want, const char *what) {
  double t0 = MPI_Wtime();
  while (atomic_load(ctr) < want) {
    CHECK_RC(fh_poll(ctx));
    CHECK(MPI_Wtime() - t0 < TIME_LIMIT, "%s: only %ld of %ld arrived after %.0f s", what,
          atomic_load(ctr), want, TIME_LIMIT);
  }
}

/* Storm of k short + k medium requests to every other rank, then MPI_Barrier at
 * once, then MPI_Allreduce of per-destination counts, then poll for the rest. */
static void storm(fh_ctx_t *ctx, int me, int np, int k_even, int k_odd, uint64_t *seq,
                  long *expect, const char *name) {
  int k = me % 2 ? k_odd : k_even;
  if (k_odd != k_even && me % 2) usleep(100 * 1000); /* even ranks reach MPI_Barrier first */
  long want = 0; /* what the others send me */
  for (int s = 0; s < np; s++)
    if (s != me) want += 2L * (s % 2 ? k_odd : k_even);
  long *sent = calloc((size_t)np, sizeof(long)), *tot = calloc((size_t)np, sizeof(long));
  uint8_t *pl = malloc(3000);
  CHECK(sent && tot && pl, "calloc");
  for (int i = 0; i < k; i++)
    for (int d = 1; d < np; d++) {
      int dst = (me + d) % np;
      uint64_t s = (*seq)++;
      uint64_t a[4] = {(uint64_t)me, s, 0, MAGIC ^ (uint64_t)me ^ s};
      CHECK_RC(fh_am_request_short(ctx, dst, H_COUNT, a, 4));
      s = (*seq)++;
      a[1] = s, a[2] = 1, a[3] = MAGIC ^ (uint64_t)me ^ s;
      size_t n = payload_len(s);
      for (size_t j = 0; j < n; j++) pl[j] = payload_byte(me, s, j);
      CHECK_RC(fh_am_request_medium(ctx, dst, H_COUNT, pl, n, a, 4));
      sent[dst] += 2;
    }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Allreduce(sent, tot, np, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  CHECK(tot[me] == want, "%s: MPI_Allreduce says %ld to me, want %ld", name, tot[me], want);
  *expect += tot[me];
  poll_until(ctx, &n_count, *expect, name);
  free(sent), free(tot), free(pl);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int me, np;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  g_rank = me;
  CHECK(np >= 2, "needs at least 2 ranks, got %d", np);
  const char *parts = argc > 1 ? argv[1] : "ABC";
  fh_ctx_t *ctx;
  CHECK_RC(fh_init(MPI_COMM_WORLD, NULL, &ctx));
  CHECK(fh_am_max_medium(ctx) >= 3000, "fh_am_max_medium %zu < 3000",
        fh_am_max_medium(ctx));
  CHECK_RC(fh_am_register(ctx, H_COUNT, on_count, NULL));
  CHECK_RC(fh_am_register(ctx, H_REQ, on_req, NULL));
  CHECK_RC(fh_am_register(ctx, H_REP, on_rep, NULL));
  /* Nobody sends before every rank registered its handlers. */
  MPI_Barrier(MPI_COMM_WORLD);

  uint64_t seq = 0;
  long expect = 0;
  if (strchr(parts, 'A'))
    storm(ctx, me, np, K_A, K_A, &seq, &expect, "part A (within credits)");

  if (strchr(parts, 'B')) {
    int r = me % 2 ? 3 * R_B : R_B;
    long want_req = 0;
    for (int s = 0; s < np; s++)
      if (s != me) want_req += s % 2 ? 3 * R_B : R_B;
    if (me % 2) {
      /* Serve the even ranks' requests first, so they get every reply and enter
       * MPI_Barrier; only then send ours. */
      long from_even = 0;
      for (int s = 0; s < np; s += 2) from_even += R_B;
      poll_until(ctx, &n_req, from_even, "part B requests from even ranks");
      usleep(100 * 1000);
    }
    for (int i = 0; i < r; i++)
      for (int d = 1; d < np; d++) {
        uint64_t a[2] = {(uint64_t)me, (uint64_t)(i * np + d)};
        CHECK_RC(fh_am_request_short(ctx, (me + d) % np, H_REQ, a, 2));
      }
    poll_until(ctx, &n_rep, (long)r * (np - 1), "part B replies");
    MPI_Barrier(MPI_COMM_WORLD); /* straight away: peers' requests may be unhandled */
    /* Everyone got every reply before leaving, so every request was handled. */
    CHECK(atomic_load(&n_req) == want_req, "part B: handled %ld requests, want %ld",
          atomic_load(&n_req), want_req);
    CHECK(atomic_load(&n_rep) == (long)r * (np - 1), "part B: %ld replies, want %ld",
          atomic_load(&n_rep), (long)r * (np - 1));
  }

  if (strchr(parts, 'C'))
    storm(ctx, me, np, K_C_EVEN, K_C_ODD, &seq, &expect, "part C (beyond credits)");

  CHECK(atomic_load(&n_bad) == 0, "%ld bad AMs, first: %s", atomic_load(&n_bad), bad_what);
  CHECK(atomic_load(&n_count) == expect, "%ld counted AMs arrived, want %ld",
        atomic_load(&n_count), expect);
  long mine[2] = {atomic_load(&n_count), expect}, all[2] = {0, 0};
  MPI_Allreduce(mine, all, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  CHECK(all[0] == all[1], "AMs handled over all ranks %ld, want %ld", all[0], all[1]);
  CHECK_RC(fh_finalize(ctx));
  if (me == 0) printf("interop_am_storm: OK (np=%d)\n", np);
  MPI_Finalize();
  return 0;
}
