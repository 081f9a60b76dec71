/* Firehose on ordinary memory: random puts and gets to plain malloc'd memory (never
 * registered), to a peer's stack and to a static array, with every byte checked.
 *
 * Every rank owns a working set of FH_TEST_WS bytes (default 4x the limit_bytes
 * (M + MAXVICTIM) the library reports, so accesses miss and evict). Its first half
 * is read-only (a pattern of (owner, offset)); the second half has one lane per
 * writer. Phase 1: FH_TEST_OPS (default 3000) random fh_put / fh_get / fh_put_nb /
 * fh_get_nbi of 8 B .. 64 KiB to random ranks and offsets; puts go to the writer's
 * own lane, gets read the read-only half (checked against the pattern) or the
 * writer's own lane (checked against the writer's local model of it). Operations in
 * flight never overlap in a lane, so the model is exact. Phase 2: each writer puts
 * into its lane of every rank's stack array and static array; targets check their
 * memory locally, writers read other writers' lanes back with fh_get_nbi. Phase 3:
 * every writer reads its lanes back with fh_get and compares with its model, and a
 * per-(target, writer) checksum of the model is compared with the target's actual
 * memory through MPI_Allreduce. Finally fh_stats_get: bytes_pinned_peak <=
 * limit_bytes, hits + misses > 0; rank 0 prints the hit rates.
 *
 * FH_REGISTRATION (read by the library) selects the strategy; with pin-everything or
 * rendezvous-keep the default working set is limit_bytes / 4 (pins are never given
 * back, so a larger one would end in FH_ERR_NO_RESOURCE). Phases are separated by
 * fh_barrier, which keeps serving peers' requests. */
#include "common.h"

#define MAXSZ ((size_t)64 * 1024) /* largest operation */
#define MAXOUT 32                 /* non-blocking operations in flight */
#define STACK_BYTES ((size_t)64 * 1024)
#define STATIC_BYTES ((size_t)256 * 1024)

static unsigned char g_static[STATIC_BYTES];

static int me, np;
static fh_ctx_t *ctx;
static size_t ws, ro, lane;          /* working set, read-only part, one lane */
static unsigned char *wsbuf;         /* my working set (plain malloc) */
static void **all_ws;                /* everyone's */
static unsigned char *model;         /* np lanes: what my lane at rank t holds */
static uint64_t rng;

/* ---- patterns ---- */
static unsigned char pat_ro(int owner, size_t o) {
  return (unsigned char)(owner * 97 + o * 13 + (o >> 10) * 7 + 5);
}
static unsigned char pat_lane(int owner, int writer, size_t o) {
  return (unsigned char)(owner * 59 + writer * 17 + o * 11 + (o >> 9) * 3 + 1);
}
static unsigned char pat_ss(int writer, int target, int which, size_t o) {
  return (unsigned char)(writer * 71 + target * 29 + which * 101 + o * 7 + (o >> 8));
}

static size_t parse_size(const char *s) {
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  switch (*end) {
  case 'k': case 'K': v <<= 10; break;
  case 'm': case 'M': v <<= 20; break;
  case 'g': case 'G': v <<= 30; break;
  default: break;
  }
  return (size_t)v;
}

static uint64_t fnv(const unsigned char *p, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

static void fill_random(unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i += 8) {
    uint64_t r = rng_next(&rng);
    size_t k = n - i < 8 ? n - i : 8;
    memcpy(p + i, &r, k);
  }
}

/* 8 B .. 64 KiB, roughly log-uniform. */
static size_t rand_size(void) {
  unsigned sh = (unsigned)(rng_next(&rng) % 14); /* 8 << 0 .. 8 << 13 = 64 KiB */
  size_t lo = (size_t)8 << sh;
  size_t sz = lo + rng_next(&rng) % lo;
  return sz > MAXSZ ? MAXSZ : sz;
}

static unsigned char *remote_lane(int t) {
  return (unsigned char *)all_ws[t] + ro + (size_t)me * lane;
}

