/* Firehose-SMP: one context shared by several threads per rank (MPI_THREAD_MULTIPLE).
 *
 * Every rank mallocs a plain buffer (never registered, so every remote access goes
 * through firehoses) and exchanges its address. The buffer is cut into one slot per
 * (source rank, thread); only that thread ever writes or reads its slot, at every
 * rank (itself included), and it keeps a shadow copy of what each slot holds.
 *
 * Phase 1: each thread runs random operations against random ranks and random
 * offsets/lengths inside its slots (1 B .. FH_TEST_LARGE, one in six exactly that):
 *   fh_put / fh_get (blocking); fh_put_nb / fh_get_nb + fh_wait or fh_wait_all;
 *   fh_put_nbi / fh_get_nbi + fh_wait_nbi (context-wide: threads also wait for each
 *   other's implicit operations); fh_remote_pin of a range (at most f units) + a
 *   blocking and a non-blocking put inside it + a get of it + fh_release; fh_local_pin
 *   of a range of the thread's plain source buffer (at most the local share,
 *   MAXVICTIM, probed at start) held across a blocking put from it, then fh_release
 *   (with a small share the threads queue for it: a local pin storm).
 * Gets are compared with the shadow (operations in flight never overlap in a slot).
 * A blocking fh_remote_pin / fh_local_pin refused with FH_ERR_NO_RESOURCE is retried
 * for up to 10 s (another thread may hold the units through a pin it is about to
 * release) and the retries are printed; every other operation must succeed.
 *
 * Phase 2, after fh_barrier: every thread reads its slot back from every rank and
 * compares; every slot of every rank is hashed and compared with its owner's shadow
 * through MPI_Allreduce; the unused tail of each buffer must be untouched.
 *
 * Statistics: fh_stats_get (struct_size, da_wins <= da_entries, bytes_pinned_peak <=
 * limit_bytes); fh_stats_thread_get in every thread (struct_size ==
 * sizeof(fh_thread_stats_t), da_wins <= da_entries <= requests). The da_entries,
 * da_wins, rollbacks and da_waits of a rank's threads (workers + main) add up exactly
 * to the context's, and their requests are at least the context's misses + pending
 * hits + local misses. Rank 0 prints every rank's counters and its threads'.
 * If MPI refuses MPI_THREAD_MULTIPLE the test prints SKIP and exits 0.
 *
 * Knobs: FH_TEST_THREADS (4), FH_TEST_OPS per thread (3000), FH_TEST_LARGE (32K),
 * FH_TEST_BUF (4 MiB, or more so that the part of a peer's buffer one rank reaches
 * is twice what its f firehoses there cover; at most 32 MiB), FH_TEST_OPMASK (bit k
 * enables kind k of put, get, put_nb, get_nb, put_nbi, get_nbi, rpin, lpin),
 * FH_TEST_VERBOSE (print each thread's first pin refusal).
 *
 * Run: mpirun -np 2 test_fh_threads (and -np 4). Firehose settings come from the
 * environment, e.g. FH_FIREHOSE_MODE=page FH_FIREHOSE_M=32K (f = M / 4 KiB / (P-1):
 * 8 at 2 ranks; use 48K at 4 ranks for f = 4), FH_FIREHOSE_MAXVICTIM_M=16K (a local
 * share of 4 pages). */
#include <pthread.h>
#include <sched.h>
#include "common.h"

#define MAXT 16   /* threads per rank */
#define MAXOUT 16 /* non-blocking operations in flight per thread */
#define SRCBYTES ((size_t)128 * 1024)

enum { OP_PUT, OP_GET, OP_PUT_NB, OP_GET_NB, OP_PUT_NBI, OP_GET_NBI, OP_RPIN, OP_LPIN, NKINDS };
static const char *const kind_name[NKINDS] = {"put", "get", "put_nb", "get_nb", "put_nbi", "get_nbi", "rpin", "lpin"};

