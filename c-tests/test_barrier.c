/* Barriers (seed 004 ch. 3): fh_barrier and the split-phase fh_barrier_notify /
 * fh_barrier_wait / fh_barrier_try with named ids and FH_BARRIER_ANONYMOUS, on the
 * algorithm FH_BARRIER selects (dissemination by default, tree, mpi).
 *
 * "No rank leaves early" is checked on every tracked barrier: before entering barrier
 * number k each rank stores k in its own arrival word (fh_malloc memory, through
 * fh_atomic_set_u64 on its own rank) and adds 1 to a counter at rank 0
 * (fh_atomic_fetch_add_u64). After leaving, every rank reads every arrival word
 * (fh_atomic_fetch_u64): each must be k or k+1 (a rank can be at most one barrier
 * ahead), and the counter must lie in [k*N, k*N + N-1].
 *
 *  a. skewed fh_barrier: ranks sleep 0..2 ms, one "late" rank (rotating) 2..12 ms;
 *  b. skewed split-phase: notify(id), random computation, wait or a try loop (with
 *     computation between the tries); ids run over negative and large values;
 *  c. back to back: 2000 tracked fh_barrier calls, then 1000 untracked notify/wait
 *     pairs (alternating named/anonymous) and 500 fh_barrier calls, then a tracked one;
 *  d. try must say FH_NOT_READY while a rank is missing: the late rank L notifies only
 *     after every other rank notified, saw fh_barrier_try return FH_NOT_READY and
 *     told L so (an atomic add at L); then the others finish with a try loop;
 *  e. named and anonymous mixed (all anonymous, exactly one named, random mixes; ids
 *     0, -1, INT64_MIN, INT64_MAX, ...): always FH_OK;
 *  f. mismatch: one rank with another id, every rank a different id, two named ranks
 *     disagreeing among anonymous ones, ids differing only in bit 63 or bit 32 or
 *     0 vs -1, detected by wait or by a try loop: FH_ERR_BARRIER_MISMATCH on EVERY
 *     rank (anonymous ones too), the barrier still synchronised (tracked), and the
 *     next barriers work (several mismatches back to back too);
 *  g. wait/try with an id or flags different from this rank's own notify: mismatch on
 *     that rank only (the others get FH_OK), and the barrier still synchronised;
 *  h. state and argument errors: wait/try without notify and notify twice give
 *     FH_ERR_STATE (the second notify changes nothing: the first id still matches),
 *     fh_barrier during a split-phase barrier gives FH_ERR_STATE, bad flags give
 *     FH_ERR_INVALID_ARG (and start nothing), a NULL context FH_ERR_INVALID_ARG;
 *  i. two contexts at once: a second context on a dup of MPI_COMM_WORLD, with the
 *     next algorithm (dissemination -> tree -> mpi -> dissemination, via setenv
 *     before its fh_init); each rank notifies A and B in its own random order, waits
 *     in its own random order, with skew; a mismatch on B leaves A's barrier intact;
 *     a blocking fh_barrier on B inside A's split phase; both tracked.
 *
 * A watchdog (alarm) names the phase if one hangs.
 * Run: mpirun -np N test_barrier (N >= 1; CI: 2, 4, 8, 5; FH_BARRIER=tree|mpi). */
#include "common.h"
#include <sched.h>
#include <time.h>
#include <unistd.h>

#define ANON FH_BARRIER_ANONYMOUS

static fh_ctx_t *ctx;
static int me, np;
static uint64_t rng; /* per-rank: sleeps, computation, per-rank choices */

/* ---------------- helpers ---------------- */
static unsigned rnd(unsigned n) { return (unsigned)(rng_next(&rng) % n); }
static void sleep_us(unsigned us) {
  struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000L};
  nanosleep(&ts, NULL);
}
static volatile uint64_t spin_sink;
static void compute(unsigned iters) {
  for (unsigned i = 0; i < iters; i++) spin_sink += i * 2654435761u;
}
/* Same value on every rank for iteration `it` of a phase (shared choices). */
static uint64_t shared_rand(uint64_t phase_key, uint64_t it) {
  uint64_t s = (phase_key * 0x9E3779B97F4A7C15ULL) ^ (it + 1) * 0xBF58476D1CE4E5B9ULL;
  if (s == 0) s = 1;
  rng_next(&s);
  return rng_next(&s);
}

