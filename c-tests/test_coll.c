/* Collectives against MPI: fh_broadcast, fh_reduce, fh_allreduce, fh_allgather.
 *
 *  a. broadcast: every root, 0, 1, 7, 1000, 4096 bytes, one chunk +- 1 byte, and
 *     ~300 KiB + 5 (several chunks: a chunk is 32..64 KiB) from malloc'd and from
 *     fh_malloc'd buffers; compared with MPI_Bcast of the same bytes, and guard bytes
 *     after each buffer must be untouched; broadcast(NULL, 0) is FH_OK;
 *  b. reduce and allreduce: every datatype x every op (bitwise ops on integers only)
 *     x every root x counts 0, 1, 7, 1000 and ~300 KiB worth (odd); compared bit for bit
 *     with MPI_Reduce (same root) / MPI_Allreduce. Data make every order exact: signed
 *     sums of small integers, products of small factors (signed) or anything
 *     (unsigned, wrapping), floats with integer values for sums and powers of two
 *     for products; min/max and bitwise over full-range values. Non-roots pass NULL
 *     as dst, or a buffer that must stay untouched;
 *  c. allgather: 0, 1, 7, 1000, 40001 bytes per rank and one size whose total
 *     crosses several chunks, compared with MPI_Allgather, guard bytes checked;
 *  d. determinism with inexact floats: random doubles (and floats) of mixed
 *     magnitudes and signs; fh_reduce to every root gives bit-identical results,
 *     equal to fh_allreduce on every rank, to a second run, and to the documented
 *     order (the rank-order binomial tree: rank i combines [i, i + 2^k), left operand
 *     the lower ranks), evaluated locally from all ranks' inputs;
 *  e. argument errors (the same on every rank, so no rank is left in a collective):
 *     bitwise ops on FH_FLOAT/FH_DOUBLE, unknown datatypes and ops give
 *     FH_ERR_INVALID_ARG, a bad root FH_ERR_BAD_RANK, NULL buffers with bytes
 *     FH_ERR_INVALID_ARG; the next collectives work. One collective per context at
 *     a time: while a helper thread of rank 0 is blocked in a broadcast (root 1 holds
 *     back), rank 0's main thread gets FH_ERR_STATE from another collective;
 *  f. a skewed sequence: 160 mixed collectives (kinds, roots, sizes, ops from a shared
 *     generator; some broadcasts inside a split-phase barrier) with random sleeps and
 *     no MPI call between them, so fast ranks run ahead into later collectives; the
 *     results are compared afterwards with the same sequence run by MPI;
 *  g. big: one 64 MiB broadcast (root N-1) checked against the pattern, one 8 MiB
 *     allreduce (doubles, exact) against MPI_Allreduce, with timings next to MPI;
 *  h. broadcast trees: second contexts with FH_BCAST_LAMBDA = 1 (binomial), 3 and 64
 *     (setenv before their fh_init) broadcast every root and size, reduce, allreduce
 *     and allgather; the results match MPI.
 *
 * A watchdog (alarm) names the phase if one hangs.
 * Run: mpirun -np N test_coll (N >= 1; CI: 2, 3, 4, 8; also FH_BCAST_LAMBDA=1, FH_SHM=0). */
#include "common.h"
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

static fh_ctx_t *ctx;
static int me, np;

/* ---------------- types, ops, data ---------------- */
typedef struct {
  fh_dtype_t dt;
  MPI_Datatype mt;
  size_t esz;
  int is_float, is_signed;
  const char *name;
} dtype_t;
static dtype_t dtypes[6];
static void init_dtypes(void) {
  dtype_t d[6] = {{FH_INT32, MPI_INT32_T, 4, 0, 1, "int32"},
                  {FH_INT64, MPI_INT64_T, 8, 0, 1, "int64"},
                  {FH_UINT32, MPI_UINT32_T, 4, 0, 0, "uint32"},
                  {FH_UINT64, MPI_UINT64_T, 8, 0, 0, "uint64"},
                  {FH_FLOAT, MPI_FLOAT, 4, 1, 1, "float"},
                  {FH_DOUBLE, MPI_DOUBLE, 8, 1, 1, "double"}};
  memcpy(dtypes, d, sizeof d);
}
typedef struct {
  fh_op_t op;
  MPI_Op mo;
  int bitwise;
  const char *name;
} op_t;
static op_t ops[7];
static void init_ops(void) {
  op_t o[7] = {{FH_SUM, MPI_SUM, 0, "sum"},   {FH_PROD, MPI_PROD, 0, "prod"},
               {FH_MIN, MPI_MIN, 0, "min"},   {FH_MAX, MPI_MAX, 0, "max"},
               {FH_BAND, MPI_BAND, 1, "band"}, {FH_BOR, MPI_BOR, 1, "bor"},
               {FH_BXOR, MPI_BXOR, 1, "bxor"}};
  memcpy(ops, o, sizeof o);
}