typedef struct {
  int target, kind;
  size_t off, len; /* in my slot at target */
  fh_handle_t h;   /* explicit handles (put_nb / get_nb) */
  unsigned char *buf, *exp;
} out_t;

typedef struct {
  int id;
  pthread_t th;
  uint64_t rng;
  unsigned char *shadow; /* np slots: what my slot at rank r holds */
  unsigned char *src;    /* plain source buffer: local pins land here */
  unsigned char *tmp;
  out_t outs[MAXOUT];
  int nout, nbi_puts, nbi_gets;
  unsigned char *obuf[MAXOUT], *oexp[MAXOUT];
  long counts[NKINDS];
  long busy; /* pins refused with FH_ERR_NO_RESOURCE and retried (see pin_retry) */
  fh_thread_stats_t ts;
} thr_t;

static int me, np, nthreads;
static fh_ctx_t *ctx;
static size_t bufsize, slot, large, unit, fper, local_units;
static long nops;
static unsigned opmask; /* FH_TEST_OPMASK: bit k enables operation kind k (default all) */
static unsigned char *rbuf; /* this rank's buffer (plain malloc) */
static void **all_bufs;
static thr_t thr[MAXT];
static pthread_barrier_t tbar;

static unsigned char pat(int owner, size_t idx, size_t o) {
  return (unsigned char)(owner * 113 + idx * 37 + o * 13 + (o >> 9) * 5 + 3);
}

static size_t parse_size(const char *s) {
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  switch (*end) {
  case 'k': case 'K': v <<= 10; break;
  case 'm': case 'M': v <<= 20; break;
  default: break;
  }
  return (size_t)v;
}

static size_t env_size(const char *name, size_t dflt) {
  const char *v = getenv(name);
  return v && *v ? parse_size(v) : dflt;
}

static uint64_t fnv(const unsigned char *p, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

static void fill_random(thr_t *T, unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i += 8) {
    uint64_t r = rng_next(&T->rng);
    size_t k = n - i < 8 ? n - i : 8;
    memcpy(p + i, &r, k);
  }
}

/* Units (pages or regions) [addr, addr+len) touches. */
static size_t pieces(uintptr_t addr, size_t len) {
  return len == 0 ? 0 : (addr + len - 1) / unit - addr / unit + 1;
}

/* Shrink len so [addr, addr+len) touches at most maxp units (maxp >= 1). */
static size_t fit_units(uintptr_t addr, size_t len, size_t maxp) {
  while (len > 1 && pieces(addr, len) > maxp) {
    uintptr_t lo = (addr + len - 1) / unit * unit;
    len = lo > addr ? (size_t)(lo - addr) : len / 2;
  }
  return len;
}

/* 1 B .. large: one in six exactly large, else roughly log-uniform. */
static size_t rand_len(thr_t *T) {
  if (rng_next(&T->rng) % 6 == 0) return large;
  unsigned bits = 0;
  while (((size_t)2 << bits) <= large) bits++;
  size_t lo = (size_t)1 << (rng_next(&T->rng) % (bits + 1));
  size_t n = lo + rng_next(&T->rng) % lo;
  return n > large ? large : n;
}

static size_t slot_index(int rank, int t) { return (size_t)rank * (size_t)nthreads + (size_t)t; }
static unsigned char *remote_slot(int target, int t) {
  return (unsigned char *)all_bufs[target] + slot_index(me, t) * slot;
}

static void check_bytes(thr_t *T, const unsigned char *got, const unsigned char *want, size_t n, const char *what,
                        int target, size_t off) {
  if (memcmp(got, want, n) == 0) return;
  for (size_t i = 0; i < n; i++)
    if (got[i] != want[i])
      FAILF("thread %d: %s (rank %d, slot offset %zu, %zu B): byte %zu is %d, expected %d", T->id, what, target, off,
            n, i, got[i], want[i]);
}

