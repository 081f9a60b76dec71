/* lock_queue.c -- a remote FIFO queue protected by a firehose MCS lock.
 *
 * The queue is a ring of CAP slots plus head/tail indices, all in the fh_malloc
 * memory of a home rank (the last rank). Nothing in it is atomic: every access is a
 * plain fh_get / fh_put made while holding an fh_lock homed on the same rank:
 *
 *   producer: lock; get head,tail; if not full { put item -> slot[tail % CAP];
 *             put tail+1 }; unlock          (full: unlock, yield, try again)
 *   consumer: lock; get head,tail; if not empty { get slot[head % CAP]; put 0 there;
 *             put head+1 }; unlock          (empty: unlock, yield, try again)
 *
 * Even ranks produce (NPER items each, tagged producer:sequence), odd ranks consume
 * until head reaches the total. The lock is seed 004's distributed queue lock: a
 * waiter spins on a word in its own memory and the home rank's CPU does nothing for
 * it. Consumers first try fh_lock_try and only queue with fh_lock_acquire when the
 * lock is busy.
 *
 * Checked (any failure prints what differed and exits non-zero):
 *   - no consumer ever reads an empty (0) slot -- a lost or torn update would show;
 *   - every item is dequeued exactly once: each consumer records the queue position
 *     (head) at which it took each item; summed over ranks with fh_allreduce, the
 *     positions of all items are exactly 1 .. total, each used once;
 *   - FIFO: for every producer its items left the queue in the order it enqueued them.
 * Rank 0 prints the totals, items per consumer, and how often the queue was full or
 * empty and the lock busy.
 *
 * Run: mpirun -np 4 ./lock_queue [NPER]   (>= 2 ranks; NPER items per producer, default 2000) */
#include <mpi.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "example.h" /* CHECK, FAIL, example_init, example_finalize */

#define CAP 16

struct queue {
  uint64_t head, tail;    /* items dequeued / enqueued so far */
  uint64_t slot[CAP];     /* item + 1, or 0 when empty */
};