/* ---------------- arrival tracking ---------------- */
typedef struct {
  fh_ctx_t *c;
  int me, np;
  uint64_t *mine;    /* words[0]: arrival (epoch) word; [1]: counter (rank 0's used);
                      * [2]: "go" counter (phase d) */
  uint64_t **words;  /* every rank's block */
  uint64_t seq;      /* tracked barriers so far */
} track_t;

static void track_init(track_t *t, fh_ctx_t *c, MPI_Comm comm) {
  t->c = c;
  t->me = fh_rank(c);
  t->np = fh_size(c);
  t->mine = fh_malloc(c, 64);
  CHECK(t->mine != NULL, "fh_malloc(64) failed");
  for (int i = 0; i < 3; i++) CHECK_OK(fh_atomic_set_u64(c, t->me, &t->mine[i], 0));
  t->words = calloc((size_t)t->np, sizeof *t->words);
  CHECK(t->words != NULL, "calloc");
  exchange_ptrs(t->mine, (void **)t->words, comm);
  t->seq = 0;
  CHECK_OK(fh_barrier(c)); /* everyone's words are zero before anyone arrives */
}
static void track_free(track_t *t) {
  CHECK_OK(fh_barrier(t->c));
  fh_free(t->c, t->mine);
  free(t->words);
}
/* Call right before entering a tracked barrier. */
static void arrive(track_t *t) {
  t->seq++;
  uint64_t old;
  CHECK_OK(fh_atomic_set_u64(t->c, t->me, &t->mine[0], t->seq));
  CHECK_OK(fh_atomic_fetch_add_u64(t->c, 0, &t->words[0][1], 1, &old));
}
/* Call right after leaving it (whatever it returned). */
static void verify(track_t *t, const char *what) {
  uint64_t k = t->seq;
  for (int j = 0; j < t->np; j++) {
    uint64_t v;
    CHECK_OK(fh_atomic_fetch_u64(t->c, j, &t->words[j][0], &v));
    CHECK(v == k || v == k + 1,
          "%s: left tracked barrier %llu but rank %d's arrival word is %llu (rank %d left early)",
          what, (unsigned long long)k, j, (unsigned long long)v, t->me);
  }
  uint64_t cnt;
  CHECK_OK(fh_atomic_fetch_u64(t->c, 0, &t->words[0][1], &cnt));
  uint64_t n = (uint64_t)t->np;
  CHECK(cnt >= k * n && cnt <= k * n + n - 1,
        "%s: after tracked barrier %llu the arrival counter is %llu, expected %llu..%llu",
        what, (unsigned long long)k, (unsigned long long)cnt, (unsigned long long)(k * n),
        (unsigned long long)(k * n + n - 1));
}

/* Wait for the split-phase barrier with a try loop, computing between tries.
 * Returns the final status (never FH_NOT_READY); *tries_out counts NOT_READYs. */
static int try_loop(fh_ctx_t *c, int64_t id, int flags, unsigned work, long *tries_out) {
  long tries = 0;
  for (;;) {
    int rc = fh_barrier_try(c, id, flags);
    if (rc != FH_NOT_READY) {
      if (tries_out) *tries_out += tries;
      return rc;
    }
    tries++;
    compute(work);
    if (tries % 64 == 0) sched_yield();
  }
}

/* A tracked barrier that must succeed, by any of the three ways. */
static void tracked_ok(track_t *t, int how, const char *what) {
  arrive(t);
  switch (how % 3) {
  case 0: CHECK_OK(fh_barrier(t->c)); break;
  case 1:
    CHECK_OK(fh_barrier_notify(t->c, 77, 0));
    CHECK_OK(fh_barrier_wait(t->c, 77, 0));
    break;
  default:
    CHECK_OK(fh_barrier_notify(t->c, 0, ANON));
    CHECK_RC(try_loop(t->c, 0, ANON, 50, NULL), FH_OK);
    break;
  }
  verify(t, what);
}