/* Complete every operation this thread has in flight and check the gets. */
static void drain(thr_t *T) {
  fh_handle_t hs[MAXOUT];
  size_t nh = 0;
  for (int i = 0; i < T->nout; i++)
    if (T->outs[i].kind == OP_PUT_NB || T->outs[i].kind == OP_GET_NB) hs[nh++] = T->outs[i].h;
  if (rng_next(&T->rng) % 2) {
    CHECK_OK(fh_wait_all(ctx, hs, nh));
    for (size_t i = 0; i < nh; i++) CHECK(hs[i] == FH_HANDLE_NULL, "fh_wait_all left handle %zu", i);
  } else {
    for (size_t i = 0; i < nh; i++) CHECK_OK(fh_wait(ctx, hs[i]));
  }
  int which = (T->nbi_puts ? FH_NBI_PUTS : 0) | (T->nbi_gets ? FH_NBI_GETS : 0);
  if (which) CHECK_OK(fh_wait_nbi(ctx, which));
  for (int i = 0; i < T->nout; i++) {
    out_t *o = &T->outs[i];
    if (o->kind == OP_GET_NB || o->kind == OP_GET_NBI)
      check_bytes(T, o->buf, o->exp, o->len, o->kind == OP_GET_NB ? "fh_get_nb" : "fh_get_nbi", o->target, o->off);
  }
  T->nout = T->nbi_puts = T->nbi_gets = 0;
}

/* Drain first if [off, off+len) of my slot at target overlaps an operation in flight. */
static void no_overlap(thr_t *T, int target, size_t off, size_t len) {
  for (int i = 0; i < T->nout; i++) {
    out_t *o = &T->outs[i];
    if (o->target == target && off < o->off + o->len && o->off < off + len) {
      drain(T);
      return;
    }
  }
}

/* Explicit pins: the library refuses a blocking pin with FH_ERR_NO_RESOURCE when the
 * units it needs are held by explicit pins and no other thread is inside a library
 * call at that moment (another thread of this rank may hold one between its calls).
 * Retry those for up to 10 s; any other error, or a refusal that lasts, fails. */
static int pin_retry(thr_t *T, int rc, double *t0) {
  if (rc != FH_ERR_NO_RESOURCE || nthreads == 1) return 0;
  if (*t0 == 0) *t0 = MPI_Wtime();
  if (MPI_Wtime() - *t0 > 10.0) return 0;
  if (T->busy++ == 0 && getenv("FH_TEST_VERBOSE")) {
    char m[256];
    fh_last_error(m, sizeof m);
    fprintf(stderr, "[rank %d] thread %d: pin refused, retrying: %s\n", me, T->id, m);
  }
  sched_yield();
  return 1;
}

static void op_remote_pin(thr_t *T, int t, size_t off, size_t len) {
  unsigned char *base = remote_slot(t, T->id);
  len = fit_units((uintptr_t)(base + off), len, fper);
  no_overlap(T, t, off, len);
  fh_pin_t *pin = NULL;
  int rc;
  double t0 = 0;
  while (pin_retry(T, rc = fh_remote_pin(ctx, t, base + off, len, 0, NULL, NULL, &pin), &t0)) {}
  CHECK(rc == FH_OK, "thread %d: fh_remote_pin(rank %d, %zu B) returned %d (%s)", T->id, t, len, rc,
        fh_strerror(rc));
  CHECK(pin != NULL, "fh_remote_pin gave no pin");
  const void *a;
  size_t l;
  CHECK_OK(fh_pin_bounds(pin, &a, &l));
  CHECK(a == base + off && l == len, "remote pin bounds %p+%zu, asked %p+%zu", a, l, (void *)(base + off), len);
  /* Two puts inside the pinned range (the second one non-blocking), then read it all. */
  for (int k = 0; k < 2; k++) {
    size_t so = rng_next(&T->rng) % len, sl = 1 + rng_next(&T->rng) % (len - so);
    fill_random(T, T->tmp, sl);
    if (k == 0) {
      CHECK_OK(fh_put(ctx, t, base + off + so, T->tmp, sl));
    } else {
      fh_handle_t h;
      CHECK_OK(fh_put_nb(ctx, t, base + off + so, T->tmp, sl, &h));
      CHECK_OK(fh_wait(ctx, h));
    }
    memcpy(T->shadow + (size_t)t * slot + off + so, T->tmp, sl);
  }
  memset(T->tmp, 0xA5, len);
  CHECK_OK(fh_get(ctx, T->tmp, t, base + off, len));
  check_bytes(T, T->tmp, T->shadow + (size_t)t * slot + off, len, "fh_get inside a remote pin", t, off);
  CHECK_OK(fh_release(ctx, pin));
}