/* ---- operations in flight ---- */
typedef struct {
  int target, is_put, in_lane;
  size_t off, len; /* in my lane (in_lane) or in the read-only part */
  fh_handle_t h;   /* puts: explicit handle; gets: implicit (nbi) */
  unsigned char *buf, *exp;
} out_t;
static out_t outs[MAXOUT];
static int nout;
static unsigned char *slot_buf[MAXOUT], *slot_exp[MAXOUT], *tmp;
static long counts[4];

static void check_bytes(const unsigned char *got, const unsigned char *want, size_t n, const char *what,
                        int target, size_t off) {
  if (memcmp(got, want, n) == 0) return;
  for (size_t i = 0; i < n; i++)
    if (got[i] != want[i])
      FAILF("%s (rank %d, offset %zu, %zu B): byte %zu is %d, expected %d", what, target, off, n, i, got[i],
            want[i]);
}

static void expect_ro(const unsigned char *got, int target, size_t off, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++)
    if (got[i] != pat_ro(target, off + i))
      FAILF("%s of the read-only part (rank %d, offset %zu, %zu B): byte %zu is %d, expected %d", what, target,
            off, n, i, got[i], pat_ro(target, off + i));
}

static void drain(void) {
  for (int i = 0; i < nout; i++)
    if (outs[i].is_put) CHECK_OK(fh_wait(ctx, outs[i].h));
  CHECK_OK(fh_wait_nbi(ctx, FH_NBI_GETS));
  for (int i = 0; i < nout; i++) {
    out_t *o = &outs[i];
    if (o->is_put) continue;
    if (o->in_lane)
      check_bytes(o->buf, o->exp, o->len, "fh_get_nbi of my lane", o->target, o->off);
    else
      expect_ro(o->buf, o->target, o->off, o->len, "fh_get_nbi");
  }
  nout = 0;
}

/* Drain first if [off, off+len) of my lane at t overlaps an operation in flight. */
static void no_overlap(int t, size_t off, size_t len) {
  for (int i = 0; i < nout; i++) {
    out_t *o = &outs[i];
    if (o->in_lane && o->target == t && off < o->off + o->len && o->off < off + len) {
      drain();
      return;
    }
  }
}

static void random_op(void) {
  int t = (int)(rng_next(&rng) % (uint64_t)np);
  int kind = (int)(rng_next(&rng) % 4); /* put, get, put_nb, get_nbi */
  size_t len = rand_size();
  int in_lane = kind == 0 || kind == 2 || rng_next(&rng) % 2;
  size_t area = in_lane ? lane : ro;
  if (len > area) len = area;
  size_t off = rng_next(&rng) % (area - len + 1);
  counts[kind]++;
  if (in_lane) no_overlap(t, off, len);
  if (kind >= 2 && nout == MAXOUT) drain();
  unsigned char *raddr = in_lane ? remote_lane(t) + off : (unsigned char *)all_ws[t] + off;
  unsigned char *m = in_lane ? model + (size_t)t * lane + off : NULL; /* my model of the range */
  switch (kind) {
  case 0:
    fill_random(tmp, len);
    CHECK_OK(fh_put(ctx, t, raddr, tmp, len));
    memcpy(m, tmp, len);
    break;
  case 1:
    memset(tmp, 0xA5, len);
    CHECK_OK(fh_get(ctx, tmp, t, raddr, len));
    if (in_lane)
      check_bytes(tmp, m, len, "fh_get of my lane", t, off);
    else
      expect_ro(tmp, t, off, len, "fh_get");
    break;
  default: {
    out_t *o = &outs[nout];
    o->target = t; o->is_put = kind == 2; o->in_lane = in_lane; o->off = off; o->len = len;
    o->buf = slot_buf[nout]; o->exp = slot_exp[nout];
    if (o->is_put) {
      fill_random(o->buf, len);
      memcpy(m, o->buf, len);
      CHECK_OK(fh_put_nb(ctx, t, raddr, o->buf, len, &o->h));
    } else {
      memset(o->buf, 0x5A, len);
      if (in_lane) memcpy(o->exp, m, len);
      CHECK_OK(fh_get_nbi(ctx, o->buf, t, raddr, len));
    }
    nout++;
    break;
  }
  }
  if (rng_next(&rng) % 64 == 0) drain();
}