/* Skew: most ranks sleep 0..2 ms, the late one 2..12 ms; sometimes nobody sleeps. */
static void skew(int late, int it) {
  if (it % 5 == 4) return;
  if (me == late) sleep_us(2000 + rnd(10000));
  else if (rnd(3) != 0) sleep_us(rnd(2000));
}

static track_t T; /* main context */

/* ---------------- a, b, c ---------------- */
static void phase_skew_blocking(void) {
  begin_phase("a. skewed fh_barrier", 60);
  for (int it = 0; it < 150; it++) {
    skew(it % np, it);
    arrive(&T);
    CHECK_OK(fh_barrier(ctx));
    verify(&T, "skewed fh_barrier");
  }
  end_phase();
}

static void phase_skew_split(void) {
  begin_phase("b. skewed split-phase (wait / try loop)", 60);
  long tries = 0;
  for (int it = 0; it < 150; it++) {
    int64_t id = (int64_t)(it * 7919) - 500;
    if (it % 10 == 3) id = INT64_MIN + it;
    if (it % 10 == 7) id = INT64_MAX - it;
    skew((it * 3 + 1) % np, it);
    arrive(&T);
    CHECK_OK(fh_barrier_notify(ctx, id, 0));
    compute(rnd(4) == 0 ? rnd(200000) : rnd(2000));
    if (it % 2 == 0) CHECK_OK(fh_barrier_wait(ctx, id, 0));
    else CHECK_RC(try_loop(ctx, id, 0, 100 + rnd(1000), &tries), FH_OK);
    verify(&T, "skewed split-phase");
  }
  end_phase();
  if (me == 0) printf("    (rank 0 saw %ld FH_NOT_READY tries)\n", tries);
}

static void phase_back_to_back(void) {
  begin_phase("c. back to back: 2000 tracked fh_barrier", 120);
  for (int it = 0; it < 2000; it++) {
    arrive(&T);
    CHECK_OK(fh_barrier(ctx));
    verify(&T, "back-to-back fh_barrier");
  }
  end_phase();
  begin_phase("c. back to back: 1000 notify/wait + 500 fh_barrier", 120);
  for (int it = 0; it < 1000; it++) {
    if (it % 2) {
      CHECK_OK(fh_barrier_notify(ctx, it, 0));
      CHECK_OK(fh_barrier_wait(ctx, it, 0));
    } else {
      CHECK_OK(fh_barrier_notify(ctx, 0, ANON));
      CHECK_OK(fh_barrier_wait(ctx, 0, ANON));
    }
  }
  for (int it = 0; it < 500; it++) CHECK_OK(fh_barrier(ctx));
  for (int it = 0; it < 3; it++) tracked_ok(&T, it, "after back-to-back");
  end_phase();
}

/* ---------------- d ---------------- */
static void phase_try_not_ready(void) {
  begin_phase("d. try is FH_NOT_READY while a rank is missing", 60);
  long tries = 0;
  for (int it = 0; it < 60; it++) {
    int late = it % np;
    int64_t id = 1000 + it;
    int flags = (it % 3 == 2) ? ANON : 0;
    if (np == 1) {
      arrive(&T);
      CHECK_OK(fh_barrier_notify(ctx, id, flags));
      CHECK_RC(try_loop(ctx, id, flags, 10, &tries), FH_OK);
      verify(&T, "try (np 1)");
      continue;
    }
    if (me == late) {
      /* Wait until every other rank reported a NOT_READY try. */
      uint64_t go = 0;
      while (go != (uint64_t)(np - 1)) {
        CHECK(go < (uint64_t)np, "go counter %llu > %d", (unsigned long long)go, np - 1);
        sched_yield();
        CHECK_OK(fh_atomic_fetch_u64(ctx, me, &T.mine[2], &go));
      }
      CHECK_OK(fh_atomic_set_u64(ctx, me, &T.mine[2], 0));
      arrive(&T);
      CHECK_OK(fh_barrier_notify(ctx, id, flags));
      if (it % 2) CHECK_OK(fh_barrier_wait(ctx, id, flags));
      else CHECK_RC(try_loop(ctx, id, flags, 200, &tries), FH_OK);
    } else {
      arrive(&T);
      CHECK_OK(fh_barrier_notify(ctx, id, flags));
      for (int k = 0; k < 3; k++) {
        CHECK_RC(fh_barrier_try(ctx, id, flags), FH_NOT_READY);
        compute(rnd(1000));
      }
      CHECK_OK(fh_atomic_add_u64(ctx, late, &T.words[late][2], 1));
      CHECK_RC(try_loop(ctx, id, flags, 50 + rnd(500), &tries), FH_OK);
    }
    verify(&T, "try while a rank is missing");
  }
  end_phase();
}