static void op_local_pin(thr_t *T, int t, size_t off, size_t len) {
  size_t lo = rng_next(&T->rng) % (SRCBYTES - len + 1);
  unsigned char *s = T->src + lo;
  len = fit_units((uintptr_t)s, len, local_units);
  no_overlap(T, t, off, len);
  fh_pin_t *pin = NULL;
  int rc;
  double t0 = 0;
  while (pin_retry(T, rc = fh_local_pin(ctx, s, len, &pin), &t0)) {}
  CHECK(rc == FH_OK, "thread %d: fh_local_pin(%zu B) returned %d (%s)", T->id, len, rc, fh_strerror(rc));
  const void *a;
  size_t l;
  CHECK_OK(fh_pin_bounds(pin, &a, &l));
  CHECK(a == s && l == len, "local pin bounds %p+%zu, asked %p+%zu", a, l, (void *)s, len);
  /* Hold the local pin across a blocking put from it (which may miss remotely). */
  fill_random(T, s, len);
  CHECK_OK(fh_put(ctx, t, remote_slot(t, T->id) + off, s, len));
  memcpy(T->shadow + (size_t)t * slot + off, s, len);
  CHECK_OK(fh_release(ctx, pin));
}

static void random_op(thr_t *T) {
  int t = (int)(rng_next(&T->rng) % (uint64_t)np);
  int kind = (int)(rng_next(&T->rng) % NKINDS);
  while (!(opmask >> kind & 1)) kind = (kind + 1) % NKINDS;
  if (kind == OP_RPIN && t == me) t = (t + 1) % np; /* remote pins name another rank */
  if ((kind == OP_RPIN && t == me) || (kind == OP_LPIN && local_units == 0)) kind = OP_PUT;
  size_t len = rand_len(T);
  if (len > slot) len = slot;
  size_t off = rng_next(&T->rng) % (slot - len + 1);
  unsigned char *raddr = remote_slot(t, T->id) + off;
  unsigned char *sh = T->shadow + (size_t)t * slot + off;
  T->counts[kind]++;
  if (kind == OP_RPIN) {
    op_remote_pin(T, t, off, len);
  } else if (kind == OP_LPIN) {
    op_local_pin(T, t, off, len);
  } else if (kind == OP_PUT) {
    no_overlap(T, t, off, len);
    fill_random(T, T->tmp, len);
    CHECK_OK(fh_put(ctx, t, raddr, T->tmp, len));
    memcpy(sh, T->tmp, len);
  } else if (kind == OP_GET) {
    no_overlap(T, t, off, len);
    memset(T->tmp, 0x5A, len);
    CHECK_OK(fh_get(ctx, T->tmp, t, raddr, len));
    check_bytes(T, T->tmp, sh, len, "fh_get", t, off);
  } else {
    no_overlap(T, t, off, len);
    if (T->nout == MAXOUT) drain(T);
    out_t *o = &T->outs[T->nout];
    o->target = t; o->kind = kind; o->off = off; o->len = len; o->h = FH_HANDLE_NULL;
    o->buf = T->obuf[T->nout]; o->exp = T->oexp[T->nout];
    if (kind == OP_PUT_NB || kind == OP_PUT_NBI) {
      fill_random(T, o->buf, len);
      memcpy(sh, o->buf, len);
      if (kind == OP_PUT_NB) {
        CHECK_OK(fh_put_nb(ctx, t, raddr, o->buf, len, &o->h));
      } else {
        CHECK_OK(fh_put_nbi(ctx, t, raddr, o->buf, len));
        T->nbi_puts++;
      }
    } else {
      memset(o->buf, 0x3C, len);
      memcpy(o->exp, sh, len);
      if (kind == OP_GET_NB) {
        CHECK_OK(fh_get_nb(ctx, o->buf, t, raddr, len, &o->h));
      } else {
        CHECK_OK(fh_get_nbi(ctx, o->buf, t, raddr, len));
        T->nbi_gets++;
      }
    }
    T->nout++;
  }
  if (rng_next(&T->rng) % 32 == 0) drain(T);
}

