/* Remote atomics (issue 6, part 1): atomicity between *different* operations on the
 * same word from every rank, checked against exact arithmetic, for u32, u64, i32, i64.
 *
 * Words live in three kinds of memory on every rank: the library heap (fh_malloc),
 * a malloc'd region the owner registered (fh_mem_register; every operation goes
 * through the transport) and plain malloc'd memory (firehose pins it on demand; only
 * *other* ranks operate on it, the owner reads it after a barrier). 32-bit words are
 * adjacent, so an operation that touched its neighbour would show. Every storm sends
 * ~30% of its operations to one hot heap word of rank 0, ~20% to hot registered and
 * plain words of the last rank, the rest to words of every rank (the caller's own
 * included); an eighth to a quarter of the operations use the _nb form followed by
 * fh_wait.
 *
 *  a1. delta storm: fetch&add, add, compare&swap increment loops, compare&swap to
 *      random values, swap, fetch&and/or/xor, fetch at random with random operands.
 *      Every operation's effect is known from its result (an add adds d, a swap that
 *      returned o replaced o by n, a fetch&and that returned o left o&m, ...), so
 *      final == initial + sum of all effects (mod 2^bits) for every word: a lost or
 *      torn update breaks the sum.
 *  a2. counters: every rank increments with fetch&add(1), add(1) and compare&swap
 *      loops mixed (stale guesses included); the values fetch&add and successful
 *      compare&swaps returned must be distinct across all ranks and the final value
 *      must equal the number of increments (started just below the wrap-around).
 *  a3. epochs: set, swap and compare&swap write fresh "epoch" values (epoch << half)
 *      into a word others fetch&add 1 to. The fetch&add results of each epoch must be
 *      exactly 0..n-1; a swap or successful compare&swap that removed an epoch must
 *      have seen exactly its n; an epoch is removed at most once; the final value is
 *      (an unremoved epoch, its n); every epoch seen was written by someone.
 *  a4. bit fields: each rank owns a field of the word and changes only it, with
 *      fetch&or/and/xor, fetch&add/add (no carry out of the field; subtraction too)
 *      and compare&swap that keeps the other fields; every returned value must show
 *      the caller's field exactly as its own model says, after every operation.
 *  b.  _nb forms: a batch of every operation on private words of a peer's heap, a
 *      peer's registered region, a peer's plain memory and the own heap, all issued
 *      before the first fh_wait (in reverse order), then a burst of 8 fetch&add_nb on
 *      one word completed by fh_wait_all; old values and final words checked.
 *  c.  own-rank unregistered memory (stack, malloc) -> FH_ERR_ACCESS for every
 *      operation, blocking and _nb; after fh_mem_unregister the own region is refused
 *      too, while the next rank still reaches it (now through firehose) with the value
 *      it left there.
 *  d.  errors: misaligned (own and remote heap, remote plain) and NULL addresses and
 *      NULL old_out / h_out -> FH_ERR_INVALID_ARG with the word unchanged; bad rank
 *      -> FH_ERR_BAD_RANK; NULL ctx -> FH_ERR_INVALID_ARG; after fh_finalize ->
 *      FH_ERR_STATE; after every error the next operation works.
 *
 * FH_TEST_ATOMIC_ITERS sets the operations per rank in the a1 storm (default
 * 40000/np, at least 2000; half that in a2..a4); FH_TEST_ATOMIC_TYPES=u64,i64 (say)
 * runs the storms and _nb batches for those types only. A watchdog names the phase
 * if one hangs. Runtime about 1-2 s at 8 ranks on 2 idle cores.
 * Run: mpirun -np 2..16 test_atomic (also with FH_SHM=0 and FH_PROGRESS=thread). */
#include "common.h"
#include <limits.h>
#include <unistd.h>

static fh_ctx_t *ctx;
static int me, np;
static uint64_t rng;

static inline uint64_t rnd(void) { return rng_next(&rng); }
static inline uint64_t rndn(uint64_t n) { return rng_next(&rng) % n; }

/* ---------------- one table for the four types ---------------- */
enum { OP_FADD, OP_ADD, OP_SWAP, OP_CAS, OP_FETCH, OP_SET, OP_AND, OP_OR, OP_XOR, NOPS };
static const char *op_names[NOPS] = {"fetch_add", "add", "swap", "cas", "fetch",
                                     "set", "fetch_and", "fetch_or", "fetch_xor"};
static const int op_has_out[NOPS] = {1, 0, 1, 1, 1, 0, 1, 1, 1};

/* Runs operation `op` (blocking, or the _nb form when nb) with operands a (value or
 * expected) and b (desired); `out` points to storage for one T (may be NULL). */
typedef int (*opfn_t)(fh_ctx_t *c, int op, int nb, int rank, void *addr, uint64_t a,
                      uint64_t b, void *out, fh_handle_t *h);

#define DEF_OPS(T, UT, S)                                                                   \
  static int op_##S(fh_ctx_t *c, int op, int nb, int rank, void *addr, uint64_t a,          \
                    uint64_t b, void *out, fh_handle_t *h) {                                \
    T *p = addr, *o = out;                                                                  \
    T va = (T)(UT)a, vb = (T)(UT)b;                                                         \
    switch (op) {                                                                           \
    case OP_FADD:                                                                           \
      return nb ? fh_atomic_fetch_add_##S##_nb(c, rank, p, va, o, h)                        \
                : fh_atomic_fetch_add_##S(c, rank, p, va, o);                               \
    case OP_ADD:                                                                            \
      return nb ? fh_atomic_add_##S##_nb(c, rank, p, va, h) : fh_atomic_add_##S(c, rank, p, va); \
    case OP_SWAP:                                                                           \
      return nb ? fh_atomic_swap_##S##_nb(c, rank, p, va, o, h)                             \
                : fh_atomic_swap_##S(c, rank, p, va, o);                                    \
    case OP_CAS:                                                                            \
      return nb ? fh_atomic_cas_##S##_nb(c, rank, p, va, vb, o, h)                          \
                : fh_atomic_cas_##S(c, rank, p, va, vb, o);                                 \
    case OP_FETCH:                                                                          \
      return nb ? fh_atomic_fetch_##S##_nb(c, rank, p, o, h) : fh_atomic_fetch_##S(c, rank, p, o); \
    case OP_SET:                                                                            \
      return nb ? fh_atomic_set_##S##_nb(c, rank, p, va, h) : fh_atomic_set_##S(c, rank, p, va); \
    case OP_AND:                                                                            \
      return nb ? fh_atomic_fetch_and_##S##_nb(c, rank, p, va, o, h)                        \
                : fh_atomic_fetch_and_##S(c, rank, p, va, o);                               \
    case OP_OR:                                                                             \
      return nb ? fh_atomic_fetch_or_##S##_nb(c, rank, p, va, o, h)                         \
                : fh_atomic_fetch_or_##S(c, rank, p, va, o);                                \
    case OP_XOR:                                                                            \
      return nb ? fh_atomic_fetch_xor_##S##_nb(c, rank, p, va, o, h)                        \
                : fh_atomic_fetch_xor_##S(c, rank, p, va, o);                               \
    }                                                                                       \
    return -1000;                                                                           \
  }
