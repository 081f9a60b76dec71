/* The library keeps the program's MPI thread level, and a second context of an
 * MPI_THREAD_MULTIPLE program is as thread-safe as the first.
 *
 * Written as a program would use the header: MPI_Init_thread(MPI_THREAD_MULTIPLE),
 * fh_init, then fh_split. Checks:
 *  1. MPI_Query_thread after fh_init and fh_split still says what MPI_Init_thread
 *     provided (Open MPI 4.1 lowers the level of a process that initialises its tool
 *     interface asking for less, which the library did at fh_init).
 *  2. On the split context, ranks pair up (0-1, 2-3, ...; an odd last rank only
 *     checks 1): the even rank writes, the odd one reads, each with 4 threads on ONE
 *     pipe at once; every message carries (thread, number, checksum) and must arrive
 *     exactly once and intact.
 * Skipped (exit 0 with a note) when MPI does not provide MPI_THREAD_MULTIPLE. */
#include <pthread.h>

#include "common.h"

#define THREADS 4
#define PER_THREAD 3000
#define LEN 40

static rpipe_t *pipe_;
static int failed_;
static unsigned char seen_[THREADS][PER_THREAD];

static uint64_t sum_of(uint64_t t, uint64_t i) { return (t * 1000003u + i) * 0x9E3779B97F4A7C15ull; }

static void *writer(void *arg) {
  uint64_t t = (uint64_t)(uintptr_t)arg;
  for (uint64_t i = 0; i < PER_THREAD; i++) {
    rpipe_addr_t a;
    if (rpipe_rmalloc(pipe_, LEN, &a) != FH_OK) return (void *)1;
    uint64_t *m = rpipe_rmem(pipe_, a);
    if (!m) return (void *)2;
    m[0] = t;
    m[1] = i;
    m[2] = sum_of(t, i);
    m[3] = ~m[2];
    m[4] = t ^ i;
    if (rpipe_rwrite(pipe_, a) != FH_OK) return (void *)3;
  }
  return NULL;
}

static void *reader(void *arg) {
  (void)arg;
  for (int k = 0; k < PER_THREAD; k++) {
    rpipe_addr_t a;
    size_t len;
    if (rpipe_rread(pipe_, &a, &len) != FH_OK) return (void *)1;
    const uint64_t *m = rpipe_rmem(pipe_, a);
    if (!m || len != LEN) return (void *)2;
    uint64_t t = m[0], i = m[1];
    if (t >= THREADS || i >= PER_THREAD || m[2] != sum_of(t, i) || m[3] != ~m[2] || m[4] != (t ^ i)) {
      __atomic_store_n(&failed_, 1, __ATOMIC_SEQ_CST);
      return (void *)3;
    }
    /* Exactly once: a second copy of (t, i) finds its mark set. */
    if (__atomic_exchange_n(&seen_[t][i], 1, __ATOMIC_SEQ_CST)) return (void *)4;
    if (rpipe_rfree(pipe_, a) != FH_OK) return (void *)5;
  }
  return NULL;
}

int main(int argc, char **argv) {
  int provided, now;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int me, np;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  fh_test_rank = me;
  if (provided < MPI_THREAD_MULTIPLE) {
    if (me == 0) printf("test_thread_level: MPI provides level %d, not MPI_THREAD_MULTIPLE: skipped\n", provided);
    MPI_Finalize();
    return 0;
  }
  fh_ctx_t *ctx, *sub;
  CHECK_OK(fh_init(MPI_COMM_WORLD, NULL, &ctx));
  MPI_Query_thread(&now);
  CHECK(now == provided, "after fh_init MPI_Query_thread says %d; MPI_Init_thread provided %d", now, provided);
  CHECK_OK(fh_split(ctx, 0, me, NULL, &sub));
  MPI_Query_thread(&now);
  CHECK(now == provided, "after fh_split MPI_Query_thread says %d; MPI_Init_thread provided %d", now, provided);

  int peer = me ^ 1, writes = me % 2 == 0;
  if (peer < np) {
    CHECK_OK(rpipe_open(sub, peer, writes ? RPIPE_WRITER : RPIPE_READER, 4096, RPIPE_HALF_DUPLEX,
                        RPIPE_NEXT_FIT, &pipe_));
    pthread_t th[THREADS];
    for (uintptr_t t = 0; t < THREADS; t++)
      CHECK(pthread_create(&th[t], NULL, writes ? writer : reader, (void *)t) == 0, "pthread_create");
    for (int t = 0; t < THREADS; t++) {
      void *r;
      pthread_join(th[t], &r);
      CHECK(r == NULL, "%s thread %d stopped at step %d (failed_ %d)", writes ? "writer" : "reader", t,
            (int)(uintptr_t)r, failed_);
    }
    if (!writes)
      for (int t = 0; t < THREADS; t++)
        for (int i = 0; i < PER_THREAD; i++) CHECK(seen_[t][i], "message (%d, %d) never arrived", t, i);
    MPI_Barrier(MPI_COMM_WORLD); /* the reader freed everything before the close */
    CHECK_OK(rpipe_close(pipe_));
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
  }
  CHECK_OK(fh_finalize(sub));
  CHECK_OK(fh_finalize(ctx));
  if (me == 0) printf("test_thread_level: %d ranks, %d threads x %d messages per pipe: ok\n", np, THREADS, PER_THREAD);
  MPI_Finalize();
  return 0;
}