/* Thread 0 runs the context's barrier while the others wait (one at a time per context). */
static void all_barrier(thr_t *T) {
  pthread_barrier_wait(&tbar);
  if (T->id == 0) CHECK_OK(fh_barrier(ctx));
  pthread_barrier_wait(&tbar);
}

static void *worker(void *arg) {
  thr_t *T = arg;
  CHECK_OK(fh_stats_thread_reset());
  for (long i = 0; i < nops; i++) random_op(T);
  drain(T);
  all_barrier(T);
  /* Phase 2: read every slot of mine back from every rank. */
  for (int t = 0; t < np; t++) {
    unsigned char *base = remote_slot(t, T->id);
    for (size_t off = 0; off < slot; off += large) {
      size_t n = slot - off < large ? slot - off : large;
      memset(T->tmp, 0xC3, n);
      if ((off / large) % 2) {
        CHECK_OK(fh_get(ctx, T->tmp, t, base + off, n));
      } else {
        CHECK_OK(fh_get_nbi(ctx, T->tmp, t, base + off, n));
        CHECK_OK(fh_wait_nbi(ctx, FH_NBI_GETS));
      }
      check_bytes(T, T->tmp, T->shadow + (size_t)t * slot + off, n, "final read-back", t, off);
    }
  }
  all_barrier(T);
  memset(&T->ts, 0xFF, sizeof T->ts);
  CHECK_OK(fh_stats_thread_get(&T->ts));
  fh_thread_stats_t *s = &T->ts;
  CHECK(s->struct_size == sizeof(fh_thread_stats_t), "thread %d: fh_thread_stats_t struct_size %llu, expected %zu",
        T->id, (unsigned long long)s->struct_size, sizeof(fh_thread_stats_t));
  CHECK(s->da_wins <= s->da_entries && s->da_entries <= s->requests,
        "thread %d: requests %llu da_entries %llu da_wins %llu", T->id, (unsigned long long)s->requests,
        (unsigned long long)s->da_entries, (unsigned long long)s->da_wins);
  return NULL;
}

/* Largest number of units (<= what a 'large' access can touch) one fh_local_pin may
 * cover: the local share (MAXVICTIM), found by trying. */
static size_t probe_local_share(void) {
  size_t want = large / unit + 2, got = 0;
  uintptr_t base = ((uintptr_t)rbuf + unit - 1) / unit * unit;
  for (size_t k = 1; k <= want; k++) {
    if (base + k * unit > (uintptr_t)rbuf + bufsize) break;
    fh_pin_t *pin = NULL;
    int rc = fh_local_pin(ctx, (void *)base, k * unit, &pin);
    if (rc == FH_ERR_NO_RESOURCE) break;
    CHECK(rc == FH_OK, "fh_local_pin of %zu units: %d (%s)", k, rc, fh_strerror(rc));
    CHECK_OK(fh_release(ctx, pin));
    got = k;
  }
  return got;
}