/* ---------------- e ---------------- */
static const int64_t special_ids[] = {0, -1, INT64_MIN, INT64_MAX, 1, 42, -42, (int64_t)1 << 32,
                                      (int64_t)0x7fffffff, -(int64_t)0x80000000LL};
#define N_SPECIAL ((int)(sizeof special_ids / sizeof special_ids[0]))

static void phase_named_anonymous(void) {
  begin_phase("e. named and anonymous mixed", 60);
  for (int it = 0; it < 120; it++) {
    int64_t id = special_ids[it % N_SPECIAL];
    uint64_t pat = shared_rand(5, (uint64_t)it);
    int anon;
    switch (it % 6) {
    case 0: anon = 1; break;                   /* all anonymous */
    case 1: anon = me != (int)(pat % (uint64_t)np); break; /* exactly one named */
    case 2: anon = 0; break;                   /* all named */
    default: anon = (int)((pat >> (me % 60)) & 1); break;  /* random mix */
    }
    int flags = anon ? ANON : 0;
    /* An anonymous rank's id is ignored: pass garbage. */
    int64_t my_id = anon ? (int64_t)rng_next(&rng) : id;
    if (it % 4 == 1) skew(it % np, it);
    arrive(&T);
    CHECK_OK(fh_barrier_notify(ctx, my_id, flags));
    if (it % 3 == 0) CHECK_RC(try_loop(ctx, my_id, flags, 100, NULL), FH_OK);
    else CHECK_OK(fh_barrier_wait(ctx, my_id, flags));
    verify(&T, "named/anonymous mix");
  }
  end_phase();
}

/* ---------------- f ---------------- */
/* One mismatch case: this rank's (id, flags), detected by wait (by_try 0) or a try
 * loop; must be FH_ERR_BARRIER_MISMATCH here. */
static void mismatch_once(int64_t id, int flags, int by_try, const char *what) {
  arrive(&T);
  CHECK_OK(fh_barrier_notify(ctx, id, flags));
  int rc = by_try ? try_loop(ctx, id, flags, 100, NULL) : fh_barrier_wait(ctx, id, flags);
  if (rc != FH_ERR_BARRIER_MISMATCH)
    FAILF("%s: rank %d (id %lld flags %d) got %d (%s), expected FH_ERR_BARRIER_MISMATCH", what,
          me, (long long)id, flags, rc, fh_strerror(rc));
  verify(&T, what);
}

static void phase_mismatch(void) {
  if (np < 2) return;
  begin_phase("f. mismatch on every rank, next barrier works", 90);
  for (int it = 0; it < 4 * np; it++) {
    int odd = it % np;
    int by_try = (it / np) % 2;
    if (it % 3 == 1) skew((it + 1) % np, it);
    /* one rank with another id */
    mismatch_once(me == odd ? 101 : 100, 0, by_try, "one rank with another id");
    tracked_ok(&T, it, "after mismatch (one rank)");
    /* every rank a different id */
    mismatch_once(me, 0, !by_try, "every rank a different id");
    /* two named ranks disagree, the others anonymous (they see the mismatch too) */
    int a = odd, b = (odd + 1 + it / np) % np;
    if (b == a) b = (a + 1) % np;
    if (me == a) mismatch_once(5, 0, by_try, "two named disagree among anonymous");
    else if (me == b) mismatch_once(6, 0, by_try, "two named disagree among anonymous");
    else mismatch_once(12345, ANON, by_try, "two named disagree (anonymous rank)");
    tracked_ok(&T, it + 1, "after mismatch (two named)");
  }
  /* ids that differ in one bit only, or 0 vs -1, or signed extremes */
  static const int64_t pairs[][2] = {
      {5, (int64_t)(0x8000000000000005ULL)}, {1, (int64_t)1 << 32}, {0, -1},
      {INT64_MIN, INT64_MAX}, {0, 1}, {-2, -3}};
  for (int p = 0; p < (int)(sizeof pairs / sizeof pairs[0]); p++) {
    for (int odd = 0; odd < np; odd += (np > 4 ? 3 : 1)) {
      int64_t id = me == odd ? pairs[p][1] : pairs[p][0];
      mismatch_once(id, 0, p % 2, "ids differing in few bits");
    }
    /* and the same ids matching work */
    arrive(&T);
    CHECK_OK(fh_barrier_notify(ctx, pairs[p][1], 0));
    CHECK_OK(fh_barrier_wait(ctx, pairs[p][1], 0));
    verify(&T, "matching after few-bit mismatch");
  }
  /* several mismatches back to back (both epoch parities), then normal barriers */
  for (int it = 0; it < 7; it++) mismatch_once(me * 1000 + it, 0, it % 2, "back-to-back mismatches");
  for (int it = 0; it < 6; it++) tracked_ok(&T, it, "after back-to-back mismatches");
  end_phase();
}