DEF_OPS(uint32_t, uint32_t, u32)
DEF_OPS(uint64_t, uint64_t, u64)
DEF_OPS(int32_t, uint32_t, i32)
DEF_OPS(int64_t, uint64_t, i64)

typedef struct {
  const char *name;
  int bits;
  size_t size;
  uint64_t mask;
  opfn_t fn;
} ty_t;
static const ty_t types[4] = {
    {"u32", 32, 4, 0xFFFFFFFFULL, op_u32},
    {"u64", 64, 8, ~0ULL, op_u64},
    {"i32", 32, 4, 0xFFFFFFFFULL, op_i32},
    {"i64", 64, 8, ~0ULL, op_i64},
};

/* The T in `slot` as a value masked to the type's width. */
static uint64_t ld(const ty_t *t, const void *slot) {
  if (t->size == 4) {
    uint32_t v;
    memcpy(&v, slot, 4);
    return v;
  }
  uint64_t v;
  memcpy(&v, slot, 8);
  return v;
}

/* One operation (nb: the _nb form, then fh_wait); *old gets the result if wanted. */
static int aop(const ty_t *t, int op, int nb, int rank, void *addr, uint64_t a, uint64_t b,
               uint64_t *old) {
  uint64_t slot = 0x5A5A5A5A5A5A5A5AULL;
  fh_handle_t h = 0xBAD;
  int rc = t->fn(ctx, op, nb, rank, addr, a & t->mask, b & t->mask, &slot, &h);
  if (rc == FH_OK && nb) rc = fh_wait(ctx, h);
  if (rc == FH_OK && old) *old = ld(t, &slot);
  return rc;
}

/* FH_TEST_ATOMIC_TYPES (e.g. "u64,i64") limits the storms and _nb batches to
 * these types (default: all four). */
static int type_on(const ty_t *t) {
  const char *e = getenv("FH_TEST_ATOMIC_TYPES");
  return !e || strstr(e, t->name) != NULL;
}

static const char *kind_names[3] = {"heap", "registered", "plain"};

/* An operation that must succeed; returns its result (0 for add/set). */
static uint64_t must(const ty_t *t, int op, int nb, int rank, void *addr, int kind, uint64_t a,
                     uint64_t b) {
  uint64_t old = 0;
  int rc = aop(t, op, nb, rank, addr, a, b, &old);
  if (rc != FH_OK)
    FAILF("%s %s%s on rank %d's %s word %p returned %d (%s)", t->name, op_names[op],
          nb ? "_nb" : "", rank, kind_names[kind], addr, rc, fh_strerror(rc));
  return old;
}

/* ---------------- memory: three kinds on every rank ---------------- */
enum { K_HEAP, K_REG, K_PLAIN, NKINDS };
#define AREA_BYTES 8192
#define SHARED_BYTES 4096 /* shared words; then one 128-byte private slot per rank */
#define NWK 4             /* storm words per kind per rank */
static char **area[NKINDS]; /* area[kind][rank]: address in that rank's memory */
static char *my_reg, *my_plain;

typedef struct {
  int rank, kind, j;
} wref_t;

static char *waddr(const ty_t *t, wref_t w) { return area[w.kind][w.rank] + (size_t)w.j * t->size; }
static int can_op(wref_t w) { return !(w.kind == K_PLAIN && w.rank == me); }

/* The value of a word once every rank is past a barrier: an atomic fetch, or for
 * the caller's own plain memory (refused for atomics) a plain read. The owner also
 * compares its plain view of its heap and registered words. */
static uint64_t read_word(const ty_t *t, wref_t w) {
  char *a = waddr(t, w);
  uint64_t v;
  if (!can_op(w)) return ld(t, a);
  v = must(t, OP_FETCH, 0, w.rank, a, w.kind, 0, 0);
  if (w.rank == me) {
    uint64_t p = ld(t, a);
    CHECK(p == v, "%s own %s word %p: plain read %#llx after a barrier, atomic fetch %#llx",
          t->name, kind_names[w.kind], (void *)a, (unsigned long long)p, (unsigned long long)v);
  }
  return v;
}

/* Owners initialise their words (atomic set on heap and registered words, a plain
 * store on plain memory), then a barrier. */
static void init_word_own(const ty_t *t, wref_t w, uint64_t v) {
  if (w.rank != me) return;
  char *a = waddr(t, w);
  if (w.kind == K_PLAIN) {
    if (t->size == 4) {
      uint32_t x = (uint32_t)v;
      memcpy(a, &x, 4);
    } else {
      memcpy(a, &v, 8);
    }
  } else {
    must(t, OP_SET, 0, me, a, w.kind, v, 0);
  }
}

/* ---------------- the storm word list ---------------- */
static int nwords;
static wref_t widx(int i) {
  wref_t w = {i / (NKINDS * NWK), (i / NWK) % NKINDS, i % NWK};
  return w;
}
static int wid(wref_t w) { return (w.rank * NKINDS + w.kind) * NWK + w.j; }
/* ~30% the hot heap word of rank 0, ~10% the hot registered word of the last rank,
 * ~10% the hot plain word of the last rank, else any word this rank may operate on. */
static wref_t pick(void) {
  uint64_t x = rndn(100);
  wref_t w;
  if (x < 30) return (wref_t){0, K_HEAP, 0};
  if (x < 40) return (wref_t){np - 1, K_REG, 0};
  if (x < 50 && me != np - 1) return (wref_t){np - 1, K_PLAIN, 0};
  do w = widx((int)rndn((uint64_t)nwords));
  while (!can_op(w));
  return w;
}

static uint64_t rand_operand(const ty_t *t) {
  switch (rndn(4)) {
  case 0: return rndn(16);                     /* small */
  case 1: return (0 - rndn(16)) & t->mask;     /* small negative */
  default: return rnd() & t->mask;
  }
}