/* Pseudo-random bytes, a function of key and position only. */
static void pattern(void *buf, size_t n, uint64_t key) {
  unsigned char *p = buf;
  uint64_t s = mix64(key) | 1;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    s ^= s >> 12; s ^= s << 25; s ^= s >> 27;
    uint64_t v = s * 2685821657736338717ULL;
    memcpy(p + i, &v, 8);
  }
  if (i < n) {
    s ^= s >> 12; s ^= s << 25; s ^= s >> 27;
    uint64_t v = s * 2685821657736338717ULL;
    memcpy(p + i, &v, n - i);
  }
}

/* Element i of rank r's input for (dt, op): values for which every combination order
 * gives the exact same result (so fh and MPI must agree bit for bit). */
static void gen(void *buf, size_t count, const dtype_t *d, const op_t *o, int r, uint64_t key) {
  for (size_t i = 0; i < count; i++) {
    uint64_t h = mix64(key ^ mix64((uint64_t)r * 0x100000001B3ULL + i));
    uint64_t h2 = mix64(h);
    int64_t small = (int64_t)(h % 2001) - 1000;       /* [-1000, 1000] */
    static const int64_t factors[] = {-2, -1, 1, 2, 3, 1, -1, 0};
    int64_t fac = factors[h % (i % 97 == 5 ? 8 : 7)];   /* a zero now and then */
    static const double pow2[] = {0.5, 1.0, 2.0, 4.0, -0.5, -1.0, -2.0, -4.0};
    double p2 = pow2[h % 8];
    /* full-range float values without NaN/inf/-0: a random integer over a power of 2 */
    double wide = (double)(int64_t)(h2 >> 11 | 1) * (h % 2 ? 1.0 : -1.0) / (double)(1ULL << (h % 50));
    switch (d->dt) {
    case FH_INT32: {
      int32_t v = o->op == FH_SUM ? (int32_t)small : o->op == FH_PROD ? (int32_t)fac : (int32_t)h2;
      if (o->op == FH_BAND) v = (int32_t)(h2 | (h2 >> 7));
      if (o->op == FH_BOR) v = (int32_t)(h2 & (h2 >> 5) & (h2 >> 13));
      memcpy((char *)buf + 4 * i, &v, 4);
      break;
    }
    case FH_INT64: {
      int64_t v = o->op == FH_SUM ? small * 1000003 : o->op == FH_PROD ? fac : (int64_t)h2;
      if (o->op == FH_BAND) v = (int64_t)(h2 | (h2 >> 7));
      if (o->op == FH_BOR) v = (int64_t)(h2 & (h2 >> 5) & (h2 >> 13));
      memcpy((char *)buf + 8 * i, &v, 8);
      break;
    }
    case FH_UINT32: { /* unsigned arithmetic wraps the same in any order */
      uint32_t v = (uint32_t)h2;
      if (o->op == FH_BAND) v = (uint32_t)(h2 | (h2 >> 7));
      if (o->op == FH_BOR) v = (uint32_t)(h2 & (h2 >> 5) & (h2 >> 13));
#ifdef MPICH_VERSION
      /* MPICH (Debian 4.0) compares MPI_UINT32_T as signed in MPI_MIN/MPI_MAX (checked:
       * min(0x1be88095, 0x8c255f40) = 0x8c255f40): keep the reference's values below 2^31. */
      if (o->op == FH_MIN || o->op == FH_MAX) v &= 0x7fffffffu;
#endif
      memcpy((char *)buf + 4 * i, &v, 4);
      break;
    }
    case FH_UINT64: {
      uint64_t v = h2;
      if (o->op == FH_BAND) v = h2 | (h2 >> 7);
      if (o->op == FH_BOR) v = h2 & (h2 >> 5) & (h2 >> 13);
#ifdef MPICH_VERSION
      if (o->op == FH_MIN || o->op == FH_MAX) v &= 0x7fffffffffffffffULL; /* as for uint32 */
#endif
      memcpy((char *)buf + 8 * i, &v, 8);
      break;
    }
    case FH_FLOAT: {
      float v = o->op == FH_SUM ? (float)small : o->op == FH_PROD ? (float)p2 : (float)wide;
      memcpy((char *)buf + 4 * i, &v, 4);
      break;
    }
    default: {
      double v = o->op == FH_SUM ? (double)small : o->op == FH_PROD ? p2 : wide;
      memcpy((char *)buf + 8 * i, &v, 8);
      break;
    }
    }
  }
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  CHECK(p != NULL, "malloc(%zu)", n);
  return p;
}

#define GUARD 64
static void set_guard(unsigned char *p) { memset(p, 0xA5, GUARD); }
static void check_guard(const unsigned char *p, const char *what) {
  for (int i = 0; i < GUARD; i++)
    CHECK(p[i] == 0xA5, "%s: guard byte %d after the buffer overwritten (0x%02x)", what, i, p[i]);
}