/* ---------------- g ---------------- */
static void phase_wait_other_id(void) {
  begin_phase("g. wait/try with an id other than this rank's notify", 60);
  for (int it = 0; it < 3 * np; it++) {
    int odd = it % np;
    int by_try = (it / np) == 1;
    int variant = it / np; /* 0: other id, 1: other id by try, 2: flags differ */
    int64_t id = 300 + it;
    int nflags = 0, wflags = 0;
    int64_t wid = id;
    if (me == odd) {
      if (variant < 2) wid = id + 1;
      else if (it % 2) { nflags = 0; wflags = ANON; }       /* named notify, anonymous wait */
      else { nflags = ANON; wflags = 0; }                   /* anonymous notify, named wait */
    }
    arrive(&T);
    CHECK_OK(fh_barrier_notify(ctx, id, nflags));
    int rc = by_try ? try_loop(ctx, wid, wflags, 100, NULL) : fh_barrier_wait(ctx, wid, wflags);
    int want = me == odd ? FH_ERR_BARRIER_MISMATCH : FH_OK;
    if (rc != want)
      FAILF("wait with another id (variant %d, odd rank %d): got %d (%s), expected %d", variant,
            odd, rc, fh_strerror(rc), want);
    verify(&T, "wait with another id");
    tracked_ok(&T, it, "after wait with another id");
  }
  end_phase();
}

/* ---------------- h ---------------- */
static void phase_errors(void) {
  begin_phase("h. state and argument errors", 60);
  /* wait / try without notify */
  CHECK_RC(fh_barrier_wait(ctx, 0, ANON), FH_ERR_STATE);
  CHECK_RC(fh_barrier_wait(ctx, 9, 0), FH_ERR_STATE);
  CHECK_RC(fh_barrier_try(ctx, 9, 0), FH_ERR_STATE);
  /* notify twice: the second fails and changes nothing */
  arrive(&T);
  CHECK_OK(fh_barrier_notify(ctx, 9, 0));
  CHECK_RC(fh_barrier_notify(ctx, 10, 0), FH_ERR_STATE);
  CHECK_RC(fh_barrier_notify(ctx, 0, ANON), FH_ERR_STATE);
  CHECK_RC(fh_barrier(ctx), FH_ERR_STATE); /* blocking barrier inside a split phase */
  CHECK_OK(fh_barrier_wait(ctx, 9, 0));
  verify(&T, "notify twice");
  /* and it is idle again */
  CHECK_RC(fh_barrier_wait(ctx, 9, 0), FH_ERR_STATE);
  CHECK_RC(fh_barrier_try(ctx, 0, ANON), FH_ERR_STATE);
  /* bad flags start nothing */
  static const int bad_flags[] = {2, 3, -1, 0x100, ANON | 4, INT32_MIN};
  for (int i = 0; i < (int)(sizeof bad_flags / sizeof bad_flags[0]); i++) {
    CHECK_RC(fh_barrier_notify(ctx, 1, bad_flags[i]), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_barrier_wait(ctx, 1, 0), FH_ERR_STATE); /* still idle */
  }
  /* bad flags on wait/try of a live barrier: refused, the barrier stays live */
  arrive(&T);
  CHECK_OK(fh_barrier_notify(ctx, 11, 0));
  for (int i = 0; i < (int)(sizeof bad_flags / sizeof bad_flags[0]); i++) {
    CHECK_RC(fh_barrier_wait(ctx, 11, bad_flags[i]), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_barrier_try(ctx, 11, bad_flags[i]), FH_ERR_INVALID_ARG);
  }
  CHECK_RC(fh_barrier_notify(ctx, 11, 0), FH_ERR_STATE);
  CHECK_OK(fh_barrier_wait(ctx, 11, 0));
  verify(&T, "bad flags on a live barrier");
  /* NULL context */
  CHECK_RC(fh_barrier(NULL), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_barrier_notify(NULL, 0, ANON), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_barrier_wait(NULL, 0, ANON), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_barrier_try(NULL, 0, ANON), FH_ERR_INVALID_ARG);
  for (int it = 0; it < 3; it++) tracked_ok(&T, it, "after errors");
  end_phase();
}