/* ---- phase 2: stack and static memory ---- */
static void stack_static(unsigned char *stackbuf) {
  void *stacks[256], *statics[256];
  exchange_ptrs(stackbuf, stacks, MPI_COMM_WORLD);
  exchange_ptrs(g_static, statics, MPI_COMM_WORLD);
  size_t sl = STACK_BYTES / (size_t)np, gl = STATIC_BYTES / (size_t)np;
  unsigned char *src = malloc(2 * (size_t)np * gl);
  fh_handle_t *hs = malloc(sizeof(fh_handle_t) * 2 * (size_t)np);
  /* Put my lane of everyone's stack and static array: blocking or explicit-handle. */
  for (int t = 0; t < np; t++)
    for (int which = 0; which < 2; which++) {
      size_t L = which ? gl : sl;
      unsigned char *base = which ? statics[t] : stacks[t];
      unsigned char *s = src + ((size_t)t * 2 + (size_t)which) * gl;
      for (size_t i = 0; i < L; i++) s[i] = pat_ss(me, t, which, i);
      hs[t * 2 + which] = FH_HANDLE_NULL;
      if ((t + which) % 2)
        CHECK_OK(fh_put(ctx, t, base + (size_t)me * L, s, L));
      else
        CHECK_OK(fh_put_nb(ctx, t, base + (size_t)me * L, s, L, &hs[t * 2 + which]));
    }
  CHECK_OK(fh_wait_all(ctx, hs, 2 * (size_t)np));
  CHECK_OK(fh_barrier(ctx));
  /* My stack and static arrays hold every writer's lane. */
  for (int w = 0; w < np; w++) {
    for (size_t i = 0; i < sl; i++)
      if (stackbuf[(size_t)w * sl + i] != pat_ss(w, me, 0, i))
        FAILF("stack array: byte %zu of writer %d's lane is %d, expected %d", i, w, stackbuf[(size_t)w * sl + i],
              pat_ss(w, me, 0, i));
    for (size_t i = 0; i < gl; i++)
      if (g_static[(size_t)w * gl + i] != pat_ss(w, me, 1, i))
        FAILF("static array: byte %zu of writer %d's lane is %d, expected %d", i, w, g_static[(size_t)w * gl + i],
              pat_ss(w, me, 1, i));
  }
  CHECK_OK(fh_barrier(ctx));
  /* Read the next writer's lanes back from everyone (implicit handles), and a few
   * small gets at random offsets of the static arrays. */
  int w = (me + 1) % np;
  unsigned char *dst = malloc(2 * (size_t)np * gl);
  memset(dst, 0, 2 * (size_t)np * gl);
  for (int t = 0; t < np; t++) {
    CHECK_OK(fh_get_nbi(ctx, dst + (size_t)t * 2 * gl, t, (unsigned char *)stacks[t] + (size_t)w * sl, sl));
    CHECK_OK(fh_get_nbi(ctx, dst + ((size_t)t * 2 + 1) * gl, t, (unsigned char *)statics[t] + (size_t)w * gl, gl));
  }
  CHECK_OK(fh_wait_nbi(ctx, FH_NBI_ALL));
  for (int t = 0; t < np; t++)
    for (int which = 0; which < 2; which++) {
      size_t L = which ? gl : sl;
      const unsigned char *d = dst + ((size_t)t * 2 + (size_t)which) * gl;
      for (size_t i = 0; i < L; i++)
        if (d[i] != pat_ss(w, t, which, i))
          FAILF("fh_get_nbi of rank %d's %s array (writer %d's lane): byte %zu is %d, expected %d", t,
                which ? "static" : "stack", w, i, d[i], pat_ss(w, t, which, i));
    }
  for (int k = 0; k < 50; k++) {
    int t = (int)(rng_next(&rng) % (uint64_t)np);
    size_t o = rng_next(&rng) % (STATIC_BYTES - 8);
    unsigned char b[8];
    CHECK_OK(fh_get(ctx, b, t, (unsigned char *)statics[t] + o, 8));
    for (size_t i = 0; i < 8; i++) {
      size_t x = o + i;
      int ww = (int)(x / gl);
      unsigned char want = ww < np ? pat_ss(ww, t, 1, x % gl) : 0;
      CHECK(b[i] == want, "8-byte get of rank %d's static array at %zu: byte %zu is %d, expected %d", t, o, i,
            b[i], want);
    }
  }
  CHECK_OK(fh_barrier(ctx));
  free(src); free(dst); free(hs);
}