/* First differing element, for messages. */
static void report_diff(const void *got, const void *want, size_t nbytes, size_t esz,
                        const char *what) {
  const unsigned char *g = got, *w = want;
  for (size_t i = 0; i < nbytes; i++)
    if (g[i] != w[i]) {
      size_t e = i / esz;
      unsigned long long gv = 0, wv = 0;
      memcpy(&gv, g + e * esz, esz);
      memcpy(&wv, w + e * esz, esz);
      FAILF("%s: byte %zu (element %zu of %zu) differs: got 0x%llx, want 0x%llx", what, i, e,
            nbytes / esz, gv, wv);
    }
}
static void expect_same(const void *got, const void *want, size_t nbytes, size_t esz,
                        const char *what) {
  if (nbytes && memcmp(got, want, nbytes) != 0) report_diff(got, want, nbytes, esz, what);
}

/* Chunk-crossing sizes: ~300 KiB (the chunk is at most 64 KiB). */
#define BIG_BYTES (300u * 1024u + 5u)

/* ---------------- a. broadcast ---------------- */
static void bcast_sweep(fh_ctx_t *c, const char *label) {
  size_t sizes[] = {0, 1, 7, 1000, 4096, 32768 - 1, 32768 + 1, 65536 + 1, BIG_BYTES};
  int nsizes = (int)(sizeof sizes / sizeof sizes[0]);
  unsigned char *buf = xmalloc(BIG_BYTES + GUARD);
  unsigned char *ref = xmalloc(BIG_BYTES);
  unsigned char *hbuf = fh_malloc(c, BIG_BYTES + GUARD);
  CHECK(hbuf != NULL, "fh_malloc(%u)", BIG_BYTES + GUARD);
  char what[160];
  for (int root = 0; root < np; root++) {
    for (int si = 0; si < nsizes; si++) {
      size_t n = sizes[si];
      for (int heap = 0; heap < 2; heap++) {
        unsigned char *b = heap ? hbuf : buf;
        uint64_t key = 0xB0000000ULL + (uint64_t)root * 1000 + (uint64_t)si * 10 + (uint64_t)heap;
        if (me == root) pattern(b, n, key);
        else memset(b, 0x5A ^ me, n);
        set_guard(b + n);
        if (me == root) pattern(ref, n, key);
        MPI_Bcast(ref, (int)n, MPI_BYTE, root, MPI_COMM_WORLD);
        snprintf(what, sizeof what, "%s broadcast root %d, %zu bytes (%s)", label, root, n,
                 heap ? "fh_malloc" : "malloc");
        CHECK_OK(fh_broadcast(c, root, b, n));
        expect_same(b, ref, n, 1, what);
        check_guard(b + n, what);
      }
    }
    CHECK_OK(fh_broadcast(c, root, NULL, 0));
  }
  fh_free(c, hbuf);
  free(buf);
  free(ref);
}

/* ---------------- b. reduce / allreduce ---------------- */
static long n_reduce, n_allreduce;
static void reduce_case(fh_ctx_t *c, const dtype_t *d, const op_t *o, size_t count, int all_roots,
                        const char *label) {
  size_t nb = count * d->esz;
  unsigned char *src = xmalloc(nb);
  unsigned char *dst = xmalloc(nb + GUARD);
  unsigned char *ref = xmalloc(nb);
  char what[200];
  uint64_t key = mix64((uint64_t)d->dt * 131 + (uint64_t)o->op * 7 + count);
  gen(src, count, d, o, me, key);
  /* allreduce */
  MPI_Allreduce(src, ref, (int)count, d->mt, o->mo, MPI_COMM_WORLD);
  memset(dst, 0xEE, nb);
  set_guard(dst + nb);
  snprintf(what, sizeof what, "%s allreduce %s %s count %zu", label, d->name, o->name, count);
  CHECK_OK(fh_allreduce(c, src, dst, count, d->dt, o->op));
  expect_same(dst, ref, nb, d->esz, what);
  check_guard(dst + nb, what);
  n_allreduce++;
  /* reduce to each root */
  for (int root = 0; root < np; root++) {
    if (!all_roots && root != (int)(key % (uint64_t)np) && root != np - 1) continue;
    if (count <= 1000) MPI_Reduce(src, ref, (int)count, d->mt, o->mo, root, MPI_COMM_WORLD);
    /* (bigger counts: ref is the allreduce result, the same exact values) */
    memset(dst, 0xEE, nb);
    set_guard(dst + nb);
    int null_dst = me != root && (root + (int)count) % 2 == 0;
    snprintf(what, sizeof what, "%s reduce %s %s count %zu root %d", label, d->name, o->name,
             count, root);
    CHECK_OK(fh_reduce(c, root, src, null_dst ? NULL : dst, count, d->dt, o->op));
    if (me == root) expect_same(dst, ref, nb, d->esz, what);
    else
      for (size_t i = 0; i < nb; i++)
        CHECK(dst[i] == 0xEE, "%s: non-root dst byte %zu was written", what, i);
    check_guard(dst + nb, what);
    n_reduce++;
  }
  free(src);
  free(dst);
  free(ref);
}