/* ---------------- i ---------------- */
static const char *algo_after(const char *a) {
  if (a == NULL || strcmp(a, "dissemination") == 0 || a[0] == '\0') return "tree";
  if (strcmp(a, "tree") == 0) return "mpi";
  return "dissemination";
}

static void phase_two_contexts(void) {
  begin_phase("i. barriers on two contexts at once", 60);
  const char *env = getenv("FH_BARRIER");
  char *saved = env ? strdup(env) : NULL;
  const char *algo_b = algo_after(saved);
  CHECK(setenv("FH_BARRIER", algo_b, 1) == 0, "setenv");
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  fh_ctx_t *cb = NULL;
  CHECK_OK(fh_init(dup, NULL, &cb));
  if (saved) setenv("FH_BARRIER", saved, 1);
  else unsetenv("FH_BARRIER");
  track_t B;
  track_init(&B, cb, dup);

  set_phase("i. two contexts: notify/wait in random orders");
  for (int it = 0; it < 120; it++) {
    int64_t ida = 2 * it, idb = -2 * it - 1;
    int fa = (it % 4 == 1) ? ANON : 0, fb = (it % 4 == 2) ? ANON : 0;
    int notify_b_first = (int)rnd(2), wait_a_first = (int)rnd(2);
    if (it % 8 == 0) { notify_b_first = 0; wait_a_first = 0; } /* A, B, wait B, wait A */
    skew(it % np, it);
    arrive(&T);
    arrive(&B);
    if (notify_b_first) CHECK_OK(fh_barrier_notify(cb, idb, fb));
    CHECK_OK(fh_barrier_notify(ctx, ida, fa));
    if (rnd(2)) sleep_us(rnd(1500));
    if (!notify_b_first) CHECK_OK(fh_barrier_notify(cb, idb, fb));
    compute(rnd(20000));
    fh_test_iter = it;
    if (wait_a_first) {
      fh_test_step = it % 3 ? "first wait A" : "first try loop A";
      if (it % 3) CHECK_OK(fh_barrier_wait(ctx, ida, fa));
      else CHECK_RC(try_loop(ctx, ida, fa, 100, NULL), FH_OK);
      verify(&T, "two contexts (A)");
      fh_test_step = "second wait B";
      CHECK_OK(fh_barrier_wait(cb, idb, fb));
      verify(&B, "two contexts (B)");
    } else {
      fh_test_step = it % 3 ? "first wait B" : "first try loop B";
      if (it % 3) CHECK_OK(fh_barrier_wait(cb, idb, fb));
      else CHECK_RC(try_loop(cb, idb, fb, 100, NULL), FH_OK);
      verify(&B, "two contexts (B)");
      fh_test_step = "second wait A";
      CHECK_OK(fh_barrier_wait(ctx, ida, fa));
      verify(&T, "two contexts (A)");
    }
    fh_test_step = "";
  }
  /* Both pending at once, completed by alternating tries. */
  set_phase("i. two contexts: alternating tries");
  for (int it = 0; it < 40; it++) {
    skew((it + 2) % np, it);
    arrive(&T);
    arrive(&B);
    CHECK_OK(fh_barrier_notify(ctx, it, 0));
    CHECK_OK(fh_barrier_notify(cb, it, 0));
    int done_a = 0, done_b = 0;
    while (!done_a || !done_b) {
      if (!done_a) {
        int rc = fh_barrier_try(ctx, it, 0);
        if (rc == FH_OK) { done_a = 1; verify(&T, "alternating tries (A)"); }
        else CHECK_RC(rc, FH_NOT_READY);
      }
      if (!done_b) {
        int rc = fh_barrier_try(cb, it, 0);
        if (rc == FH_OK) { done_b = 1; verify(&B, "alternating tries (B)"); }
        else CHECK_RC(rc, FH_NOT_READY);
      }
      sched_yield();
    }
  }
  if (np >= 2) {
    /* A mismatch on B does not disturb A's barrier in progress. */
    set_phase("i. two contexts: mismatch on B during A");
    for (int it = 0; it < 10; it++) {
      arrive(&T);
      CHECK_OK(fh_barrier_notify(ctx, 500 + it, 0));
      arrive(&B);
      CHECK_OK(fh_barrier_notify(cb, me == it % np ? 1 : 2, 0));
      CHECK_RC(fh_barrier_wait(cb, me == it % np ? 1 : 2, 0), FH_ERR_BARRIER_MISMATCH);
      verify(&B, "mismatch on B");
      CHECK_OK(fh_barrier_wait(ctx, 500 + it, 0));
      verify(&T, "A during a mismatch on B");
    }
  }
  /* Blocking barriers on B inside A's split phase, and the other way round. */
  set_phase("i. two contexts: blocking barrier inside the other's split phase");
  for (int it = 0; it < 30; it++) {
    skew(it % np, it);
    arrive(&T);
    CHECK_OK(fh_barrier_notify(ctx, 0, ANON));
    arrive(&B);
    CHECK_OK(fh_barrier(cb));
    verify(&B, "fh_barrier on B inside A's split phase");
    CHECK_OK(fh_barrier_wait(ctx, 0, ANON));
    verify(&T, "A around a barrier on B");
    arrive(&B);
    CHECK_OK(fh_barrier_notify(cb, 3, 0));
    arrive(&T);
    CHECK_OK(fh_barrier(ctx));
    verify(&T, "fh_barrier on A inside B's split phase");
    CHECK_OK(fh_barrier_wait(cb, 3, 0));
    verify(&B, "B around a barrier on A");
  }
  track_free(&B);
  CHECK_OK(fh_finalize(cb));
  MPI_Comm_free(&dup);
  /* A still works after B is gone. */
  for (int it = 0; it < 3; it++) tracked_ok(&T, it, "after finalizing B");
  set_phase("i. barriers on two contexts at once");
  end_phase();
  if (me == 0) printf("    (context A: FH_BARRIER=%s, context B: %s)\n", saved ? saved : "(default)", algo_b);
  free(saved);
}

/* ---------------- main ---------------- */
int main(int argc, char **argv) {
  int provided; /* MULTIPLE, so the suite also runs with FH_PROGRESS=thread */
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ctx = fh_test_init(&me, &np);
  rng = 0x5DEECE66DULL * (uint64_t)(me + 1) + (uint64_t)time(NULL);
  if (rng == 0) rng = 1;
  watchdog_init(ctx, 52);
  track_init(&T, ctx, MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  if (me == 0) {
    const char *a = getenv("FH_BARRIER");
    printf("test_barrier: %d ranks, FH_BARRIER=%s\n", np, a ? a : "(default)");
  }

  phase_skew_blocking();
  phase_skew_split();
  phase_back_to_back();
  phase_try_not_ready();
  phase_named_anonymous();
  phase_mismatch();
  phase_wait_other_id();
  phase_errors();
  phase_two_contexts();

  track_free(&T);
  if (me == 0) printf("  total %.2f s\n", MPI_Wtime() - t0);
  CHECK_OK(fh_finalize(ctx));
  TEST_PASS("test_barrier");
  MPI_Finalize();
  return 0;
}