int main(int argc, char **argv) {
  int provided;
  /* Firehose itself is under test: node peers' memory would otherwise go through the
   * kernel's single copy (FH_CMA). An explicit FH_CMA in the environment still wins. */
  setenv("FH_CMA", "0", 0);
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  fh_test_rank = me;
  if (provided < MPI_THREAD_MULTIPLE) {
    if (me == 0) printf("SKIP fh_threads: MPI provides thread level %d, not MPI_THREAD_MULTIPLE\n", provided);
    MPI_Finalize();
    return 0;
  }
  CHECK_OK(fh_init(MPI_COMM_WORLD, NULL, &ctx));
  CHECK(fh_rank(ctx) == me, "fh_rank %d, MPI rank %d", fh_rank(ctx), me);
  np = fh_size(ctx);

  nthreads = (int)env_size("FH_TEST_THREADS", 4);
  CHECK(nthreads >= 1 && nthreads <= MAXT, "FH_TEST_THREADS must be 1..%d", MAXT);
  nops = (long)env_size("FH_TEST_OPS", 3000);
  opmask = (unsigned)env_size("FH_TEST_OPMASK", (1u << NKINDS) - 1);
  CHECK((opmask & ((1u << NKINDS) - 1)) != 0, "FH_TEST_OPMASK enables no operation");
  large = env_size("FH_TEST_LARGE", (size_t)32 << 10);
  CHECK(large >= 8 && large <= SRCBYTES, "FH_TEST_LARGE must be 8 .. %zu", SRCBYTES);

  fh_stats_t st;
  memset(&st, 0, sizeof st);
  CHECK_OK(fh_stats_get(ctx, &st));
  CHECK(st.struct_size == sizeof(fh_stats_t), "fh_stats_t struct_size %llu, expected %zu",
        (unsigned long long)st.struct_size, sizeof(fh_stats_t));
  unit = (size_t)st.unit_bytes;
  fper = (size_t)st.firehoses_per_peer;
  CHECK(unit >= 4096 && (unit & (unit - 1)) == 0, "unit_bytes %zu", unit);
  CHECK(fper >= 1, "firehoses_per_peer is 0");
  if (fper > 64) fper = 64; /* strategies without a bound report a huge f */
  /* Default buffer: 4 MiB, or more so that what one rank's threads reach at one peer
   * (bufsize / np) is twice what its f firehoses there cover (large regions); at most
   * 32 MiB. */
  size_t dflt = (size_t)4 << 20, cover = 2 * fper * unit * (size_t)np;
  if (cover > dflt) dflt = cover < ((size_t)32 << 20) ? cover : (size_t)32 << 20;
  bufsize = env_size("FH_TEST_BUF", dflt);
  slot = (bufsize / ((size_t)np * (size_t)nthreads)) & ~(size_t)63;
  CHECK(slot >= large, "FH_TEST_BUF %zu gives slots of %zu B, smaller than FH_TEST_LARGE %zu", bufsize, slot, large);

  rbuf = malloc(bufsize);
  CHECK(rbuf != NULL, "malloc(%zu)", bufsize);
  size_t used = (size_t)np * (size_t)nthreads * slot;
  for (size_t i = 0; i < (size_t)np * (size_t)nthreads; i++)
    for (size_t o = 0; o < slot; o++) rbuf[i * slot + o] = pat(me, i, o);
  for (size_t o = used; o < bufsize; o++) rbuf[o] = pat(me, 9999, o);
  all_bufs = malloc(sizeof(void *) * (size_t)np);
  exchange_ptrs(rbuf, all_bufs, MPI_COMM_WORLD);
  local_units = probe_local_share();

  for (int i = 0; i < nthreads; i++) {
    thr_t *T = &thr[i];
    T->id = i;
    T->rng = 0x2545F4914F6CDD1DULL ^ ((uint64_t)(me + 1) * 0x9E3779B97F4A7C15ULL) ^
             ((uint64_t)(i + 1) * 0xD1B54A32D192ED03ULL);
    T->shadow = malloc((size_t)np * slot);
    T->src = malloc(SRCBYTES);
    T->tmp = malloc(large > slot ? large : slot);
    CHECK(T->shadow && T->src && T->tmp, "malloc");
    for (int r = 0; r < np; r++)
      for (size_t o = 0; o < slot; o++) T->shadow[(size_t)r * slot + o] = pat(r, slot_index(me, i), o);
    for (int k = 0; k < MAXOUT; k++) {
      T->obuf[k] = malloc(large);
      T->oexp[k] = malloc(large);
      CHECK(T->obuf[k] && T->oexp[k], "malloc");
    }
  }
  if (me == 0)
    printf("fh_threads: %d ranks x %d threads, %s mode, unit %zu B, f %llu, limit_bytes %llu, local share %zu "
           "units, buffer %zu B, slot %zu B, %ld ops/thread up to %zu B\n",
           np, nthreads, st.mode == 0 ? "page" : "region", unit, (unsigned long long)st.firehoses_per_peer,
           (unsigned long long)st.limit_bytes, local_units, bufsize, slot, nops, large);
  fflush(stdout);
  CHECK_OK(fh_barrier(ctx));

  double t0 = MPI_Wtime();
  CHECK(pthread_barrier_init(&tbar, NULL, (unsigned)nthreads) == 0, "pthread_barrier_init");
  for (int i = 0; i < nthreads; i++)
    CHECK(pthread_create(&thr[i].th, NULL, worker, &thr[i]) == 0, "pthread_create");
  for (int i = 0; i < nthreads; i++) pthread_join(thr[i].th, NULL);
  pthread_barrier_destroy(&tbar);
  double dt = MPI_Wtime() - t0;
  CHECK_OK(fh_test_nbi(ctx, FH_NBI_ALL));

  /* End to end: hash every slot of every rank's buffer, compare with the owners' shadows. */
  size_t ns = (size_t)np * (size_t)np * (size_t)nthreads; /* [target][source][thread] */
  uint64_t *want = calloc(ns, 8), *have = calloc(ns, 8), *want_all = malloc(ns * 8), *have_all = malloc(ns * 8);
  for (int r = 0; r < np; r++)
    for (int i = 0; i < nthreads; i++)
      want[((size_t)r * (size_t)np + (size_t)me) * (size_t)nthreads + (size_t)i] =
          fnv(thr[i].shadow + (size_t)r * slot, slot);
  for (size_t k = 0; k < (size_t)np * (size_t)nthreads; k++)
    have[(size_t)me * (size_t)np * (size_t)nthreads + k] = fnv(rbuf + k * slot, slot);
  MPI_Allreduce(want, want_all, (int)ns, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(have, have_all, (int)ns, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  for (size_t k = 0; k < ns; k++)
    CHECK(want_all[k] == have_all[k],
          "checksum of rank %zu's slot of (rank %zu, thread %zu): owner's shadow %#llx, target memory %#llx",
          k / ((size_t)np * (size_t)nthreads), k / (size_t)nthreads % (size_t)np, k % (size_t)nthreads,
          (unsigned long long)want_all[k], (unsigned long long)have_all[k]);
  for (size_t o = used; o < bufsize; o++)
    if (rbuf[o] != pat(me, 9999, o)) FAILF("unused tail byte %zu changed to %d", o, rbuf[o]);
  CHECK_OK(fh_barrier(ctx));

  /* Statistics: the context's and the threads'. */
  memset(&st, 0, sizeof st);
  CHECK_OK(fh_stats_get(ctx, &st));
  CHECK(st.struct_size == sizeof(fh_stats_t), "fh_stats_t struct_size %llu", (unsigned long long)st.struct_size);
  CHECK(st.da_wins <= st.da_entries, "da_wins %llu > da_entries %llu", (unsigned long long)st.da_wins,
        (unsigned long long)st.da_entries);
  CHECK(st.bytes_pinned_peak <= st.limit_bytes, "bytes_pinned_peak %llu > limit_bytes %llu",
        (unsigned long long)st.bytes_pinned_peak, (unsigned long long)st.limit_bytes);
  CHECK(np == 1 || st.hits + st.misses + st.pending_hits > 0, "no firehose accesses counted");
  fh_thread_stats_t mts; /* this (main) thread: the local-share probe, barriers */
  memset(&mts, 0xFF, sizeof mts);
  CHECK_OK(fh_stats_thread_get(&mts));
  CHECK(mts.struct_size == sizeof mts, "main thread: struct_size %llu", (unsigned long long)mts.struct_size);
  uint64_t sum[5] = {mts.requests, mts.da_entries, mts.da_wins, mts.rollbacks, mts.da_waits};
  for (int i = 0; i < nthreads; i++) {
    sum[0] += thr[i].ts.requests; sum[1] += thr[i].ts.da_entries; sum[2] += thr[i].ts.da_wins;
    sum[3] += thr[i].ts.rollbacks; sum[4] += thr[i].ts.da_waits;
  }
  CHECK(sum[1] == st.da_entries && sum[2] == st.da_wins && sum[3] == st.rollbacks && sum[4] == st.da_waits,
        "threads' da_entries/da_wins/rollbacks/da_waits %llu/%llu/%llu/%llu differ from the context's "
        "%llu/%llu/%llu/%llu",
        (unsigned long long)sum[1], (unsigned long long)sum[2], (unsigned long long)sum[3],
        (unsigned long long)sum[4], (unsigned long long)st.da_entries, (unsigned long long)st.da_wins,
        (unsigned long long)st.rollbacks, (unsigned long long)st.da_waits);
  CHECK(sum[0] >= st.misses + st.pending_hits + st.local_misses,
        "threads' requests %llu < misses %llu + pending hits %llu + local misses %llu", (unsigned long long)sum[0],
        (unsigned long long)st.misses, (unsigned long long)st.pending_hits, (unsigned long long)st.local_misses);

  /* Rank 0 prints every rank's context counters and its own threads'. */
  uint64_t mine[8] = {st.hits, st.misses, st.pending_hits, st.local_misses, st.da_entries,
                      st.da_wins, st.rollbacks, st.da_waits};
  uint64_t *all = malloc(sizeof mine * (size_t)np);
  MPI_Gather(mine, 8, MPI_UINT64_T, all, 8, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  if (me == 0) {
    printf("fh_threads: phase 1+2 took %.2f s on rank 0\n", dt);
    for (int r = 0; r < np; r++) {
      uint64_t *a = all + 8 * r;
      printf("fh_threads: rank %d hits %llu misses %llu pending %llu local misses %llu | DA entries %llu wins "
             "%llu rollbacks %llu waits %llu\n",
             r, (unsigned long long)a[0], (unsigned long long)a[1], (unsigned long long)a[2],
             (unsigned long long)a[3], (unsigned long long)a[4], (unsigned long long)a[5],
             (unsigned long long)a[6], (unsigned long long)a[7]);
    }
    for (int i = 0; i < nthreads; i++) {
      fh_thread_stats_t *s = &thr[i].ts;
      printf("fh_threads: rank 0 thread %d requests %llu da_entries %llu da_wins %llu rollbacks %llu da_waits "
             "%llu stall %.1f ms | ops",
             i, (unsigned long long)s->requests, (unsigned long long)s->da_entries,
             (unsigned long long)s->da_wins, (unsigned long long)s->rollbacks, (unsigned long long)s->da_waits,
             (double)s->stall_ns / 1e6);
      for (int k = 0; k < NKINDS; k++) printf(" %s %ld", kind_name[k], thr[i].counts[k]);
      printf(" | pin retries %ld", thr[i].busy);
      printf("\n");
    }
  }
  free(all);
  CHECK_OK(fh_finalize(ctx));
  TEST_PASS("fh_threads");
  for (int i = 0; i < nthreads; i++) {
    for (int k = 0; k < MAXOUT; k++) { free(thr[i].obuf[k]); free(thr[i].oexp[k]); }
    free(thr[i].shadow); free(thr[i].src); free(thr[i].tmp);
  }
  free(want); free(have); free(want_all); free(have_all); free(all_bufs); free(rbuf);
  MPI_Finalize();
  return 0;
}