static void reduce_sweep(fh_ctx_t *c, const char *label, int big) {
  for (int di = 0; di < 6; di++) {
    const dtype_t *d = &dtypes[di];
    size_t counts[] = {0, 1, 7, 1000, BIG_BYTES / d->esz};
    int ncounts = big ? 5 : 4;
    for (int oi = 0; oi < 7; oi++) {
      const op_t *o = &ops[oi];
      if (o->bitwise && d->is_float) continue; /* errors: phase e */
      for (int ci = 0; ci < ncounts; ci++) reduce_case(c, d, o, counts[ci], 1, label);
    }
  }
}

/* ---------------- c. allgather ---------------- */
static void allgather_sweep(fh_ctx_t *c, const char *label) {
  size_t sizes[] = {0, 1, 7, 1000, 40001, (size_t)(BIG_BYTES / (unsigned)np) | 1};
  char what[160];
  for (int si = 0; si < (int)(sizeof sizes / sizeof sizes[0]); si++) {
    size_t n = sizes[si], total = n * (size_t)np;
    unsigned char *src = xmalloc(n);
    unsigned char *dst = xmalloc(total + GUARD);
    unsigned char *ref = xmalloc(total);
    pattern(src, n, 0xA11000ULL + (uint64_t)si * 64 + (uint64_t)me);
    memset(dst, 0x3C, total);
    set_guard(dst + total);
    MPI_Allgather(src, (int)n, MPI_BYTE, ref, (int)n, MPI_BYTE, MPI_COMM_WORLD);
    snprintf(what, sizeof what, "%s allgather %zu bytes per rank", label, n);
    CHECK_OK(fh_allgather(c, src, n, dst));
    expect_same(dst, ref, total, 1, what);
    check_guard(dst + total, what);
    free(src);
    free(dst);
    free(ref);
  }
}

/* ---------------- d. determinism ---------------- */
/* acc = acc op x, the library's float semantics (acc is the left operand). */
static void fold_d(double *acc, const double *x, size_t n, int op) {
  for (size_t i = 0; i < n; i++) {
    double l = acc[i], r = x[i];
    acc[i] = op == FH_SUM ? l + r : op == FH_PROD ? l * r : op == FH_MIN ? (r < l ? r : l) : (r > l ? r : l);
  }
}
static void fold_f(float *acc, const float *x, size_t n, int op) {
  for (size_t i = 0; i < n; i++) {
    float l = acc[i], r = x[i];
    acc[i] = op == FH_SUM ? l + r : op == FH_PROD ? l * r : op == FH_MIN ? (r < l ? r : l) : (r > l ? r : l);
  }
}
/* The rank-order binomial subtree of rank r: x_r, then each child r + k (k = 1, 2, 4,
 * ... while r has no bit k) combined in as the right operand. */
static void subtree(int r, int n, const void *all, size_t count, int isdouble, int op, void *out) {
  size_t esz = isdouble ? 8 : 4;
  memcpy(out, (const char *)all + (size_t)r * count * esz, count * esz);
  void *tmp = xmalloc(count * esz);
  for (int k = 1; k < n; k <<= 1) {
    if (r & k) break;
    if (r + k < n) {
      subtree(r + k, n, all, count, isdouble, op, tmp);
      if (isdouble) fold_d(out, tmp, count, op);
      else fold_f(out, tmp, count, op);
    }
  }
  free(tmp);
}

static void determinism(fh_ctx_t *c) {
  static const size_t counts[] = {1, 1001, BIG_BYTES / 8 + 1};
  char what[200];
  uint64_t rng = 0xD37E000ULL + (uint64_t)me;
  for (int isdouble = 1; isdouble >= 0; isdouble--) {
    size_t esz = isdouble ? 8 : 4;
    fh_dtype_t dt = isdouble ? FH_DOUBLE : FH_FLOAT;
    MPI_Datatype mt = isdouble ? MPI_DOUBLE : MPI_FLOAT;
    for (int ci = 0; ci < 3; ci++) {
      size_t count = counts[ci], nb = count * esz;
      for (int op = FH_SUM; op <= FH_MAX; op++) {
        unsigned char *src = xmalloc(nb), *res0 = xmalloc(nb), *res = xmalloc(nb);
        unsigned char *all = xmalloc(nb * (size_t)np), *want = xmalloc(nb);
        for (size_t i = 0; i < count; i++) {
          /* mixed magnitudes and signs, inexact sums; products near 1 */
          double m = (double)(rng_next(&rng) >> 11) / 9007199254740992.0; /* [0,1) */
          int ex = (int)(rng_next(&rng) % 40) - 20;
          double v = op == FH_PROD ? 0.75 + 0.5 * m : (m - 0.5) * (double)(1ULL << (ex + 20)) / 1048576.0;
          if (isdouble) memcpy(src + i * 8, &v, 8);
          else { float f = (float)v; memcpy(src + i * 4, &f, 4); }
        }
        /* the documented order, from everyone's inputs */
        MPI_Allgather(src, (int)count, mt, all, (int)count, mt, MPI_COMM_WORLD);
        subtree(0, np, all, count, isdouble, op, want);
        for (int root = 0; root < np; root++) {
          memset(res, 0, nb);
          CHECK_OK(fh_reduce(c, root, src, me == root ? res : NULL, count, dt, op));
          MPI_Bcast(res, (int)nb, MPI_BYTE, root, MPI_COMM_WORLD);
          snprintf(what, sizeof what, "determinism: %s op %d count %zu: reduce to root %d vs %s",
                   isdouble ? "double" : "float", op, count, root, root ? "root 0" : "rank order");
          if (root == 0) {
            expect_same(res, want, nb, esz, what);
            memcpy(res0, res, nb);
          } else {
            expect_same(res, res0, nb, esz, what);
          }
        }
        for (int rep = 0; rep < 2; rep++) {
          memset(res, 0, nb);
          CHECK_OK(fh_allreduce(c, src, res, count, dt, op));
          snprintf(what, sizeof what, "determinism: %s op %d count %zu: allreduce (run %d) vs reduce",
                   isdouble ? "double" : "float", op, count, rep);
          expect_same(res, res0, nb, esz, what);
        }
        free(src); free(res0); free(res); free(all); free(want);
      }
    }
  }
}

