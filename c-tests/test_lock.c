/* Distributed MCS queue lock (issue 6, part 2): mutual exclusion, several locks at
 * once, fh_lock_try, no starvation, arrival-order grants, and every error path.
 *
 * Each lock protects a 64-byte record in its home rank's fh_malloc memory: word 0 is
 * a counter, word 1 the last holder, words 2..7 a pattern derived from the counter.
 * The critical section is a NON-atomic read-modify-write: fh_get the record, check
 * its pattern (a torn or stale view fails), spin a random while (sometimes yielding
 * the CPU, so a waiter runs while we hold it), fh_put the record with counter+1. An
 * occupancy word next to it is swapped to our id on entry (must return 0) and back
 * to 0 on exit (must return our id). Any lost update makes the final counter differ
 * from the number of acquisitions, and the counters every rank read must be exactly
 * 0..total-1.
 *
 *  1. one lock homed at the last rank: every rank acquires it ITERS times (a quarter
 *     of them by fh_lock_try first); the largest number of grants to others between
 *     two grants to one rank is printed (a fairness figure, not checked).
 *  2. three locks homed at 0, np/2 and np-1, used one at a time or two nested (in
 *     index order); per-lock counters checked.
 *  3. fh_lock_try: all ranks try at once and exactly one wins; while it holds, every
 *     other rank's try (and the holder's own second try) is FH_NOT_READY; after the
 *     release another rank's try succeeds; each rank in turn tries a free lock.
 *  4. no starvation: rank 0 takes and releases the lock in a tight loop until every
 *     other rank got it K times (the watchdog fails a starved rank).
 *  5. arrival order: rank 0 holds the lock while ranks 1..np-1 call fh_lock_acquire
 *     one after another, 40 ms apart (waiting in fh_poll loops meanwhile: with
 *     FH_SHM=0 a lock word's owner must call in for Open MPI to apply the atomics
 *     aimed at it); grants must follow that order. Scheduling can
 *     delay a rank's enqueue past the next one's, so an attempt that disagrees is
 *     retried, and the check fails only if all 3 attempts disagree (the exact FIFO
 *     check lives in the Rust sim tests).
 *  6. errors: NULL lock / lock_out / ctx -> FH_ERR_INVALID_ARG; a bad home ->
 *     FH_ERR_BAD_RANK; release without holding (and twice) -> FH_ERR_STATE; destroy
 *     or acquire while holding -> FH_ERR_STATE, the handle still works; every call after destroy
 *     -> FH_ERR_STATE; homes that differ between ranks -> FH_ERR_INVALID_ARG on every
 *     rank, lock_out untouched, and the context still works; 128 locks at once, the
 *     129th FH_ERR_NO_RESOURCE, then a freed slot is reusable.
 *
 * FH_TEST_LOCK_ITERS sets phase 1's acquisitions per rank (default 16000/np, at
 * least 500; phase 2 does half). A watchdog names the phase if one hangs.
 * Run: mpirun -np 2|4|8 test_lock (also with FH_SHM=0 and FH_PROGRESS=thread). */
#include "common.h"
#include <sched.h>
#include <time.h>
#include <unistd.h>

static fh_ctx_t *ctx;
static int me, np;
static uint64_t rng;
static char **heaps; /* every rank's fh_malloc block */

static inline uint64_t rndn(uint64_t n) { return rng_next(&rng) % n; }
static void sleep_ms(double ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)((ms - 1000 * (double)(time_t)(ms / 1000)) * 1e6)};
  nanosleep(&ts, NULL);
}
/* Wait `ms` while serving the library (fh_poll every 50 us). Without node-shared
 * heaps (FH_SHM=0) Open MPI applies another rank's atomic on our memory only when
 * we call into MPI, so a rank that merely slept would hold up (and reorder) the
 * enqueues of a lock homed on it. */
static void idle_ms(double ms) {
  double end = MPI_Wtime() + ms / 1000;
  while (MPI_Wtime() < end) {
    CHECK_OK(fh_poll(ctx));
    sleep_ms(0.05);
  }
}

/* ---------------- protected records ---------------- */
/* Record of protected slot s at rank h: heaps[h] + 128*s: [0..64) the record,
 * [64] the occupancy word. Slots: 0 phase 1, 1..3 phase 2, 4 phases 3-4, 5 phase 6. */
