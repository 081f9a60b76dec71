/* interop_rpipe_lock.c -- rpipe channels and the MCS lock in a plain MPI program
 * synchronised only with MPI (no fh_barrier anywhere).
 *
 * Pipes: rank 2k writes, rank 2k+1 reads (an odd last rank idles). Two pipes per
 * pair, one pushing (default) and one pulling (RPIPE_PULL). In each of NPHASES
 * phases the writer sends M messages of varying length with a pattern of
 * (pair, phase, message, byte) over one of the pipes; the reader checks length and
 * every byte and frees each message. Both ends then compare checksums with
 * MPI_Sendrecv, and everyone meets in MPI_Barrier. Skew: in odd phases the reader
 * sleeps first (the writer fills the heap and waits for frees), in phases 2 mod 4
 * the writer sleeps first (the reader waits in rpipe_rread).
 *
 * Lock: an fh_lock homed at rank 0 guards a counter and a holder word in rank 0's
 * heap and a second counter in rank 0's plain malloc memory; every rank N times:
 * acquire, check holder == 0 and set it to itself, read both counters with fh_get,
 * write them back incremented with fh_put, clear holder, release. The other ranks
 * start 50 ms late, so rank 0 is mostly done and waiting in MPI_Barrier when their
 * first accesses to its plain memory arrive. After MPI_Barrier rank 0 checks both
 * counters == size*N and holder == 0.
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

#define WIDTH (16u << 10) /* pipe width: small, so flow control kicks in */
#define NPHASES 6
#define M 150             /* messages per phase */
#define NLOCK 25          /* lock rounds per rank */