/* ---------------- e. errors ---------------- */
static void errors(void) {
  double d[4] = {1, 2, 3, 4}, r[4];
  float f[4] = {1, 2, 3, 4}, rf[4];
  int32_t i32[4] = {1, 2, 3, 4}, ri[4];
  for (int oi = 4; oi < 7; oi++) {
    CHECK_RC(fh_allreduce(ctx, d, r, 4, FH_DOUBLE, ops[oi].op), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_allreduce(ctx, f, rf, 4, FH_FLOAT, ops[oi].op), FH_ERR_INVALID_ARG);
    for (int root = 0; root < np; root++) {
      CHECK_RC(fh_reduce(ctx, root, d, r, 4, FH_DOUBLE, ops[oi].op), FH_ERR_INVALID_ARG);
      CHECK_RC(fh_reduce(ctx, root, f, rf, 4, FH_FLOAT, ops[oi].op), FH_ERR_INVALID_ARG);
    }
    /* also with count 0 */
    CHECK_RC(fh_allreduce(ctx, d, r, 0, FH_DOUBLE, ops[oi].op), FH_ERR_INVALID_ARG);
  }
  static const int bad_dt[] = {-1, 12, 99, 1 << 30};
  static const int bad_op[] = {-1, 9, 100};
  for (int i = 0; i < 4; i++) {
    CHECK_RC(fh_allreduce(ctx, i32, ri, 4, bad_dt[i], FH_SUM), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_reduce(ctx, 0, i32, ri, 4, bad_dt[i], FH_SUM), FH_ERR_INVALID_ARG);
  }
  for (int i = 0; i < 3; i++) {
    CHECK_RC(fh_allreduce(ctx, i32, ri, 4, FH_INT32, bad_op[i]), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_reduce(ctx, 0, i32, ri, 4, FH_INT32, bad_op[i]), FH_ERR_INVALID_ARG);
  }
  CHECK_RC(fh_broadcast(ctx, -1, d, sizeof d), FH_ERR_BAD_RANK);
  CHECK_RC(fh_broadcast(ctx, np, d, sizeof d), FH_ERR_BAD_RANK);
  CHECK_RC(fh_reduce(ctx, -1, d, r, 4, FH_DOUBLE, FH_SUM), FH_ERR_BAD_RANK);
  CHECK_RC(fh_reduce(ctx, np, d, r, 4, FH_DOUBLE, FH_SUM), FH_ERR_BAD_RANK);
  CHECK_RC(fh_broadcast(ctx, 0, NULL, 8), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_allreduce(ctx, NULL, r, 4, FH_DOUBLE, FH_SUM), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_allreduce(ctx, d, NULL, 4, FH_DOUBLE, FH_SUM), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_reduce(ctx, 0, NULL, r, 4, FH_DOUBLE, FH_SUM), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_allgather(ctx, NULL, 8, r), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_allgather(ctx, d, 8, NULL), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_broadcast(NULL, 0, d, sizeof d), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_allreduce(NULL, d, r, 4, FH_DOUBLE, FH_SUM), FH_ERR_INVALID_ARG);
  /* zero-length with NULL buffers is fine */
  CHECK_OK(fh_allreduce(ctx, NULL, NULL, 0, FH_INT64, FH_BXOR));
  CHECK_OK(fh_reduce(ctx, np - 1, NULL, NULL, 0, FH_DOUBLE, FH_MAX));
  CHECK_OK(fh_allgather(ctx, NULL, 0, NULL));
  /* everything still works */
  CHECK_OK(fh_allreduce(ctx, d, r, 4, FH_DOUBLE, FH_SUM));
  for (int i = 0; i < 4; i++)
    CHECK(r[i] == d[i] * np, "allreduce after errors: element %d is %g, want %g", i, r[i], d[i] * np);
  int64_t v = me, g[64];
  CHECK(np <= 64, "np %d > 64", np);
  CHECK_OK(fh_allgather(ctx, &v, sizeof v, g));
  for (int i = 0; i < np; i++) CHECK(g[i] == i, "allgather after errors: slot %d is %lld", i, (long long)g[i]);
}