#define NSLOTS 8
#define LOCK_LIMIT 128 /* locks one context can hold at once (fh_lock_create) */
static uint64_t *rec_at(int home, int s) { return (uint64_t *)(heaps[home] + 128 * s); }
static uint64_t *occ_at(int home, int s) { return (uint64_t *)(heaps[home] + 128 * s + 64); }
static uint64_t pattern(uint64_t seq, int k) { return mix64(seq * 8 + (uint64_t)k); }

/* Initialise a slot's record at its home (counter 0); call before a barrier. */
static void init_slot(int home, int s) {
  if (me != home) return;
  uint64_t r[8] = {0, (uint64_t)-1};
  for (int k = 2; k < 8; k++) r[k] = pattern(0, k);
  memcpy(rec_at(home, s), r, 64);
  CHECK_OK(fh_atomic_set_u64(ctx, home, occ_at(home, s), 0));
}

/* The critical section of a lock protecting slot s at `home`; returns the counter
 * value we saw (our grant's sequence number). */
static uint64_t critical(int home, int s, const char *what) {
  uint64_t o, r[8];
  CHECK_OK(fh_atomic_swap_u64(ctx, home, occ_at(home, s), (uint64_t)me + 1, &o));
  CHECK(o == 0, "%s: entered the critical section while rank %d was in it", what, (int)o - 1);
  CHECK_OK(fh_get(ctx, r, home, rec_at(home, s), 64));
  for (int k = 2; k < 8; k++)
    CHECK(r[k] == pattern(r[0], k),
          "%s: record word %d does not match counter %llu (last holder rank %lld): a torn or "
          "stale view of the previous holder's fh_put",
          what, k, (unsigned long long)r[0], (long long)r[1]);
  uint64_t seq = r[0];
  /* Hold it a while: spin, sometimes give the CPU away. */
  volatile uint64_t x = 0;
  uint64_t spin = rndn(400);
  for (uint64_t i = 0; i < spin; i++) x += i;
  if (rndn(8) == 0) sched_yield();
  if (rndn(64) == 0) sleep_ms(0.05);
  r[0] = seq + 1;
  r[1] = (uint64_t)me;
  for (int k = 2; k < 8; k++) r[k] = pattern(seq + 1, k);
  CHECK_OK(fh_put(ctx, home, rec_at(home, s), r, 64));
  CHECK_OK(fh_atomic_swap_u64(ctx, home, occ_at(home, s), 0, &o));
  CHECK(o == (uint64_t)me + 1, "%s: occupancy word was %lld at exit (rank %d entered while we held it)",
        what, (long long)o, (int)o - 1);
  return seq;
}

/* Final counter of a slot, read after a barrier. */
static uint64_t final_count(int home, int s) {
  uint64_t r[8];
  CHECK_OK(fh_get(ctx, r, home, rec_at(home, s), 64));
  for (int k = 2; k < 8; k++) CHECK(r[k] == pattern(r[0], k), "final record pattern broken");
  return r[0];
}