/* a1 */
static void storm_delta(const ty_t *t, long iters, uint64_t salt) {
  for (int i = 0; i < nwords; i++) init_word_own(t, widx(i), mix64(salt + (uint64_t)i) & t->mask);
  CHECK_OK(fh_barrier(ctx));
  uint64_t *delta = calloc((size_t)nwords, 8), *sum = calloc((size_t)nwords, 8);
  long cas_retries = 0;
  for (long it = 0; it < iters; it++) {
    wref_t w = pick();
    int id = wid(w), nb = rndn(4) == 0;
    char *a = waddr(t, w);
    uint64_t d = 0, old, m, cur;
    switch (rndn(9)) {
    case 0: /* fetch&add */
      m = rand_operand(t);
      must(t, OP_FADD, nb, w.rank, a, w.kind, m, 0);
      d = m;
      break;
    case 1: /* add */
      m = rand_operand(t);
      must(t, OP_ADD, nb, w.rank, a, w.kind, m, 0);
      d = m;
      break;
    case 2: /* compare&swap increment loop */
      m = rand_operand(t);
      cur = must(t, OP_FETCH, nb, w.rank, a, w.kind, 0, 0);
      for (;;) {
        old = must(t, OP_CAS, nb, w.rank, a, w.kind, cur, cur + m);
        if (old == cur) break;
        cur = old;
        cas_retries++;
      }
      d = m;
      break;
    case 3: /* compare&swap to a random value, guess fetched or random */
      cur = rndn(2) ? must(t, OP_FETCH, nb, w.rank, a, w.kind, 0, 0) : rnd() & t->mask;
      m = rnd() & t->mask;
      old = must(t, OP_CAS, nb, w.rank, a, w.kind, cur, m);
      if (old == cur) d = m - old;
      break;
    case 4: /* swap */
      m = rnd() & t->mask;
      old = must(t, OP_SWAP, nb, w.rank, a, w.kind, m, 0);
      d = m - old;
      break;
    case 5: /* fetch&and, mostly ones */
      m = (rnd() | rnd() | rnd()) & t->mask;
      old = must(t, OP_AND, nb, w.rank, a, w.kind, m, 0);
      d = (old & m) - old;
      break;
    case 6: /* fetch&or, mostly zeros */
      m = rnd() & rnd() & rnd() & t->mask;
      old = must(t, OP_OR, nb, w.rank, a, w.kind, m, 0);
      d = (old | m) - old;
      break;
    case 7:
      m = rnd() & t->mask;
      old = must(t, OP_XOR, nb, w.rank, a, w.kind, m, 0);
      d = (old ^ m) - old;
      break;
    default:
      must(t, OP_FETCH, nb, w.rank, a, w.kind, 0, 0);
      break;
    }
    delta[id] = (delta[id] + d) & t->mask;
  }
  CHECK_OK(fh_barrier(ctx));
  /* Unsigned sums wrap mod 2^64, which is exact mod 2^bits. */
  MPI_Allreduce(delta, sum, nwords, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  for (int i = 0; i < nwords; i++) {
    wref_t w = widx(i);
    uint64_t want = (mix64(salt + (uint64_t)i) + sum[i]) & t->mask;
    uint64_t got = read_word(t, w);
    CHECK(got == want,
          "a1 %s: rank %d's %s word %d (%p) is %#llx, initial + sum of every operation's effect "
          "= %#llx (a lost or torn update)",
          t->name, w.rank, kind_names[w.kind], w.j, (void *)waddr(t, w), (unsigned long long)got,
          (unsigned long long)want);
  }
  /* A first access to a peer's registered region asks the peer: nobody enters an
   * MPI collective (which does not serve firehose requests) before all reads are done. */
  CHECK_OK(fh_barrier(ctx));
  long tot = 0;
  MPI_Reduce(&cas_retries, &tot, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  if (me == 0) printf("    a1 %s: %ld ops/rank, %ld compare&swap retries\n", t->name, iters, tot);
  free(delta);
  free(sum);
  CHECK_OK(fh_barrier(ctx));
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Gather `n` uint64 per rank to rank 0; returns the concatenation (rank 0) and the
 * total count. */
static uint64_t *gather_u64(const uint64_t *mine, int n, long *total) {
  int *counts = malloc(sizeof(int) * (size_t)np), *displs = malloc(sizeof(int) * (size_t)np);
  MPI_Gather(&n, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
  uint64_t *all = NULL;
  long tot = 0;
  if (me == 0) {
    for (int r = 0; r < np; r++) {
      displs[r] = (int)tot;
      tot += counts[r];
    }
    all = malloc(8 * (size_t)(tot + 1));
  }
  MPI_Gatherv(mine, n, MPI_UINT64_T, all, counts, displs, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  free(counts);
  free(displs);
  *total = tot;
  return all;
}

/* a2: counters; word 0 the heap word 1 of the last rank, word 1 the registered word
 * 1 of rank 0, word 2+r the plain word 1 of rank r. */
static void storm_counter(const ty_t *t, long iters) {
  int nw = 2 + np;
  wref_t *ws = malloc(sizeof(wref_t) * (size_t)nw);
  ws[0] = (wref_t){np - 1, K_HEAP, 1};
  ws[1] = (wref_t){0, K_REG, 1};
  for (int r = 0; r < np; r++) ws[2 + r] = (wref_t){r, K_PLAIN, 1};
  /* Start below the wrap-around so the counter crosses it (and i32's sign). */
  long approx = iters * np;
  uint64_t base = (t->mask == ~0ULL ? (uint64_t)INT64_MAX : (uint64_t)INT32_MAX) - (uint64_t)approx / 3;
  if (t->name[0] == 'u') base = t->mask - (uint64_t)approx / 3;
  for (int i = 0; i < nw; i++) init_word_own(t, ws[i], base);
  CHECK_OK(fh_barrier(ctx));
  uint64_t **olds = calloc((size_t)nw, sizeof *olds);
  long *nold = calloc((size_t)nw, sizeof(long)), *incs = calloc((size_t)nw, sizeof(long)),
       *tot = calloc((size_t)nw, sizeof(long));
  uint64_t *guess = malloc(8 * (size_t)nw);
  for (int i = 0; i < nw; i++) {
    olds[i] = malloc(8 * (size_t)iters);
    guess[i] = base;
  }
  for (long it = 0; it < iters; it++) {
    uint64_t x = rndn(100);
    int i;
    if (x < 40) i = 0;
    else if (x < 70) i = 1;
    else {
      do i = 2 + (int)rndn((uint64_t)np);
      while (!can_op(ws[i]));
    }
    char *a = waddr(t, ws[i]);
    int nb = rndn(8) == 0, k = ws[i].kind, r = ws[i].rank;
    uint64_t y = rndn(100), old;
    if (y < 35) {
      old = must(t, OP_FADD, nb, r, a, k, 1, 0);
      olds[i][nold[i]++] = (old - base) & t->mask;
      guess[i] = old + 1;
    } else if (y < 55) {
      must(t, OP_ADD, nb, r, a, k, 1, 0);
    } else {
      /* CAS loop from a possibly stale guess (our last view + 1). */
      uint64_t cur = guess[i] & t->mask;
      if (rndn(2)) cur = must(t, OP_FETCH, nb, r, a, k, 0, 0);
      for (;;) {
        old = must(t, OP_CAS, nb, r, a, k, cur, cur + 1);
        if (old == cur) break;
        cur = old;
      }
      olds[i][nold[i]++] = (old - base) & t->mask;
      guess[i] = old + 1;
    }
    incs[i]++;
  }
  CHECK_OK(fh_barrier(ctx));
  MPI_Allreduce(incs, tot, nw, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  uint64_t *fin = malloc(8 * (size_t)nw);
  for (int i = 0; i < nw; i++) fin[i] = read_word(t, ws[i]);
  CHECK_OK(fh_barrier(ctx)); /* reads done before the MPI collectives below */
  for (int i = 0; i < nw; i++) {
    uint64_t got = fin[i];
    uint64_t want = (base + (uint64_t)tot[i]) & t->mask;
    CHECK(got == want,
          "a2 %s: counter on rank %d's %s memory is base+%lld, expected base+%ld increments "
          "(lost updates between fetch&add and compare&swap)",
          t->name, ws[i].rank, kind_names[ws[i].kind], (long long)((got - base) & t->mask), tot[i]);
    long n;
    uint64_t *all = gather_u64(olds[i], (int)nold[i], &n);
    if (me == 0) {
      qsort(all, (size_t)n, 8, cmp_u64);
      for (long j = 0; j < n; j++) {
        CHECK(all[j] < (uint64_t)tot[i], "a2 %s: %s counter returned base+%llu, beyond %ld increments",
              t->name, kind_names[ws[i].kind], (unsigned long long)all[j], tot[i]);
        CHECK(j == 0 || all[j] != all[j - 1],
              "a2 %s: %s counter value base+%llu was returned twice (two increments saw the same "
              "value)",
              t->name, kind_names[ws[i].kind], (unsigned long long)all[j]);
      }
    }
    free(all);
    free(olds[i]);
  }
  free(olds);
  free(nold);
  free(incs);
  free(tot);
  free(guess);
  free(fin);
  free(ws);
  CHECK_OK(fh_barrier(ctx));
}

/* a3: epochs. Records: (word << 4 | type, value). */
enum { R_FADD = 1, R_SEEN = 2, R_REMOVED = 3, R_WROTE = 4 };
static void storm_epoch(const ty_t *t, long iters) {
  const int half = t->bits / 2;
  const uint64_t cmask = (1ULL << half) - 1;
  const long max_epoch = 1 + (long)np * iters;
  CHECK(max_epoch < (1L << (half - 1)), "a3: too many iterations for %s epochs", t->name);
  wref_t ws[3] = {{0, K_HEAP, 2}, {np - 1, K_REG, 2}, {np - 1, K_PLAIN, 2}};
  for (int i = 0; i < 3; i++) init_word_own(t, ws[i], 0);
  CHECK_OK(fh_barrier(ctx));
  uint64_t *rec = malloc(16 * (size_t)(2 * iters + 2)); /* at most 2 records per operation */
  int nrec = 0;
  uint64_t last[3] = {0, 0, 0};
  long k = 0;
#define REC(word, type, v)                                                     \
  do {                                                                         \
    rec[2 * nrec] = (uint64_t)(word) << 4 | (type);                            \
    rec[2 * nrec + 1] = (v);                                                   \
    nrec++;                                                                    \
  } while (0)
  for (long it = 0; it < iters; it++) {
    int i;
    do i = (int)rndn(3);
    while (!can_op(ws[i]));
    char *a = waddr(t, ws[i]);
    int nb = rndn(4) == 0, kd = ws[i].kind, r = ws[i].rank;
    uint64_t y = rndn(100), old;
    uint64_t e = 1 + (uint64_t)me + (uint64_t)np * (uint64_t)k; /* a fresh epoch */
    if (y < 65) {
      old = must(t, OP_FADD, nb, r, a, kd, 1, 0);
      REC(i, R_FADD, old);
      last[i] = old + 1;
    } else if (y < 75) {
      old = must(t, OP_FETCH, nb, r, a, kd, 0, 0);
      REC(i, R_SEEN, old);
      last[i] = old;
    } else if (y < 83) {
      k++;
      must(t, OP_SET, nb, r, a, kd, e << half, 0);
      REC(i, R_WROTE, e);
      last[i] = e << half;
    } else if (y < 91) {
      k++;
      old = must(t, OP_SWAP, nb, r, a, kd, e << half, 0);
      REC(i, R_WROTE, e);
      REC(i, R_REMOVED, old);
      last[i] = e << half;
    } else {
      k++;
      old = must(t, OP_CAS, nb, r, a, kd, last[i], e << half);
      if (old == last[i]) {
        REC(i, R_WROTE, e);
        REC(i, R_REMOVED, old);
        last[i] = e << half;
      } else {
        REC(i, R_SEEN, old);
        last[i] = old;
      }
    }
  }
#undef REC
  CHECK_OK(fh_barrier(ctx));
  long n;
  uint64_t *all = gather_u64(rec, 2 * nrec, &n);
  uint64_t fin[3];
  if (me == 0)
    for (int i = 0; i < 3; i++) fin[i] = read_word(t, ws[i]);
  if (me == 0) {
    n /= 2;
    long *cnt = malloc(sizeof(long) * (size_t)max_epoch);
    char *wrote = malloc((size_t)max_epoch), *removed = malloc((size_t)max_epoch);
    uint64_t *fadd = malloc(8 * (size_t)(n + 1));
    long tf = 0, tr = 0, tw = 0;
    for (int i = 0; i < 3; i++) {
      memset(cnt, 0, sizeof(long) * (size_t)max_epoch);
      memset(wrote, 0, (size_t)max_epoch);
      memset(removed, 0, (size_t)max_epoch);
      wrote[0] = 1; /* the initial value */
      long nf = 0;
      for (long j = 0; j < n; j++) {
        if ((int)(all[2 * j] >> 4) != i) continue;
        int ty = (int)(all[2 * j] & 15);
        if (ty == R_WROTE) {
          CHECK(all[2 * j + 1] < (uint64_t)max_epoch && !wrote[all[2 * j + 1]], "a3: epoch bookkeeping");
          wrote[all[2 * j + 1]] = 1;
          tw++;
        } else if (ty == R_FADD) {
          fadd[nf++] = all[2 * j + 1];
        }
      }
      /* fetch&add results grouped by epoch must be exactly 0..n-1. */
      qsort(fadd, (size_t)nf, 8, cmp_u64);
      for (long j = 0; j < nf; j++) {
        uint64_t e = fadd[j] >> half, c = fadd[j] & cmask;
        CHECK(e < (uint64_t)max_epoch && wrote[e],
              "a3 %s %s word: fetch&add returned %#llx, epoch %llu was never written", t->name,
              kind_names[ws[i].kind], (unsigned long long)fadd[j], (unsigned long long)e);
        CHECK(c == (uint64_t)cnt[e],
              "a3 %s %s word: epoch %llu's fetch&add results are not 0..n-1: got %llu where %ld "
              "was due (a lost or duplicated increment)",
              t->name, kind_names[ws[i].kind], (unsigned long long)e, (unsigned long long)c, cnt[e]);
        cnt[e]++;
        tf++;
      }
      for (long j = 0; j < n; j++) {
        if ((int)(all[2 * j] >> 4) != i) continue;
        int ty = (int)(all[2 * j] & 15);
        uint64_t v = all[2 * j + 1], e = v >> half, c = v & cmask;
        if (ty != R_SEEN && ty != R_REMOVED) continue;
        CHECK(e < (uint64_t)max_epoch && wrote[e],
              "a3 %s %s word: an operation returned %#llx, epoch %llu was never written", t->name,
              kind_names[ws[i].kind], (unsigned long long)v, (unsigned long long)e);
        if (ty == R_SEEN) {
          CHECK(c <= (uint64_t)cnt[e], "a3 %s %s word: saw epoch %llu at count %llu, but only %ld "
                "fetch&adds hit it", t->name, kind_names[ws[i].kind], (unsigned long long)e,
                (unsigned long long)c, cnt[e]);
        } else {
          CHECK(!removed[e], "a3 %s %s word: epoch %llu was removed twice (by two swaps or "
                "compare&swaps)", t->name, kind_names[ws[i].kind], (unsigned long long)e);
          CHECK(c == (uint64_t)cnt[e], "a3 %s %s word: a swap/compare&swap removed epoch %llu at "
                "count %llu, but %ld fetch&adds hit it", t->name, kind_names[ws[i].kind],
                (unsigned long long)e, (unsigned long long)c, cnt[e]);
          removed[e] = 1;
          tr++;
        }
      }
      uint64_t e = fin[i] >> half, c = fin[i] & cmask;
      CHECK(e < (uint64_t)max_epoch && wrote[e] && !removed[e] && c == (uint64_t)cnt[e],
            "a3 %s %s word: final %#llx (epoch %llu, count %llu): epoch %s, %ld fetch&adds hit it",
            t->name, kind_names[ws[i].kind], (unsigned long long)fin[i], (unsigned long long)e,
            (unsigned long long)c,
            e >= (uint64_t)max_epoch || !wrote[e] ? "never written" : removed[e] ? "was removed" : "ok",
            e < (uint64_t)max_epoch ? cnt[e] : -1L);
    }
    printf("    a3 %s: %ld epochs written, %ld removed by swap/cas, %ld fetch&adds\n", t->name, tw, tr, tf);
    free(cnt);
    free(wrote);
    free(removed);
    free(fadd);
  }
  free(all);
  free(rec);
  CHECK_OK(fh_barrier(ctx));
}

/* a4: bit fields. Word list: heap, registered and plain word 3 of every rank. */
static void storm_bits(const ty_t *t, long iters, uint64_t salt) {
  int fw = t->bits / np;
  if (fw > 16) fw = 16;
  if (fw < 2) {
    if (me == 0) printf("    a4 %s: skipped (%d ranks leave no 2-bit fields)\n", t->name, np);
    return;
  }
  const uint64_t fmask = (1ULL << fw) - 1;
  const int sh = me * fw;
  int nw = NKINDS * np;
  wref_t *ws = malloc(sizeof(wref_t) * (size_t)nw);
  uint64_t *model = malloc(8 * (size_t)nw), *last = malloc(8 * (size_t)nw),
           *allm = malloc(8 * (size_t)nw * (size_t)np);
  for (int i = 0; i < nw; i++) {
    ws[i] = (wref_t){i / NKINDS, i % NKINDS, 3};
    uint64_t init = mix64(salt + (uint64_t)i) & t->mask;
    init_word_own(t, ws[i], init);
    model[i] = (init >> sh) & fmask;
    last[i] = init;
  }
  CHECK_OK(fh_barrier(ctx));
#define FIELD_OK(v, what)                                                                  \
  CHECK((((v) >> sh) & fmask) == model[i],                                                 \
        "a4 %s: %s on rank %d's %s word returned %#llx: my field (bits %d..%d) is %#llx, "  \
        "expected %#llx (another rank's operation overwrote it)",                          \
        t->name, what, ws[i].rank, kind_names[ws[i].kind], (unsigned long long)(v), sh,    \
        sh + fw - 1, (unsigned long long)(((v) >> sh) & fmask), (unsigned long long)model[i])
  long cas_ok = 0, cas_fail = 0;
  for (long it = 0; it < iters; it++) {
    int i;
    if (rndn(10) < 4) i = 0 * NKINDS + K_HEAP; /* hot: rank 0's heap word */
    else {
      do i = (int)rndn((uint64_t)nw);
      while (!can_op(ws[i]));
    }
    char *a = waddr(t, ws[i]);
    int nb = rndn(4) == 0, kd = ws[i].kind, r = ws[i].rank;
    uint64_t x = rnd() & fmask, old = 0, d;
    switch (rndn(8)) {
    case 0:
      old = must(t, OP_OR, nb, r, a, kd, x << sh, 0);
      FIELD_OK(old, "fetch_or");
      model[i] |= x;
      break;
    case 1:
      old = must(t, OP_AND, nb, r, a, kd, ~(x << sh), 0);
      FIELD_OK(old, "fetch_and");
      model[i] &= ~x;
      break;
    case 2:
      old = must(t, OP_XOR, nb, r, a, kd, x << sh, 0);
      FIELD_OK(old, "fetch_xor");
      model[i] ^= x;
      break;
    case 3: /* fetch&add without carry out of the field */
      d = rndn(fmask - model[i] + 1);
      old = must(t, OP_FADD, nb, r, a, kd, d << sh, 0);
      FIELD_OK(old, "fetch_add");
      model[i] += d;
      break;
    case 4: /* subtract without borrow */
      d = rndn(model[i] + 1);
      old = must(t, OP_FADD, nb, r, a, kd, (0 - (d << sh)), 0);
      FIELD_OK(old, "fetch_add(-d)");
      model[i] -= d;
      break;
    case 5:
      d = rndn(fmask - model[i] + 1);
      must(t, OP_ADD, nb, r, a, kd, d << sh, 0);
      model[i] += d;
      continue;
    case 6: /* compare&swap of my field, keeping the others as last seen */
      for (int tries = 0; tries < 3; tries++) {
        uint64_t exp = (last[i] & ~(fmask << sh)) | (model[i] << sh);
        uint64_t des = (exp & ~(fmask << sh)) | (x << sh);
        old = must(t, OP_CAS, nb, r, a, kd, exp, des);
        FIELD_OK(old, "cas");
        if (old == (exp & t->mask)) {
          model[i] = x;
          last[i] = des;
          cas_ok++;
          break;
        }
        last[i] = old;
        cas_fail++;
      }
      continue;
    default:
      old = must(t, OP_FETCH, nb, r, a, kd, 0, 0);
      FIELD_OK(old, "fetch");
      break;
    }
    if (rndn(4) == 0) last[i] = old;
  }
#undef FIELD_OK
  CHECK_OK(fh_barrier(ctx));
  MPI_Allgather(model, nw, MPI_UINT64_T, allm, nw, MPI_UINT64_T, MPI_COMM_WORLD);
  for (int i = 0; i < nw; i++) {
    uint64_t v = read_word(t, ws[i]);
    uint64_t init = mix64(salt + (uint64_t)i) & t->mask;
    for (int r = 0; r < np; r++) {
      uint64_t want = ws[i].kind == K_PLAIN && ws[i].rank == r ? ((init >> (r * fw)) & fmask)
                                                                : allm[(size_t)r * (size_t)nw + (size_t)i];
      CHECK(((v >> (r * fw)) & fmask) == want,
            "a4 %s: final %s word of rank %d = %#llx: rank %d's field is %#llx, expected %#llx",
            t->name, kind_names[ws[i].kind], ws[i].rank, (unsigned long long)v, r,
            (unsigned long long)((v >> (r * fw)) & fmask), (unsigned long long)want);
    }
    int used = fw * np;
    if (used < t->bits)
      CHECK((v >> used) == (init >> used), "a4 %s: bits above the fields changed (%#llx, initial %#llx)",
            t->name, (unsigned long long)v, (unsigned long long)init);
  }
  CHECK_OK(fh_barrier(ctx)); /* reads done before the MPI collective below */
  long s[2] = {cas_ok, cas_fail}, tot[2];
  MPI_Reduce(s, tot, 2, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  if (me == 0)
    printf("    a4 %s: %d-bit fields, compare&swap %ld succeeded / %ld failed\n", t->name, fw, tot[0], tot[1]);
  free(ws);
  free(model);
  free(last);
  free(allm);
  CHECK_OK(fh_barrier(ctx));
}

/* ---------------- b: _nb batches on private words ---------------- */
static char *slot(int kind, int rank) { return area[kind][rank] + SHARED_BYTES + (size_t)me * 128; }

static void nb_batch(const ty_t *t) {
  int peer = (me + 1) % np;
  struct {
    int kind, rank;
  } tg[4] = {{K_HEAP, peer}, {K_REG, peer}, {K_PLAIN, peer}, {K_HEAP, me}};
  enum { NB_OPS = 10 }; /* the 9 operations + a failing compare&swap */
  uint64_t init[4][NB_OPS], arg[4][NB_OPS], out[4][NB_OPS];
  fh_handle_t h[4][NB_OPS];
  for (int g = 0; g < 4; g++)
    for (int i = 0; i < NB_OPS; i++) {
      char *a = slot(tg[g].kind, tg[g].rank) + (size_t)i * t->size;
      init[g][i] = rnd() & t->mask;
      arg[g][i] = rnd() & t->mask;
      if (arg[g][i] == init[g][i]) arg[g][i] ^= 1;
      out[g][i] = 0x1111111111111111ULL;
      must(t, OP_SET, 0, tg[g].rank, a, tg[g].kind, init[g][i], 0);
    }
  /* Issue everything, then wait in reverse order. */
  for (int g = 0; g < 4; g++)
    for (int i = 0; i < NB_OPS; i++) {
      char *a = slot(tg[g].kind, tg[g].rank) + (size_t)i * t->size;
      int op = i < NOPS ? i : OP_CAS;
      uint64_t x = arg[g][i], y = 0;
      if (i == OP_CAS) { /* succeeds */
        y = x;
        x = init[g][i];
      } else if (i == NOPS) { /* fails */
        y = x;
        x = (init[g][i] + 1) & t->mask;
      }
      int rc = t->fn(ctx, op, 1, tg[g].rank, a, x, y, &out[g][i], &h[g][i]);
      if (rc != FH_OK)
        FAILF("b %s: %s_nb on rank %d's %s word returned %d", t->name, op_names[op], tg[g].rank,
              kind_names[tg[g].kind], rc);
    }
  for (int g = 3; g >= 0; g--)
    for (int i = NB_OPS - 1; i >= 0; i--) CHECK_OK(fh_wait(ctx, h[g][i]));
  for (int g = 0; g < 4; g++)
    for (int i = 0; i < NB_OPS; i++) {
      char *a = slot(tg[g].kind, tg[g].rank) + (size_t)i * t->size;
      int op = i < NOPS ? i : OP_CAS;
      uint64_t v = init[g][i], x = arg[g][i], want_new = v;
      switch (i) {
      case OP_FADD: case OP_ADD: want_new = v + x; break;
      case OP_SWAP: case OP_CAS: case OP_SET: want_new = x; break;
      case OP_FETCH: case NOPS: want_new = v; break;
      case OP_AND: want_new = v & x; break;
      case OP_OR: want_new = v | x; break;
      case OP_XOR: want_new = v ^ x; break;
      }
      want_new &= t->mask;
      if (op_has_out[op]) {
        uint64_t o = ld(t, &out[g][i]);
        CHECK(o == v, "b %s: %s_nb on rank %d's %s word returned %#llx after fh_wait, expected %#llx",
              t->name, op_names[op], tg[g].rank, kind_names[tg[g].kind], (unsigned long long)o,
              (unsigned long long)v);
      }
      uint64_t now = must(t, OP_FETCH, 0, tg[g].rank, a, tg[g].kind, 0, 0);
      CHECK(now == want_new, "b %s: after %s_nb rank %d's %s word is %#llx, expected %#llx", t->name,
            op_names[op], tg[g].rank, kind_names[tg[g].kind], (unsigned long long)now,
            (unsigned long long)want_new);
    }
  /* A burst of fetch&add_nb on one word, completed by fh_wait_all. */
  for (int g = 0; g < 4; g++) {
    char *a = slot(tg[g].kind, tg[g].rank) + 11 * t->size;
    uint64_t v = rnd() & t->mask, o[8];
    fh_handle_t hs[8];
    must(t, OP_SET, 0, tg[g].rank, a, tg[g].kind, v, 0);
    for (int i = 0; i < 8; i++) {
      o[i] = 0;
      CHECK_OK(t->fn(ctx, OP_FADD, 1, tg[g].rank, a, 1, 0, &o[i], &hs[i]));
    }
    CHECK_OK(fh_wait_all(ctx, hs, 8));
    int seen = 0;
    for (int i = 0; i < 8; i++) {
      uint64_t d = (ld(t, &o[i]) - v) & t->mask;
      CHECK(d < 8 && !(seen & (1 << d)), "b %s: burst fetch&add_nb %d returned v+%llu", t->name, i,
            (unsigned long long)d);
      seen |= 1 << d;
    }
    uint64_t now = must(t, OP_FETCH, 0, tg[g].rank, a, tg[g].kind, 0, 0);
    CHECK(now == ((v + 8) & t->mask), "b %s: burst word is v+%llu, expected v+8", t->name,
          (unsigned long long)((now - v) & t->mask));
  }
}

/* ---------------- c and d: refusals and errors ---------------- */
static uint64_t works_count;
/* The next operation after an error works: a fetch&add on our private heap word 12
 * of the next rank returns exactly the count of previous ones. */
static void still_works(const ty_t *t) {
  char *a = slot(K_HEAP, (me + 1) % np) + 12 * t->size;
  uint64_t old = must(t, OP_FADD, 0, (me + 1) % np, a, K_HEAP, 1, 0);
  CHECK(old == (works_count & t->mask), "%s: the operation after an error returned %llu, expected %llu",
        t->name, (unsigned long long)old, (unsigned long long)works_count);
  works_count++;
}

static void expect_err(const ty_t *t, int op, int nb, int rank, void *addr, int want, const char *what) {
  uint64_t o;
  int rc = aop(t, op, nb, rank, addr, 1, 2, &o);
  if (rc != want)
    FAILF("%s %s%s on %s returned %d (%s), expected %d (%s)", t->name, op_names[op], nb ? "_nb" : "",
          what, rc, fh_strerror(rc), want, fh_strerror(want));
  char msg[256];
  fh_last_error(msg, sizeof msg);
  CHECK(msg[0] != 0, "no fh_last_error message after %s", what);
}

static void refusals(const ty_t *t) {
  uint64_t stackw[2] = {0, 0};
  char *own_plain = my_plain + 64; /* our plain area, never registered */
  for (int op = 0; op < NOPS; op++)
    for (int nb = 0; nb < 2; nb++) {
      expect_err(t, op, nb, me, stackw, FH_ERR_ACCESS, "own stack memory");
      expect_err(t, op, nb, me, own_plain, FH_ERR_ACCESS, "own malloc'd memory");
    }
  CHECK(stackw[0] == 0 && stackw[1] == 0, "a refused atomic changed the stack word");
  still_works(t);
}

static void errors(const ty_t *t) {
  int peer = (me + 1) % np;
  char *own = slot(K_HEAP, me) + 13 * t->size, *rem = slot(K_HEAP, peer) + 13 * t->size;
  char *remplain = slot(K_PLAIN, peer) + 13 * t->size;
  uint64_t v = rnd() & t->mask;
  must(t, OP_SET, 0, me, own, K_HEAP, v, 0);
  must(t, OP_SET, 0, peer, rem, K_HEAP, v, 0);
  must(t, OP_SET, 0, peer, remplain, K_PLAIN, v, 0);
  for (int op = 0; op < NOPS; op++)
    for (int nb = 0; nb < 2; nb++) {
      size_t offs[3] = {1, 2, t->size / 2};
      for (int k = 0; k < 3; k++) {
        expect_err(t, op, nb, me, own + offs[k], FH_ERR_INVALID_ARG, "a misaligned own heap address");
        expect_err(t, op, nb, peer, rem + offs[k], FH_ERR_INVALID_ARG, "a misaligned remote heap address");
        expect_err(t, op, nb, peer, remplain + offs[k], FH_ERR_INVALID_ARG,
                   "a misaligned remote plain address");
      }
      expect_err(t, op, nb, me, NULL, FH_ERR_INVALID_ARG, "NULL (own rank)");
      expect_err(t, op, nb, peer, NULL, FH_ERR_INVALID_ARG, "NULL (remote rank)");
      expect_err(t, op, nb, -1, rem, FH_ERR_BAD_RANK, "rank -1");
      expect_err(t, op, nb, np, rem, FH_ERR_BAD_RANK, "rank np");
      expect_err(t, op, nb, INT_MAX, rem, FH_ERR_BAD_RANK, "rank INT_MAX");
      expect_err(t, op, nb, INT_MIN, rem, FH_ERR_BAD_RANK, "rank INT_MIN");
      still_works(t);
      /* NULL result pointer / handle pointer: refused, the word unchanged. */
      fh_handle_t h;
      uint64_t o;
      if (op_has_out[op]) {
        int rc = t->fn(ctx, op, nb, peer, rem, 1, 2, NULL, &h);
        CHECK(rc == FH_ERR_INVALID_ARG, "%s %s%s with NULL old_out returned %d", t->name, op_names[op],
              nb ? "_nb" : "", rc);
        rc = t->fn(ctx, op, nb, me, own, 1, 2, NULL, &h);
        CHECK(rc == FH_ERR_INVALID_ARG, "%s %s%s with NULL old_out (own) returned %d", t->name,
              op_names[op], nb ? "_nb" : "", rc);
      }
      if (nb) {
        int rc = t->fn(ctx, op, 1, peer, rem, 1, 2, &o, NULL);
        CHECK(rc == FH_ERR_INVALID_ARG, "%s %s_nb with NULL h_out returned %d", t->name, op_names[op], rc);
      }
      int rc = t->fn(NULL, op, nb, peer, rem, 1, 2, &o, &h);
      CHECK(rc == FH_ERR_INVALID_ARG, "%s %s%s with a NULL ctx returned %d", t->name, op_names[op],
            nb ? "_nb" : "", rc);
      still_works(t);
    }
  uint64_t a = must(t, OP_FETCH, 0, me, own, K_HEAP, 0, 0), b = must(t, OP_FETCH, 0, peer, rem, K_HEAP, 0, 0),
           c = must(t, OP_FETCH, 0, peer, remplain, K_PLAIN, 0, 0);
  CHECK(a == v && b == v && c == v, "%s: refused operations changed a word (%#llx %#llx %#llx, was %#llx)",
        t->name, (unsigned long long)a, (unsigned long long)b, (unsigned long long)c, (unsigned long long)v);
}

int main(int argc, char **argv) {
  int provided; /* FH_PROGRESS=thread needs MPI_THREAD_MULTIPLE (else it polls only) */
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ctx = fh_test_init(&me, &np);
  watchdog_init(ctx, 44);
  rng = mix64(0xA70C0000ULL + (uint64_t)me);
  if (np < 2 || np > 16) {
    if (me == 0) fprintf(stderr, "test_atomic needs 2..16 ranks\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  long iters = 40000 / np;
  if (iters < 2000) iters = 2000;
  if (getenv("FH_TEST_ATOMIC_ITERS")) iters = atol(getenv("FH_TEST_ATOMIC_ITERS"));
  if (me == 0) {
    printf("atomic: %d ranks, %ld operations per rank per storm\n", np, iters);
    fflush(stdout);
  }

  /* Memory of the three kinds; exchange the addresses. */
  char *heap = fh_malloc(ctx, AREA_BYTES);
  CHECK(heap != NULL, "fh_malloc failed");
  memset(heap, 0, AREA_BYTES);
  my_reg = aligned_alloc(4096, AREA_BYTES);
  my_plain = aligned_alloc(4096, AREA_BYTES);
  CHECK(my_reg && my_plain, "aligned_alloc failed");
  memset(my_reg, 0, AREA_BYTES);
  memset(my_plain, 0, AREA_BYTES);
  CHECK_OK(fh_mem_register(ctx, my_reg, AREA_BYTES));
  char *mine[NKINDS] = {heap, my_reg, my_plain};
  for (int k = 0; k < NKINDS; k++) {
    area[k] = malloc(sizeof(char *) * (size_t)np);
    exchange_ptrs(mine[k], (void **)area[k], MPI_COMM_WORLD);
  }
  nwords = np * NKINDS * NWK;
  CHECK_OK(fh_barrier(ctx));

  char name[96];
  for (int ti = 0; ti < 4; ti++) {
    const ty_t *t = &types[ti];
    if (!type_on(t)) continue;
    snprintf(name, sizeof name, "a1. delta storm, %s", t->name);
    begin_phase(name, 120);
    storm_delta(t, iters, 0xD0000ULL + (uint64_t)ti * 1000);
    end_phase();
  }
  for (int ti = 0; ti < 4; ti++) {
    const ty_t *t = &types[ti];
    if (!type_on(t)) continue;
    snprintf(name, sizeof name, "a2. counters: fetch&add + cas loops, %s", t->name);
    begin_phase(name, 120);
    storm_counter(t, iters / 2);
    end_phase();
  }
  for (int ti = 0; ti < 4; ti++) {
    const ty_t *t = &types[ti];
    if (!type_on(t)) continue;
    snprintf(name, sizeof name, "a3. epochs: set/swap/cas vs fetch&add, %s", t->name);
    begin_phase(name, 120);
    /* Epoch ids must fit in 15 bits for the 32-bit types. */
    storm_epoch(t, iters / 2 < 30000 / np ? iters / 2 : 30000 / np);
    end_phase();
  }
  for (int ti = 0; ti < 4; ti++) {
    const ty_t *t = &types[ti];
    if (!type_on(t)) continue;
    snprintf(name, sizeof name, "a4. bit fields: and/or/xor/add/cas, %s", t->name);
    begin_phase(name, 120);
    storm_bits(t, iters / 2, 0xB0000ULL + (uint64_t)ti * 1000);
    end_phase();
  }

  begin_phase("b. _nb batches + fh_wait / fh_wait_all", 60);
  for (int rep = 0; rep < 5; rep++)
    for (int ti = 0; ti < 4; ti++)
      if (type_on(&types[ti])) nb_batch(&types[ti]);
  end_phase();

  begin_phase("c. own unregistered memory -> FH_ERR_ACCESS", 60);
  for (int ti = 0; ti < 4; ti++) {
    works_count = 0;
    must(&types[ti], OP_SET, 0, (me + 1) % np, slot(K_HEAP, (me + 1) % np) + 12 * types[ti].size, K_HEAP, 0, 0);
    refusals(&types[ti]);
  }
  end_phase();

  begin_phase("d. misaligned, NULL, bad rank, NULL ctx", 60);
  for (int ti = 0; ti < 4; ti++) {
    works_count = 0;
    must(&types[ti], OP_SET, 0, (me + 1) % np, slot(K_HEAP, (me + 1) % np) + 12 * types[ti].size, K_HEAP, 0, 0);
    errors(&types[ti]);
  }
  end_phase();

  /* After unregistering, our region is refused to us but the previous rank still
   * reaches it (firehose path now) and finds what it left there in b. */
  begin_phase("c. after fh_mem_unregister", 60);
  {
    const ty_t *t = &types[1];
    uint64_t v = rnd();
    char *w = slot(K_REG, (me + 1) % np) + 14 * 8;
    must(t, OP_SET, 0, (me + 1) % np, w, K_REG, v, 0);
    CHECK_OK(fh_barrier(ctx));
    CHECK_OK(fh_mem_unregister(ctx, my_reg, AREA_BYTES));
    CHECK_OK(fh_barrier(ctx));
    for (int ti = 0; ti < 4; ti++)
      for (int op = 0; op < NOPS; op++)
        expect_err(&types[ti], op, (int)(rndn(2)), me, my_reg + 64, FH_ERR_ACCESS, "own unregistered region");
    uint64_t got = must(t, OP_FETCH, 0, (me + 1) % np, w, K_PLAIN, 0, 0);
    CHECK(got == v, "after unregister the next rank's word reads %#llx, expected %#llx", (unsigned long long)got,
          (unsigned long long)v);
    uint64_t old = must(t, OP_FADD, 0, (me + 1) % np, w, K_PLAIN, 5, 0);
    CHECK(old == v, "fetch_add after unregister returned %#llx, expected %#llx", (unsigned long long)old,
          (unsigned long long)v);
    CHECK_OK(fh_barrier(ctx));
    uint64_t mine_v;
    memcpy(&mine_v, my_reg + SHARED_BYTES + (size_t)((me + np - 1) % np) * 128 + 14 * 8, 8);
    uint64_t sent = v + 5, prev_sent;
    MPI_Sendrecv(&sent, 1, MPI_UINT64_T, (me + 1) % np, 7, &prev_sent, 1, MPI_UINT64_T, (me + np - 1) % np, 7,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(mine_v == prev_sent, "own ex-registered word is %#llx after a barrier, the previous rank left %#llx",
          (unsigned long long)mine_v, (unsigned long long)prev_sent);
  }
  end_phase();

  alarm(0);
  fh_free(ctx, heap);
  CHECK_OK(fh_finalize(ctx));
  {
    uint64_t o;
    int rc = fh_atomic_fetch_u64(ctx, 0, (uint64_t *)heap, &o);
    CHECK(rc == FH_ERR_STATE, "atomic after fh_finalize returned %d, expected FH_ERR_STATE", rc);
  }
  TEST_PASS("atomic");
  free(my_reg);
  free(my_plain);
  MPI_Finalize();
  return 0;
}