static size_t msg_len(int phase, int i) { return 1 + (size_t)((i * 211 + phase * 53) % 3000); }
static uint8_t msg_byte(int pair, int phase, int i, size_t j) {
  return (uint8_t)(pair * 97 + phase * 31 + i * 13 + j * 7 + (j >> 7));
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

  /* ---- rpipe between pairs ---- */
  int pair = me / 2, writer = me % 2 == 0, peer = writer ? me + 1 : me - 1;
  int active = peer < np;
  rpipe_t *pipes[2] = {NULL, NULL};
  if (active) {
    int role = writer ? RPIPE_WRITER : RPIPE_READER;
    CHECK_RC(rpipe_open(ctx, peer, role, WIDTH, RPIPE_HALF_DUPLEX, RPIPE_NEXT_FIT, &pipes[0]));
    CHECK_RC(rpipe_open(ctx, peer, role, WIDTH, RPIPE_HALF_DUPLEX | RPIPE_PULL,
                        RPIPE_FIRST_FIT, &pipes[1]));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  for (int ph = 0; ph < NPHASES; ph++) {
    uint64_t sum = 0;
    if (active) {
      rpipe_t *p = pipes[ph % 2];
      if (writer) {
        if (ph % 4 == 2) usleep(30 * 1000);
        for (int i = 0; i < M; i++) {
          size_t n = msg_len(ph, i);
          rpipe_addr_t a;
          CHECK_RC(rpipe_rmalloc(p, n, &a));
          uint8_t *b = rpipe_rmem(p, a);
          CHECK(b != NULL, "rpipe_rmem after rpipe_rmalloc");
          for (size_t j = 0; j < n; j++) sum += (b[j] = msg_byte(pair, ph, i, j)) * (j + 1);
          CHECK_RC(rpipe_rwrite(p, a));
        }
      } else {
        if (ph % 2 == 1) usleep(30 * 1000);
        for (int i = 0; i < M; i++) {
          rpipe_addr_t a;
          size_t n = 0;
          CHECK_RC(rpipe_rread(p, &a, &n));
          CHECK(n == msg_len(ph, i), "phase %d message %d: length %zu, want %zu", ph, i, n,
                msg_len(ph, i));
          const uint8_t *b = rpipe_rmem(p, a);
          CHECK(b != NULL, "rpipe_rmem after rpipe_rread");
          for (size_t j = 0; j < n; j++) {
            CHECK(b[j] == msg_byte(pair, ph, i, j), "phase %d message %d byte %zu: %u, want %u",
                  ph, i, j, b[j], msg_byte(pair, ph, i, j));
            sum += b[j] * (j + 1);
          }
          CHECK_RC(rpipe_rfree(p, a));
        }
      }
      uint64_t other = 0;
      MPI_Sendrecv(&sum, 1, MPI_UINT64_T, peer, ph, &other, 1, MPI_UINT64_T, peer, ph,
                   MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      CHECK(other == sum, "phase %d: checksum %llu here, %llu at rank %d", ph,
            (unsigned long long)sum, (unsigned long long)other, peer);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (active) {
    for (int k = 0; k < 2; k++) {
      rpipe_stats_t st;
      CHECK_RC(rpipe_stats(pipes[k], &st));
      uint64_t want = (uint64_t)M * (NPHASES / 2);
      CHECK((writer ? st.messages_written : st.messages_read) == want,
            "pipe %d: %llu messages, want %llu", k,
            (unsigned long long)(writer ? st.messages_written : st.messages_read),
            (unsigned long long)want);
      CHECK_RC(rpipe_close(pipes[k]));
    }
  }

  /* ---- MCS lock guarding a counter in rank 0's heap ---- */
  uint64_t *words = NULL, *plain = NULL, addr[2] = {0, 0};
  if (me == 0) {
    words = fh_malloc(ctx, 64);
    plain = malloc(4096);
    CHECK(words != NULL && plain != NULL, "fh_malloc / malloc");
    words[0] = 0; /* counter */
    words[1] = 0; /* holder + 1, or 0 */
    plain[0] = 0; /* second counter */
    addr[0] = (uint64_t)(uintptr_t)words;
    addr[1] = (uint64_t)(uintptr_t)plain;
  }
  MPI_Bcast(addr, 2, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  uint64_t *ctr = (uint64_t *)(uintptr_t)addr[0], *holder = ctr + 1;
  uint64_t *ctr2 = (uint64_t *)(uintptr_t)addr[1];
  fh_lock_t *lk;
  CHECK_RC(fh_lock_create(ctx, 0, &lk));
  MPI_Barrier(MPI_COMM_WORLD);
  if (me != 0) usleep(50 * 1000);
  for (int i = 0; i < NLOCK; i++) {
    CHECK_RC(fh_lock_acquire(lk));
    uint64_t h = 99, v = 0, v2 = 0, mark = (uint64_t)me + 1, zero = 0;
    CHECK_RC(fh_get(ctx, &h, 0, holder, sizeof h));
    CHECK(h == 0, "round %d: lock acquired but rank %lld holds it too", i, (long long)h - 1);
    CHECK_RC(fh_put(ctx, 0, holder, &mark, sizeof mark));
    CHECK_RC(fh_get(ctx, &v, 0, ctr, sizeof v));
    CHECK_RC(fh_get(ctx, &v2, 0, ctr2, sizeof v2));
    CHECK(v == v2, "round %d: counters differ inside the lock: %llu and %llu", i,
          (unsigned long long)v, (unsigned long long)v2);
    if (i % 5 == me % 5) usleep(1000); /* widen the critical section now and then */
    v++;
    CHECK_RC(fh_put(ctx, 0, ctr, &v, sizeof v));
    CHECK_RC(fh_put(ctx, 0, ctr2, &v, sizeof v));
    CHECK_RC(fh_get(ctx, &h, 0, holder, sizeof h));
    CHECK(h == mark, "round %d: holder word changed to %llu inside the lock", i,
          (unsigned long long)h);
    CHECK_RC(fh_put(ctx, 0, holder, &zero, sizeof zero));
    CHECK_RC(fh_lock_release(lk));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 0) {
    CHECK(words[0] == (uint64_t)np * NLOCK, "counter %llu, want %llu",
          (unsigned long long)words[0], (unsigned long long)np * NLOCK);
    CHECK(words[1] == 0, "holder word %llu after the last release",
          (unsigned long long)words[1]);
    CHECK(plain[0] == (uint64_t)np * NLOCK, "plain-memory counter %llu, want %llu",
          (unsigned long long)plain[0], (unsigned long long)np * NLOCK);
  }
  CHECK_RC(fh_lock_destroy(lk));
  if (me == 0) fh_free(ctx, words);
  CHECK_RC(fh_finalize(ctx));
  free(plain);
  if (me == 0) printf("interop_rpipe_lock: OK (np=%d)\n", np);
  MPI_Finalize();
  return 0;
}