/* Take the lock: by fh_lock_try a few times first when `try_first`. */
static int take(fh_lock_t *l, int try_first) {
  if (try_first)
    for (int i = 0; i < 4; i++) {
      int rc = fh_lock_try(l);
      if (rc == FH_OK) return 1;
      CHECK(rc == FH_NOT_READY, "fh_lock_try returned %d (%s)", rc, fh_strerror(rc));
      sched_yield();
    }
  CHECK_OK(fh_lock_acquire(l));
  return 0;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* ---------------- 1 ---------------- */
static void one_lock(long iters) {
  int home = np - 1;
  fh_lock_t *l;
  init_slot(home, 0);
  CHECK_OK(fh_lock_create(ctx, home, &l));
  uint64_t *seqs = malloc(8 * (size_t)iters);
  long by_try = 0;
  for (long i = 0; i < iters; i++) {
    by_try += take(l, rndn(4) == 0);
    seqs[i] = critical(home, 0, "1. one lock");
    CHECK_OK(fh_lock_release(l));
  }
  CHECK_OK(fh_barrier(ctx));
  uint64_t total = (uint64_t)iters * (uint64_t)np;
  uint64_t got = final_count(home, 0);
  CHECK(got == total, "1. counter is %llu after %llu lock-protected increments (lost updates)",
        (unsigned long long)got, (unsigned long long)total);
  /* Our own grants are in increasing order; the largest gap is a fairness figure. */
  long gap = 0;
  for (long i = 1; i < iters; i++) {
    CHECK(seqs[i] > seqs[i - 1], "1. our grants saw counters %llu then %llu",
          (unsigned long long)seqs[i - 1], (unsigned long long)seqs[i]);
    if ((long)(seqs[i] - seqs[i - 1] - 1) > gap) gap = (long)(seqs[i] - seqs[i - 1] - 1);
  }
  uint64_t *all = me == 0 ? malloc(8 * (size_t)total) : NULL;
  MPI_Gather(seqs, (int)iters, MPI_UINT64_T, all, (int)iters, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  long maxgap = 0, tries = 0;
  MPI_Reduce(&gap, &maxgap, 1, MPI_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&by_try, &tries, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  if (me == 0) {
    qsort(all, (size_t)total, 8, cmp_u64);
    for (uint64_t i = 0; i < total; i++)
      CHECK(all[i] == i, "1. the counters seen in the critical section are not 0..%llu: position %llu "
            "holds %llu (two holders saw the same value)", (unsigned long long)total - 1,
            (unsigned long long)i, (unsigned long long)all[i]);
    printf("    1: %llu grants (%ld by fh_lock_try), at most %ld grants to others between two of "
           "one rank's (%d ranks)\n", (unsigned long long)total, tries, maxgap, np);
  }
  free(all);
  free(seqs);
  CHECK_OK(fh_lock_destroy(l));
}

/* ---------------- 2 ---------------- */
static void several_locks(long iters) {
  enum { NL = 3 };
  int homes[NL] = {0, np / 2, np - 1};
  fh_lock_t *l[NL];
  for (int i = 0; i < NL; i++) init_slot(homes[i], 1 + i);
  for (int i = 0; i < NL; i++) CHECK_OK(fh_lock_create(ctx, homes[i], &l[i]));
  long cnt[NL] = {0}, tot[NL];
  for (long it = 0; it < iters; it++) {
    if (rndn(10) < 3) {
      int a = (int)rndn(NL), b = (int)rndn(NL - 1);
      if (b >= a) b++;
      if (a > b) { int t = a; a = b; b = t; }
      take(l[a], 0);
      critical(homes[a], 1 + a, "2. outer lock");
      take(l[b], rndn(2));
      critical(homes[b], 1 + b, "2. nested lock");
      critical(homes[a], 1 + a, "2. outer lock again");
      CHECK_OK(fh_lock_release(l[b]));
      CHECK_OK(fh_lock_release(l[a]));
      cnt[a] += 2;
      cnt[b] += 1;
    } else {
      int a = (int)rndn(NL);
      take(l[a], rndn(4) == 0);
      critical(homes[a], 1 + a, "2. one of three locks");
      CHECK_OK(fh_lock_release(l[a]));
      cnt[a]++;
    }
  }
  CHECK_OK(fh_barrier(ctx));
  MPI_Allreduce(cnt, tot, NL, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  for (int i = 0; i < NL; i++) {
    uint64_t got = final_count(homes[i], 1 + i);
    CHECK(got == (uint64_t)tot[i], "2. lock %d (home %d): counter %llu after %ld protected increments",
          i, homes[i], (unsigned long long)got, tot[i]);
  }
  CHECK_OK(fh_barrier(ctx));
  for (int i = NL - 1; i >= 0; i--) CHECK_OK(fh_lock_destroy(l[i]));
}

/* ---------------- 3 ---------------- */
static void try_semantics(void) {
  int home = np / 2;
  fh_lock_t *l;
  CHECK_OK(fh_lock_create(ctx, home, &l));
  for (int round = 0; round < 10; round++) {
    /* Everyone tries at once: exactly one wins. */
    CHECK_OK(fh_barrier(ctx));
    int rc = fh_lock_try(l);
    CHECK(rc == FH_OK || rc == FH_NOT_READY, "3. fh_lock_try returned %d", rc);
    int won = rc == FH_OK, winners = 0, winner = won ? me : -1, who;
    MPI_Allreduce(&won, &winners, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&winner, &who, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    CHECK(winners == 1, "3. %d ranks won fh_lock_try on a free lock at once", winners);
    /* While it is held, every try fails, the holder's own included. */
    for (int k = 0; k < 3; k++) {
      rc = fh_lock_try(l);
      CHECK(rc == FH_NOT_READY, "3. fh_lock_try while rank %d holds the lock returned %d", who, rc);
    }
    CHECK_OK(fh_barrier(ctx));
    if (won) CHECK_OK(fh_lock_release(l));
    CHECK_OK(fh_barrier(ctx));
    /* Another rank takes it by try; then the others' tries fail. */
    int next = (who + 1 + round) % np;
    if (me == next) CHECK_OK(fh_lock_try(l));
    CHECK_OK(fh_barrier(ctx));
    if (me != next) CHECK_RC(fh_lock_try(l), FH_NOT_READY);
    CHECK_OK(fh_barrier(ctx));
    if (me == next) {
      CHECK_OK(fh_lock_release(l));
      CHECK_RC(fh_lock_release(l), FH_ERR_STATE);
    }
  }
  /* Each rank in turn tries the free lock. */
  for (int r = 0; r < np; r++) {
    CHECK_OK(fh_barrier(ctx));
    if (me == r) {
      CHECK_OK(fh_lock_try(l));
      CHECK_OK(fh_lock_release(l));
    }
  }
  CHECK_OK(fh_barrier(ctx));
  CHECK_OK(fh_lock_destroy(l));
}

/* ---------------- 4 ---------------- */
static void no_starvation(int k) {
  fh_lock_t *l;
  int home = np - 1;
  uint64_t *done = (uint64_t *)(heaps[0] + 128 * 7); /* rank 0's "finished" counter */
  init_slot(home, 4);
  if (me == 0) CHECK_OK(fh_atomic_set_u64(ctx, 0, done, 0));
  CHECK_OK(fh_lock_create(ctx, home, &l));
  long hog = 0;
  if (me == 0) {
    uint64_t d = 0;
    while (d < (uint64_t)np - 1) {
      CHECK_OK(fh_lock_acquire(l));
      critical(home, 4, "4. greedy rank");
      CHECK_OK(fh_lock_release(l));
      hog++;
      CHECK_OK(fh_atomic_fetch_u64(ctx, 0, done, &d));
    }
  } else {
    for (int i = 0; i < k; i++) {
      CHECK_OK(fh_lock_acquire(l));
      critical(home, 4, "4. other rank");
      CHECK_OK(fh_lock_release(l));
      idle_ms(0.2);
    }
    CHECK_OK(fh_atomic_add_u64(ctx, 0, done, 1));
  }
  CHECK_OK(fh_barrier(ctx));
  long total = me == 0 ? hog : k, sum = 0;
  MPI_Allreduce(&total, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  uint64_t got = final_count(home, 4);
  CHECK(got == (uint64_t)sum, "4. counter %llu after %ld protected increments", (unsigned long long)got, sum);
  if (me == 0) printf("    4: the greedy rank got the lock %ld times while %d others got it %d times each\n",
                      hog, np - 1, k);
  CHECK_OK(fh_barrier(ctx));
  CHECK_OK(fh_lock_destroy(l));
}

/* ---------------- 5 ---------------- */
static int arrival_order_once(fh_lock_t *l, uint64_t *ticket, double gap_ms) {
  if (me == 0) CHECK_OK(fh_atomic_set_u64(ctx, 0, ticket, 0));
  if (me == 0) CHECK_OK(fh_lock_acquire(l));
  CHECK_OK(fh_barrier(ctx));
  int64_t pos = -1;
  if (me == 0) {
    idle_ms(gap_ms * (np + 1));
    CHECK_OK(fh_lock_release(l));
  } else {
    idle_ms(gap_ms * me);
    CHECK_OK(fh_lock_acquire(l));
    uint64_t t;
    CHECK_OK(fh_atomic_fetch_add_u64(ctx, 0, ticket, 1, &t));
    pos = (int64_t)t;
    CHECK_OK(fh_lock_release(l));
  }
  CHECK_OK(fh_barrier(ctx));
  int64_t *all = malloc(8 * (size_t)np);
  MPI_Allgather(&pos, 1, MPI_INT64_T, all, 1, MPI_INT64_T, MPI_COMM_WORLD);
  int ok = 1;
  for (int r = 1; r < np; r++) ok &= all[r] == r - 1;
  if (!ok && me == 0) {
    printf("    5: grant order differs from arrival order:");
    for (int r = 1; r < np; r++) printf(" rank %d got #%lld", r, (long long)all[r]);
    printf("\n");
  }
  free(all);
  return ok;
}

static void arrival_order(void) {
  fh_lock_t *l;
  CHECK_OK(fh_lock_create(ctx, np - 1, &l));
  uint64_t *ticket = (uint64_t *)(heaps[0] + 128 * 7 + 8);
  int ok = 0, attempts = 0;
  while (!ok && attempts < 3) {
    ok = arrival_order_once(l, ticket, 40.0 * (attempts + 1));
    attempts++;
  }
  CHECK(ok, "5. in 3 attempts (ranks arriving 40, 80 and 120 ms apart) the grants never followed "
        "the arrival order: the queue is not FIFO");
  if (me == 0) printf("    5: grants in arrival order (attempt %d)\n", attempts);
  CHECK_OK(fh_lock_destroy(l));
}

/* ---------------- 6 ---------------- */
static void check_last_error(const char *what) {
  char msg[256];
  fh_last_error(msg, sizeof msg);
  CHECK(msg[0] != 0, "no fh_last_error message after %s", what);
}

/* A short mutual-exclusion run on slot 5 with a new lock: the context works. */
static void quick_use(int home, const char *what) {
  fh_lock_t *l;
  init_slot(home, 5);
  CHECK_OK(fh_lock_create(ctx, home, &l));
  for (int i = 0; i < 5; i++) {
    CHECK_OK(fh_lock_acquire(l));
    critical(home, 5, what);
    CHECK_OK(fh_lock_release(l));
  }
  CHECK_OK(fh_barrier(ctx));
  CHECK(final_count(home, 5) == 5 * (uint64_t)np, "%s: counter %llu after %d increments", what,
        (unsigned long long)final_count(home, 5), 5 * np);
  CHECK_OK(fh_barrier(ctx));
  CHECK_OK(fh_lock_destroy(l));
}

static void errors(void) {
  fh_lock_t *l, *sentinel = (fh_lock_t *)(uintptr_t)0x1234;
  /* NULL handles and pointers (local checks, no collective involved). */
  CHECK_RC(fh_lock_acquire(NULL), FH_ERR_INVALID_ARG);
  check_last_error("fh_lock_acquire(NULL)");
  CHECK_RC(fh_lock_try(NULL), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_lock_release(NULL), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_lock_destroy(NULL), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_lock_create(ctx, 0, NULL), FH_ERR_INVALID_ARG);
  l = sentinel;
  CHECK_RC(fh_lock_create(NULL, 0, &l), FH_ERR_INVALID_ARG);
  CHECK(l == sentinel, "failed fh_lock_create wrote lock_out");
  /* A home that is no rank (every rank passes the same one). */
  CHECK_RC(fh_lock_create(ctx, np, &l), FH_ERR_BAD_RANK);
  CHECK_RC(fh_lock_create(ctx, -1, &l), FH_ERR_BAD_RANK);
  CHECK(l == sentinel, "failed fh_lock_create wrote lock_out");
  /* A home that is no rank on the last rank only: it gets FH_ERR_BAD_RANK and the
   * others FH_ERR_INVALID_ARG (the ranks disagree), and the next create pairs up
   * (the bad rank once left at once: the others then created a lock it did not
   * have, or paired its next create with this one, and hung). */
  if (np > 1) {
    int rc = fh_lock_create(ctx, me == np - 1 ? -1 : 0, &l);
    CHECK(rc == (me == np - 1 ? FH_ERR_BAD_RANK : FH_ERR_INVALID_ARG),
          "a home of -1 on the last rank only gave %s", fh_strerror(rc));
    CHECK(l == sentinel, "failed fh_lock_create wrote lock_out");
  }

  /* Release without holding; twice. */
  CHECK_OK(fh_lock_create(ctx, 0, &l));
  CHECK_RC(fh_lock_release(l), FH_ERR_STATE);
  check_last_error("fh_lock_release without holding");
  CHECK_OK(fh_barrier(ctx));
  CHECK_OK(fh_lock_acquire(l));
  CHECK_OK(fh_lock_release(l));
  CHECK_RC(fh_lock_release(l), FH_ERR_STATE);
  CHECK_OK(fh_barrier(ctx));
  /* Destroy while holding (each rank in its own turn, concurrently): refused, the
   * handle still works. */
  CHECK_OK(fh_lock_acquire(l));
  CHECK_RC(fh_lock_destroy(l), FH_ERR_STATE);
  check_last_error("fh_lock_destroy while holding");
  /* Not recursive: acquiring it again is refused at once (it used to wait for
   * ever), a try says it is held, and the lock is still held. */
  CHECK_RC(fh_lock_try(l), FH_NOT_READY);
  CHECK_RC(fh_lock_acquire(l), FH_ERR_STATE);
  check_last_error("fh_lock_acquire of a lock this thread holds");
  CHECK_OK(fh_lock_release(l));
  CHECK_RC(fh_lock_release(l), FH_ERR_STATE);
  CHECK_OK(fh_barrier(ctx));
  CHECK_OK(fh_lock_destroy(l));
  /* Use after destroy. */
  CHECK_RC(fh_lock_acquire(l), FH_ERR_STATE);
  CHECK_RC(fh_lock_try(l), FH_ERR_STATE);
  CHECK_RC(fh_lock_release(l), FH_ERR_STATE);
  CHECK_RC(fh_lock_destroy(l), FH_ERR_STATE);
  check_last_error("fh_lock_destroy after destroy");

  /* Homes that differ between ranks: refused on every rank; lock_out untouched. */
  for (int round = 0; round < 2; round++) {
    l = sentinel;
    int home = round == 0 ? me % 2 : (me == np - 1 ? 0 : np - 1);
    int rc = fh_lock_create(ctx, home, &l);
    CHECK(rc == FH_ERR_INVALID_ARG, "fh_lock_create with homes differing between ranks returned %d (%s) "
          "on rank %d (home %d)", rc, fh_strerror(rc), me, home);
    CHECK(l == sentinel, "failed fh_lock_create wrote lock_out");
    CHECK_OK(fh_barrier(ctx));
    quick_use(round == 0 ? np - 1 : 0, "6. after a refused create");
  }

  /* 128 locks at once; the 129th is refused; a freed slot is reusable. */
  fh_lock_t *many[LOCK_LIMIT];
  for (int i = 0; i < LOCK_LIMIT; i++) CHECK_OK(fh_lock_create(ctx, i % np, &many[i]));
  l = sentinel;
  CHECK_RC(fh_lock_create(ctx, 0, &l), FH_ERR_NO_RESOURCE);
  CHECK(l == sentinel, "failed fh_lock_create wrote lock_out");
  /* All of them usable at once: take every one, then release. */
  for (int i = 0; i < LOCK_LIMIT; i += 9) CHECK_OK(fh_lock_acquire(many[i]));
  for (int i = 0; i < LOCK_LIMIT; i += 9) CHECK_OK(fh_lock_release(many[i]));
  CHECK_OK(fh_barrier(ctx));
  CHECK_OK(fh_lock_destroy(many[77]));
  CHECK_OK(fh_lock_create(ctx, np - 1, &many[77]));
  CHECK_OK(fh_lock_acquire(many[77]));
  CHECK_OK(fh_lock_release(many[77]));
  CHECK_OK(fh_barrier(ctx));
  for (int i = LOCK_LIMIT - 1; i >= 0; i--) CHECK_OK(fh_lock_destroy(many[i]));
  quick_use(np / 2, "6. after 128 locks");
}

int main(int argc, char **argv) {
  int provided; /* FH_PROGRESS=thread needs MPI_THREAD_MULTIPLE (else it polls only) */
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ctx = fh_test_init(&me, &np);
  watchdog_init(ctx, 44);
  rng = mix64(0x10C40000ULL + (uint64_t)me);
  if (np < 2) {
    fprintf(stderr, "test_lock needs at least 2 ranks\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  long iters = 16000 / np;
  if (iters < 500) iters = 500;
  if (getenv("FH_TEST_LOCK_ITERS")) iters = atol(getenv("FH_TEST_LOCK_ITERS"));
  if (me == 0) {
    printf("lock: %d ranks, %ld acquisitions per rank in phase 1\n", np, iters);
    fflush(stdout);
  }
  char *heap = fh_malloc(ctx, 128 * NSLOTS);
  CHECK(heap != NULL, "fh_malloc failed");
  memset(heap, 0, 128 * NSLOTS);
  heaps = malloc(sizeof(char *) * (size_t)np);
  exchange_ptrs(heap, (void **)heaps, MPI_COMM_WORLD);
  CHECK_OK(fh_barrier(ctx));

  begin_phase("1. mutual exclusion, one lock", 120);
  one_lock(iters);
  end_phase();

  begin_phase("2. three locks, homes 0, np/2, np-1, nested", 120);
  several_locks(iters / 2);
  end_phase();

  begin_phase("3. fh_lock_try", 60);
  try_semantics();
  end_phase();

  begin_phase("4. no starvation next to a greedy rank", 60);
  no_starvation(20);
  end_phase();

  begin_phase("5. grants in arrival order", 60);
  arrival_order();
  end_phase();

  begin_phase("6. errors", 60);
  errors();
  end_phase();

  alarm(0);
  fh_free(ctx, heap);
  CHECK_OK(fh_finalize(ctx));
  TEST_PASS("lock");
  free(heaps);
  MPI_Finalize();
  return 0;
}