/* ---------------- g. big ---------------- */
static void big(void) {
  size_t nb = (size_t)64 << 20;
  unsigned char *buf = xmalloc(nb + GUARD), *want = xmalloc(nb);
  int root = np - 1;
  pattern(want, nb, 0x64646464ULL);
  if (me == root) memcpy(buf, want, nb);
  else memset(buf, 0, nb);
  set_guard(buf + nb);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  CHECK_OK(fh_broadcast(ctx, root, buf, nb));
  double t_fh = MPI_Wtime() - t0;
  expect_same(buf, want, nb, 1, "64 MiB broadcast");
  check_guard(buf + nb, "64 MiB broadcast");
  MPI_Barrier(MPI_COMM_WORLD);
  t0 = MPI_Wtime();
  MPI_Bcast(buf, (int)nb, MPI_BYTE, root, MPI_COMM_WORLD);
  double t_mpi = MPI_Wtime() - t0;
  if (me == 0) printf("    64 MiB broadcast: fh %.3f s, MPI_Bcast %.3f s\n", t_fh, t_mpi);
  free(buf);
  free(want);

  size_t count = ((size_t)8 << 20) / 8;
  double *src = xmalloc(count * 8), *dst = xmalloc(count * 8), *ref = xmalloc(count * 8);
  gen(src, count, &dtypes[5], &ops[0], me, 0x8888);
  MPI_Barrier(MPI_COMM_WORLD);
  t0 = MPI_Wtime();
  CHECK_OK(fh_allreduce(ctx, src, dst, count, FH_DOUBLE, FH_SUM));
  t_fh = MPI_Wtime() - t0;
  MPI_Barrier(MPI_COMM_WORLD);
  t0 = MPI_Wtime();
  MPI_Allreduce(src, ref, (int)count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  t_mpi = MPI_Wtime() - t0;
  expect_same(dst, ref, count * 8, 8, "8 MiB allreduce");
  if (me == 0) printf("    8 MiB allreduce: fh %.3f s, MPI_Allreduce %.3f s\n", t_fh, t_mpi);
  free(src);
  free(dst);
  free(ref);
}

/* ---------------- h. other trees ---------------- */
static void other_lambdas(void) {
  static const char *lambdas[] = {"1", "3", "64"};
  const char *env = getenv("FH_BCAST_LAMBDA");
  char *saved = env ? strdup(env) : NULL;
  for (int li = 0; li < 3; li++) {
    CHECK(setenv("FH_BCAST_LAMBDA", lambdas[li], 1) == 0, "setenv");
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    fh_ctx_t *c = NULL;
    CHECK_OK(fh_init(dup, NULL, &c));
    if (saved) setenv("FH_BCAST_LAMBDA", saved, 1);
    else unsetenv("FH_BCAST_LAMBDA");
    char label[64];
    snprintf(label, sizeof label, "[lambda %s]", lambdas[li]);
    bcast_sweep(c, label);
    reduce_case(c, &dtypes[5], &ops[0], BIG_BYTES / 8, 0, label);
    reduce_case(c, &dtypes[1], &ops[6], 1001, 1, label);
    allgather_sweep(c, label);
    CHECK_OK(fh_finalize(c));
    MPI_Comm_free(&dup);
  }
  free(saved);
}

/* ---------------- e2. one collective per context at a time ---------------- */
/* Rank 0's helper thread sits in a broadcast from root 1, which rank 1 holds back;
 * meanwhile rank 0's main thread must get FH_ERR_STATE from another collective on
 * the same context. Every collective communicates (a zero-length one too: ranks
 * check each other's arguments), so the probe must not get in first: the main
 * thread waits until the helper is about to enter, then 100 ms more. Rank 1 starts
 * the broadcast only once rank 0 saw FH_ERR_STATE (a flag at rank 1 written with
 * fh_atomic_set_u64). */
static unsigned char busy_buf[100000];
static volatile int busy_entering;
static void *busy_bcast(void *arg) {
  (void)arg;
  __atomic_store_n(&busy_entering, 1, __ATOMIC_SEQ_CST);
  CHECK_OK(fh_broadcast(ctx, 1, busy_buf, sizeof busy_buf));
  return NULL;
}
static void concurrent_collective(int provided) {
  if (np < 2 || provided < MPI_THREAD_MULTIPLE) {
    if (me == 0) printf("    (skipped: needs 2 ranks and MPI_THREAD_MULTIPLE)\n");
    return;
  }
  uint64_t *flag = fh_malloc(ctx, 64);
  CHECK(flag != NULL, "fh_malloc");
  CHECK_OK(fh_atomic_set_u64(ctx, me, flag, 0));
  void *flags[64];
  CHECK(np <= 64, "np");
  exchange_ptrs(flag, flags, MPI_COMM_WORLD);
  CHECK_OK(fh_barrier(ctx));
  if (me == 1) pattern(busy_buf, sizeof busy_buf, 0xB5B5);
  else memset(busy_buf, 0, sizeof busy_buf);
  if (me == 0) {
    pthread_t th;
    CHECK(pthread_create(&th, NULL, busy_bcast, NULL) == 0, "pthread_create");
    while (!__atomic_load_n(&busy_entering, __ATOMIC_SEQ_CST)) sched_yield();
    struct timespec pause = {0, 100 * 1000 * 1000};
    nanosleep(&pause, NULL);
    CHECK_RC(fh_allreduce(ctx, NULL, NULL, 0, FH_INT32, FH_SUM), FH_ERR_STATE);
    CHECK_OK(fh_atomic_set_u64(ctx, 1, (uint64_t *)flags[1], 1));
    CHECK(pthread_join(th, NULL) == 0, "pthread_join");
  } else if (me == 1) {
    uint64_t v = 0;
    while (v == 0) {
      CHECK_OK(fh_atomic_fetch_u64(ctx, me, flag, &v));
      sched_yield();
    }
    CHECK_OK(fh_broadcast(ctx, 1, busy_buf, sizeof busy_buf));
  } else {
    CHECK_OK(fh_broadcast(ctx, 1, busy_buf, sizeof busy_buf));
  }
  unsigned char want[sizeof busy_buf];
  pattern(want, sizeof want, 0xB5B5);
  expect_same(busy_buf, want, sizeof want, 1, "broadcast while another thread probed");
  /* and the context works normally afterwards */
  int64_t x = me + 1, sum = 0;
  CHECK_OK(fh_allreduce(ctx, &x, &sum, 1, FH_INT64, FH_SUM));
  CHECK(sum == (int64_t)np * (np + 1) / 2, "allreduce after the concurrent probe: %lld", (long long)sum);
  CHECK_OK(fh_barrier(ctx));
  fh_free(ctx, flag);
}

/* ---------------- f. skewed sequence ---------------- */
/* A long sequence of mixed collectives (kinds, roots, sizes from a generator every
 * rank shares) with random sleeps and no MPI call in between, so fast ranks run ahead
 * into the next collectives while slow ones still finish earlier ones; the results
 * are kept and compared afterwards with the same sequence done by MPI. */
#define SEQ_OPS 160
static void skewed_sequence(void) {
  static const size_t sizes[] = {0, 8, 24, 1000, 70000 + 8, BIG_BYTES - 5};
  unsigned char *res[SEQ_OPS];
  size_t res_len[SEQ_OPS];
  int kind[SEQ_OPS], root[SEQ_OPS];
  size_t len[SEQ_OPS];
  uint64_t shared = 0x5E9ULL, mine = 0x77ULL + (uint64_t)me * 0x1001;
  /* generate the schedule */
  for (int i = 0; i < SEQ_OPS; i++) {
    kind[i] = (int)(rng_next(&shared) % 5); /* 0 bcast 1 reduce 2 allreduce 3 allgather 4 barrier */
    root[i] = (int)(rng_next(&shared) % (uint64_t)np);
    size_t sz = sizes[rng_next(&shared) % 6];
    if (kind[i] == 3) sz = sz / (size_t)np / 8 * 8;
    len[i] = sz / 8 * 8; /* whole uint64/double elements */
  }
  /* the fh run */
  for (int i = 0; i < SEQ_OPS; i++) {
    unsigned r = (unsigned)(rng_next(&mine) % 16);
    if (r == 0) usleep(1000 + (useconds_t)(rng_next(&mine) % 4000));
    else if (r < 4) usleep((useconds_t)(rng_next(&mine) % 300));
    size_t n = len[i];
    unsigned char *src = xmalloc(n);
    pattern(src, n, 0x5E0000ULL + (uint64_t)i * 64 + (uint64_t)me);
    const dtype_t *d = &dtypes[i % 2 ? 3 : 5];   /* uint64 or double */
    const op_t *o = &ops[d->is_float ? 0 : (i % 7)];
#ifdef MPICH_VERSION
    /* MPICH compares MPI_UINT64_T as signed in MIN/MAX (see gen): use SUM there. */
    if (o->op == FH_MIN || o->op == FH_MAX) o = &ops[0];
#endif
    if (d->is_float) gen(src, n / 8, d, o, me, (uint64_t)i);
    res_len[i] = kind[i] == 3 ? n * (size_t)np : n;
    res[i] = xmalloc(res_len[i]);
    memset(res[i], 0, res_len[i]);
    switch (kind[i]) {
    case 0:
      if (me == root[i]) memcpy(res[i], src, n);
      CHECK_OK(fh_broadcast(ctx, root[i], res[i], n));
      break;
    case 1: CHECK_OK(fh_reduce(ctx, root[i], src, me == root[i] ? res[i] : NULL, n / 8, d->dt, o->op)); break;
    case 2: CHECK_OK(fh_allreduce(ctx, src, res[i], n / 8, d->dt, o->op)); break;
    case 3: CHECK_OK(fh_allgather(ctx, src, n, res[i])); break;
    default:
      if (i % 2) CHECK_OK(fh_barrier(ctx));
      else {
        /* a broadcast inside a split-phase barrier */
        CHECK_OK(fh_barrier_notify(ctx, i, 0));
        if (me == root[i]) memcpy(res[i], src, n);
        CHECK_OK(fh_broadcast(ctx, root[i], res[i], n));
        CHECK_OK(fh_barrier_wait(ctx, i, 0));
      }
      break;
    }
    free(src);
  }
  /* the MPI run, compared */
  char what[160];
  for (int i = 0; i < SEQ_OPS; i++) {
    size_t n = len[i];
    unsigned char *src = xmalloc(n), *ref = xmalloc(res_len[i]);
    pattern(src, n, 0x5E0000ULL + (uint64_t)i * 64 + (uint64_t)me);
    const dtype_t *d = &dtypes[i % 2 ? 3 : 5];
    const op_t *o = &ops[d->is_float ? 0 : (i % 7)];
#ifdef MPICH_VERSION
    /* MPICH compares MPI_UINT64_T as signed in MIN/MAX (see gen): use SUM there. */
    if (o->op == FH_MIN || o->op == FH_MAX) o = &ops[0];
#endif
    if (d->is_float) gen(src, n / 8, d, o, me, (uint64_t)i);
    int check = 1;
    switch (kind[i]) {
    case 0:
    case 4:
      if (me == root[i]) memcpy(ref, src, n);
      MPI_Bcast(ref, (int)n, MPI_BYTE, root[i], MPI_COMM_WORLD);
      break;
    case 1:
      MPI_Reduce(src, ref, (int)(n / 8), d->mt, o->mo, root[i], MPI_COMM_WORLD);
      check = me == root[i];
      break;
    case 2: MPI_Allreduce(src, ref, (int)(n / 8), d->mt, o->mo, MPI_COMM_WORLD); break;
    default: MPI_Allgather(src, (int)n, MPI_BYTE, ref, (int)n, MPI_BYTE, MPI_COMM_WORLD); break;
    }
    if (kind[i] == 4 && i % 2) check = 0; /* a plain barrier: nothing to compare */
    snprintf(what, sizeof what, "skewed sequence op %d (kind %d, root %d, %zu bytes)", i, kind[i],
             root[i], n);
    if (check) expect_same(res[i], ref, res_len[i], 8, what);
    free(src);
    free(ref);
    free(res[i]);
  }
}

/* ---------------- main ---------------- */
int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ctx = fh_test_init(&me, &np);
  watchdog_init(ctx, 48);
  init_dtypes();
  init_ops();
  double t0 = MPI_Wtime();
  if (me == 0) {
    const char *l = getenv("FH_BCAST_LAMBDA"), *s = getenv("FH_SHM");
    printf("test_coll: %d ranks, FH_BCAST_LAMBDA=%s FH_SHM=%s\n", np, l ? l : "(default)",
           s ? s : "(default)");
  }

  begin_phase("a. broadcast, every root and size", 60);
  bcast_sweep(ctx, "");
  end_phase();
  begin_phase("b. reduce/allreduce, every type, op, root, count", 120);
  reduce_sweep(ctx, "", 1);
  end_phase();
  if (me == 0) printf("    (%ld reduces, %ld allreduces)\n", n_reduce, n_allreduce);
  begin_phase("c. allgather", 60);
  allgather_sweep(ctx, "");
  end_phase();
  begin_phase("d. determinism of inexact float reductions", 60);
  determinism(ctx);
  end_phase();
  begin_phase("e. argument errors", 30);
  errors();
  end_phase();
  begin_phase("e. a second thread's collective gets FH_ERR_STATE", 60);
  concurrent_collective(provided);
  end_phase();
  begin_phase("f. skewed sequence of mixed collectives", 90);
  skewed_sequence();
  end_phase();
  begin_phase("g. 64 MiB broadcast, 8 MiB allreduce", 90);
  big();
  end_phase();
  begin_phase("h. FH_BCAST_LAMBDA 1, 3, 64 on second contexts", 90);
  other_lambdas();
  end_phase();

  if (me == 0) printf("  total %.2f s\n", MPI_Wtime() - t0);
  CHECK_OK(fh_finalize(ctx));
  TEST_PASS("test_coll");
  MPI_Finalize();
  return 0;
}