/* ---- phase 3: read everything back, checksums across ranks ---- */
static void verify_all(void) {
  for (int t = 0; t < np; t++)
    for (size_t off = 0; off < lane; off += MAXSZ) {
      size_t n = lane - off < MAXSZ ? lane - off : MAXSZ;
      memset(tmp, 0xC3, n);
      CHECK_OK(fh_get(ctx, tmp, t, remote_lane(t) + off, n));
      check_bytes(tmp, model + (size_t)t * lane + off, n, "final read-back of my lane", t, off);
    }
  CHECK_OK(fh_barrier(ctx));
  size_t nn = (size_t)np * (size_t)np;
  uint64_t *want = calloc(nn, sizeof *want), *have = calloc(nn, sizeof *have);
  uint64_t *want_all = malloc(nn * sizeof *want), *have_all = malloc(nn * sizeof *have);
  for (int t = 0; t < np; t++) want[(size_t)t * (size_t)np + (size_t)me] = fnv(model + (size_t)t * lane, lane);
  for (int w = 0; w < np; w++) have[(size_t)me * (size_t)np + (size_t)w] = fnv(wsbuf + ro + (size_t)w * lane, lane);
  MPI_Allreduce(want, want_all, (int)nn, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(have, have_all, (int)nn, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  for (int t = 0; t < np; t++)
    for (int w = 0; w < np; w++)
      CHECK(want_all[(size_t)t * (size_t)np + (size_t)w] == have_all[(size_t)t * (size_t)np + (size_t)w],
            "checksum of writer %d's lane at rank %d: writer's model %#llx, target's memory %#llx", w, t,
            (unsigned long long)want_all[(size_t)t * (size_t)np + (size_t)w],
            (unsigned long long)have_all[(size_t)t * (size_t)np + (size_t)w]);
  /* The read-only part was not written. */
  for (size_t o = 0; o < ro; o++)
    if (wsbuf[o] != pat_ro(me, o)) FAILF("read-only part byte %zu changed to %d", o, wsbuf[o]);
  free(want); free(have); free(want_all); free(have_all);
}

int main(int argc, char **argv) {
  /* Firehose itself is under test: node peers' memory would otherwise go through the
   * kernel's single copy (FH_CMA). An explicit FH_CMA in the environment still wins. */
  setenv("FH_CMA", "0", 0);
  MPI_Init(&argc, &argv);
  ctx = fh_test_init(&me, &np);
  CHECK(np <= 256, "at most 256 ranks");
  unsigned char stackbuf[STACK_BYTES]; /* a peer's stack: target of phase 2 */
  memset(stackbuf, 0, sizeof stackbuf);

  fh_stats_t st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(fh_stats_get(ctx, &st));
  CHECK(st.limit_bytes > 0, "limit_bytes is 0");
  const char *strategy = getenv("FH_REGISTRATION");
  if (!strategy || !*strategy) strategy = "firehose";
  int keeps = strcmp(strategy, "pin-everything") == 0 || strcmp(strategy, "rendezvous-keep") == 0;
  const char *env_ws = getenv("FH_TEST_WS");
  const size_t cap = (size_t)32 << 20;
  if (env_ws && *env_ws) {
    ws = parse_size(env_ws);
  } else {
    ws = keeps ? (size_t)(st.limit_bytes / 4) : (size_t)(st.limit_bytes * 4);
    if (ws > cap) ws = cap;
  }
  if (ws < (size_t)np * 512) ws = (size_t)np * 512;
  ro = (ws / 2) & ~(size_t)7;
  lane = ((ws - ro) / (size_t)np) & ~(size_t)7;
  long nops = getenv("FH_TEST_OPS") ? atol(getenv("FH_TEST_OPS")) : 3000;

  wsbuf = malloc(ws);
  CHECK(wsbuf != NULL, "malloc(%zu)", ws);
  for (size_t o = 0; o < ro; o++) wsbuf[o] = pat_ro(me, o);
  for (int w = 0; w < np; w++)
    for (size_t o = 0; o < lane; o++) wsbuf[ro + (size_t)w * lane + o] = pat_lane(me, w, o);
  model = malloc((size_t)np * lane);
  for (int t = 0; t < np; t++)
    for (size_t o = 0; o < lane; o++) model[(size_t)t * lane + o] = pat_lane(t, me, o);
  all_ws = malloc(sizeof(void *) * (size_t)np);
  exchange_ptrs(wsbuf, all_ws, MPI_COMM_WORLD);
  for (int i = 0; i < MAXOUT; i++) { slot_buf[i] = malloc(MAXSZ); slot_exp[i] = malloc(MAXSZ); }
  tmp = malloc(MAXSZ);
  rng = 0x2545F4914F6CDD1DULL ^ ((uint64_t)(me + 1) * 0x9E3779B97F4A7C15ULL);
  if (me == 0)
    printf("firehose: strategy %s, mode %s, limit_bytes %llu, unit %llu, working set %zu B/rank "
           "(read-only %zu, lane %zu), %ld ops/rank\n",
           strategy, st.mode == 0 ? "page" : "region", (unsigned long long)st.limit_bytes,
           (unsigned long long)st.unit_bytes, ws, ro, lane, nops);
  CHECK_OK(fh_barrier(ctx));

  for (long i = 0; i < nops; i++) random_op();
  drain();
  CHECK_OK(fh_test_nbi(ctx, FH_NBI_ALL));
  CHECK_OK(fh_barrier(ctx));

  stack_static(stackbuf);
  verify_all();
  CHECK_OK(fh_barrier(ctx));

  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(fh_stats_get(ctx, &st));
  CHECK(st.bytes_pinned_peak <= st.limit_bytes, "bytes_pinned_peak %llu > limit_bytes %llu",
        (unsigned long long)st.bytes_pinned_peak, (unsigned long long)st.limit_bytes);
  CHECK(st.hits + st.misses > 0, "no firehose hits or misses counted (hits %llu, misses %llu)",
        (unsigned long long)st.hits, (unsigned long long)st.misses);
  uint64_t mine[5] = {st.hits, st.misses, st.bytes_pinned_peak, st.victim_remote, st.moves_sent};
  uint64_t *all = malloc(sizeof mine * (size_t)np);
  MPI_Gather(mine, 5, MPI_UINT64_T, all, 5, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  if (me == 0) {
    for (int r = 0; r < np; r++) {
      uint64_t *a = all + 5 * r;
      printf("firehose: rank %d hits %llu misses %llu hit rate %.1f%% pinned peak %llu/%llu moves %llu\n", r,
             (unsigned long long)a[0], (unsigned long long)a[1], 100.0 * (double)a[0] / (double)(a[0] + a[1]),
             (unsigned long long)a[2], (unsigned long long)st.limit_bytes, (unsigned long long)a[4]);
    }
    printf("firehose: ops put %ld get %ld put_nb %ld get_nbi %ld (rank 0)\n", counts[0], counts[1], counts[2],
           counts[3]);
  }
  free(all);
  CHECK_OK(fh_finalize(ctx));
  TEST_PASS("firehose");
  for (int i = 0; i < MAXOUT; i++) { free(slot_buf[i]); free(slot_exp[i]); }
  free(tmp); free(model); free(all_ws); free(wsbuf);
  MPI_Finalize();
  return 0;
}