int main(int argc, char **argv) {
  int rank, size;
  fh_ctx_t *ctx = example_init(&argc, &argv, &rank, &size);
  long nper = argc > 1 ? atol(argv[1]) : 2000;
  if (size < 2) FAIL("run with at least 2 ranks (producers and consumers)");
  if (nper < 1 || nper > 1000000) FAIL("NPER must be 1 .. 1000000");

  const int home = size - 1;
  const int nprod = (size + 1) / 2, ncons = size / 2;
  const int producer = rank % 2 == 0;
  const uint64_t total = (uint64_t)nprod * (uint64_t)nper;

  /* The queue at the home rank, its address broadcast; the lock homed there too. */
  struct queue *q = NULL;
  if (rank == home) {
    q = fh_malloc(ctx, sizeof *q);
    if (!q) FAIL("fh_malloc failed");
    *q = (struct queue){0};
  }
  uint64_t qaddr = (uint64_t)(uintptr_t)q;
  CHECK(fh_broadcast(ctx, home, &qaddr, sizeof qaddr));
  q = (struct queue *)(uintptr_t)qaddr;
  fh_lock_t *lock;
  CHECK(fh_lock_create(ctx, home, &lock));

  /* pos[item] = 1 + the queue position at which this rank dequeued it (0: not mine). */
  uint32_t *pos = calloc(total, sizeof *pos), *all_pos = calloc(total, sizeof *all_pos);
  if (!pos || !all_pos) FAIL("out of memory");
  /* stats: [0] items moved, [1] lock acquisitions, [2] full/empty retries, [3] lock busy */
  uint64_t st[4] = {0, 0, 0, 0};
  uint64_t hdtl[2];

  CHECK(fh_barrier(ctx));
  double t0 = MPI_Wtime();
  if (producer) {
    uint64_t p = (uint64_t)(rank / 2);
    for (long seq = 0; seq < nper; seq++) {
      uint64_t v = (p * (uint64_t)nper + (uint64_t)seq) + 1; /* the item, + 1 */
      for (;;) {
        CHECK(fh_lock_acquire(lock));
        st[1]++;
        CHECK(fh_get(ctx, hdtl, home, &q->head, sizeof hdtl));
        if (hdtl[1] - hdtl[0] < CAP) {
          CHECK(fh_put(ctx, home, &q->slot[hdtl[1] % CAP], &v, sizeof v));
          hdtl[1]++;
          CHECK(fh_put(ctx, home, &q->tail, &hdtl[1], sizeof hdtl[1]));
          CHECK(fh_lock_release(lock));
          st[0]++;
          break;
        }
        CHECK(fh_lock_release(lock)); /* full: let a consumer in */
        st[2]++;
        sched_yield();
      }
    }
  } else {
    for (;;) {
      int rc = fh_lock_try(lock);
      if (rc == FH_NOT_READY) {
        st[3]++;
        CHECK(fh_lock_acquire(lock));
      } else {
        CHECK(rc);
      }
      st[1]++;
      CHECK(fh_get(ctx, hdtl, home, &q->head, sizeof hdtl));
      if (hdtl[0] == total) { /* everything was dequeued */
        CHECK(fh_lock_release(lock));
        break;
      }
      if (hdtl[0] < hdtl[1]) {
        uint64_t v, zero = 0, at = hdtl[0];
        CHECK(fh_get(ctx, &v, home, &q->slot[at % CAP], sizeof v));
        CHECK(fh_put(ctx, home, &q->slot[at % CAP], &zero, sizeof zero));
        hdtl[0]++;
        CHECK(fh_put(ctx, home, &q->head, &hdtl[0], sizeof hdtl[0]));
        CHECK(fh_lock_release(lock));
        if (v == 0 || v > total)
          FAIL("queue position %llu held %llu: a slot was read before it was written",
               (unsigned long long)at, (unsigned long long)v);
        if (pos[v - 1]) FAIL("item %llu dequeued twice by this rank", (unsigned long long)(v - 1));
        pos[v - 1] = (uint32_t)(at + 1);
        st[0]++;
      } else {
        CHECK(fh_lock_release(lock)); /* empty: let a producer in */
        st[2]++;
        sched_yield();
      }
    }
  }
  double secs = MPI_Wtime() - t0, max_secs;
  CHECK(fh_barrier(ctx));

  /* Positions of all items: a permutation of 1 .. total, increasing per producer. */
  CHECK(fh_allreduce(ctx, pos, all_pos, total, FH_UINT32, FH_SUM));
  if (rank == 0) {
    char *used = calloc(total + 1, 1);
    if (!used) FAIL("out of memory");
    for (uint64_t i = 0; i < total; i++) {
      uint32_t at = all_pos[i];
      if (at == 0 || at > total || used[at])
        FAIL("item %llu (producer %llu, #%llu): dequeued %s", (unsigned long long)i,
             (unsigned long long)(i / (uint64_t)nper), (unsigned long long)(i % (uint64_t)nper),
             at == 0 ? "never" : "at a position another item also had (twice, or by two ranks)");
      used[at] = 1;
      if (i % (uint64_t)nper != 0 && all_pos[i - 1] >= at)
        FAIL("FIFO broken: producer %llu's item #%llu left the queue before #%llu",
             (unsigned long long)(i / (uint64_t)nper), (unsigned long long)(i % (uint64_t)nper),
             (unsigned long long)(i % (uint64_t)nper - 1));
    }
    free(used);
  }

  uint64_t sums[4], *moved = malloc((size_t)size * sizeof *moved);
  if (!moved) FAIL("out of memory");
  CHECK(fh_reduce(ctx, 0, st, sums, 4, FH_UINT64, FH_SUM));
  CHECK(fh_allgather(ctx, &st[0], sizeof st[0], moved));
  CHECK(fh_allreduce(ctx, &secs, &max_secs, 1, FH_DOUBLE, FH_MAX));
  if (rank == 0) {
    uint64_t in = 0, out = 0;
    for (int r = 0; r < size; r++) {
      if (r % 2 == 0)
        in += moved[r];
      else
        out += moved[r];
    }
    if (in != total || out != total)
      FAIL("%llu enqueued and %llu dequeued, expected %llu each", (unsigned long long)in,
           (unsigned long long)out, (unsigned long long)total);
    printf("lock_queue: %d producers x %ld items through a %d-slot queue on rank %d to %d consumers\n",
           nprod, nper, CAP, home, ncons);
    printf("  items per consumer:");
    for (int r = 1; r < size; r += 2) printf(" %llu", (unsigned long long)moved[r]);
    printf("\n  every item dequeued exactly once, in FIFO order per producer, no empty slot read\n");
    printf("  %.3f s: %llu lock acquisitions (one every %.1f us), %llu full/empty retries, "
           "fh_lock_try found the lock busy %llu times\n",
           max_secs, (unsigned long long)sums[1], max_secs * 1e6 / (double)(sums[1] ? sums[1] : 1),
           (unsigned long long)sums[2], (unsigned long long)sums[3]);
  }
  free(moved);
  free(pos);
  free(all_pos);
  CHECK(fh_barrier(ctx));
  CHECK(fh_lock_destroy(lock));
  if (rank == home) fh_free(ctx, q);
  example_finalize(ctx);
  return 0;
}
