/* test_vis.c -- non-contiguous put and get (fh_putv/getv, fh_puti/geti,
 * fh_puts/gets; blocking, _nb and _nbi) as a user writes them from firehose.h:
 * MPI_Init, addresses exchanged with MPI_Allgather, MPI_Barrier between phases.
 *
 * Every rank owns three 64 KiB areas: fh_malloc'd, fh_mem_register'ed and plain
 * malloc'd (firehose pins it on demand). In each round every rank puts into its
 * right neighbour's area along a random destination shape, from a local source
 * along a random source shape of the same total; the receiver rebuilds the whole
 * area from the same shapes and checks every byte (inside and outside the
 * shape). Then every rank gets a random section of its left neighbour's area into
 * a local buffer and checks it. Shapes are strided (1 to 3 levels, some rows
 * touching), and the same runs are passed as vectors and as index lists.
 * Bad input (mismatched totals, overflowing counts, NULL lists) must give
 * FH_ERR_INVALID_ARG, write nothing, and leave the job working.
 * Rank 0 prints "test_vis: OK". */
#include <mpi.h>
#include <firehose.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AREA (64 * 1024)
#define MAXRUNS 4096

static int me = -1;
#define FAIL(...)                                                              \
  do {                                                                         \
    char m_[512];                                                              \
    fh_last_error(m_, sizeof m_);                                              \
    fprintf(stderr, "[rank %d] test_vis FAIL (line %d): ", me, __LINE__);      \
    fprintf(stderr, __VA_ARGS__);                                              \
    fprintf(stderr, " [last error: %s]\n", m_);                                \
    MPI_Abort(MPI_COMM_WORLD, 1);                                              \
  } while (0)
#define CALL(x)                                                                \
  do {                                                                         \
    int rc_ = (x);                                                             \
    if (rc_ != FH_OK) FAIL("%s returned %s", #x, fh_strerror(rc_));            \
  } while (0)

/* A shape: a strided section (offset into an area) and its runs. */
typedef struct {
  size_t off, levels, count[4], strides[3];
  size_t nruns, run_off[MAXRUNS], run_len[MAXRUNS], total;
} shape_t;

static uint64_t rng_state;
static uint64_t rnd(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* The runs of a strided section, level 1 fastest (adjacent ones not merged). */
static void enumerate(shape_t *s) {
  size_t reps = 1;
  for (size_t l = 1; l <= s->levels; l++) reps *= s->count[l];
  s->nruns = 0;
  s->total = 0;
  for (size_t k = 0; k < reps && s->count[0] > 0; k++) {
    size_t rem = k, o = s->off;
    for (size_t l = 0; l < s->levels; l++) {
      o += (rem % s->count[l + 1]) * s->strides[l];
      rem /= s->count[l + 1];
    }
    s->run_off[s->nruns] = o;
    s->run_len[s->nruns++] = s->count[0];
    s->total += s->count[0];
  }
}

/* A random section inside an area of AREA bytes with `total` bytes if total > 0
 * (then: one level, runs of total/rows bytes). */
static void random_shape(shape_t *s, size_t total) {
  for (;;) {
    s->levels = total ? 1 : 1 + rnd() % 3;
    s->count[0] = total ? 0 : 1 + rnd() % 40;
    size_t extent = s->count[0];
    if (total) { /* rows that divide total */
      size_t rows = 1 + rnd() % 16;
      while (total % rows) rows--;
      s->count[0] = total / rows;
      s->count[1] = rows;
      s->strides[0] = s->count[0] + rnd() % 3 * 8; /* 0: rows touch */
      extent = (rows - 1) * s->strides[0] + s->count[0];
    } else {
      for (size_t l = 0; l < s->levels; l++) {
        s->count[l + 1] = 1 + rnd() % 6;
        s->strides[l] = extent + rnd() % 3 * 16;
        extent = (s->count[l + 1] - 1) * s->strides[l] + extent;
      }
    }
    if (extent >= AREA) continue;
    s->off = rnd() % (AREA - extent);
    enumerate(s);
    return;
  }
}

static unsigned char val(int sender, int round, size_t off) {
  return (unsigned char)(sender * 37 + round * 101 + off * 13 + (off >> 8));
}

/* What `area` holds after `src` (of sender's pattern) went into `dst` shape. */
static void model(unsigned char *area, const shape_t *dst, const shape_t *src, int sender, int round) {
  size_t di = 0, dpos = 0;
  for (size_t si = 0; si < src->nruns; si++)
    for (size_t b = 0; b < src->run_len[si]; b++) {
      while (dpos == dst->run_len[di]) { di++; dpos = 0; }
      area[dst->run_off[di] + dpos++] = val(sender, round, src->run_off[si] + b);
    }
}

/* The runs of `s` from `base` as a vector list and as an index list. */
static fh_memvec_t dv[MAXRUNS], sv[MAXRUNS];
static void *di[MAXRUNS], *si[MAXRUNS];
static void lists(unsigned char *base, const shape_t *s, fh_memvec_t *v, void **ix) {
  for (size_t i = 0; i < s->nruns; i++) {
    v[i].addr = base + s->run_off[i];
    v[i].len = s->run_len[i];
    ix[i] = v[i].addr;
  }
}

/* Issue one put of `src` (local base sbase) into `dst` (remote base dbase) in the
 * form `form` (0 vector, 1 indexed, 2 strided) and completion `how`
 * (0 blocking, 1 _nb, 2 _nbi). Indexed needs equal run lengths (strided shapes). */
static void put(fh_ctx_t *ctx, int rank, unsigned char *dbase, const shape_t *d,
                unsigned char *sbase, const shape_t *s, int form, int how) {
  fh_handle_t h = FH_HANDLE_NULL;
  lists(dbase, d, dv, di);
  lists(sbase, s, sv, si);
  if (form == 0) {
    if (how == 0) CALL(fh_putv(ctx, rank, d->nruns, dv, s->nruns, sv));
    if (how == 1) CALL(fh_putv_nb(ctx, rank, d->nruns, dv, s->nruns, sv, &h));
    if (how == 2) CALL(fh_putv_nbi(ctx, rank, d->nruns, dv, s->nruns, sv));
  } else if (form == 1) {
    if (how == 0) CALL(fh_puti(ctx, rank, d->nruns, di, d->count[0], s->nruns, si, s->count[0]));
    if (how == 1) CALL(fh_puti_nb(ctx, rank, d->nruns, di, d->count[0], s->nruns, si, s->count[0], &h));
    if (how == 2) CALL(fh_puti_nbi(ctx, rank, d->nruns, di, d->count[0], s->nruns, si, s->count[0]));
  } else {
    /* Both sides strided with their own strides: only when their counts agree. */
    if (how == 0) CALL(fh_puts(ctx, rank, dbase + d->off, d->strides, sbase + s->off, s->strides, d->count, d->levels));
    if (how == 1) CALL(fh_puts_nb(ctx, rank, dbase + d->off, d->strides, sbase + s->off, s->strides, d->count, d->levels, &h));
    if (how == 2) CALL(fh_puts_nbi(ctx, rank, dbase + d->off, d->strides, sbase + s->off, s->strides, d->count, d->levels));
  }
  if (how == 1) CALL(fh_wait(ctx, h));
  if (how == 2) CALL(fh_wait_nbi(ctx, FH_NBI_PUTS));
}

static void get(fh_ctx_t *ctx, unsigned char *dbase, const shape_t *d, int rank,
                unsigned char *sbase, const shape_t *s, int form, int how) {
  fh_handle_t h = FH_HANDLE_NULL;
  lists(dbase, d, dv, di);
  lists(sbase, s, sv, si);
  if (form == 0) {
    if (how == 0) CALL(fh_getv(ctx, d->nruns, dv, rank, s->nruns, sv));
    if (how == 1) CALL(fh_getv_nb(ctx, d->nruns, dv, rank, s->nruns, sv, &h));
    if (how == 2) CALL(fh_getv_nbi(ctx, d->nruns, dv, rank, s->nruns, sv));
  } else if (form == 1) {
    if (how == 0) CALL(fh_geti(ctx, d->nruns, di, d->count[0], rank, s->nruns, si, s->count[0]));
    if (how == 1) CALL(fh_geti_nb(ctx, d->nruns, di, d->count[0], rank, s->nruns, si, s->count[0], &h));
    if (how == 2) CALL(fh_geti_nbi(ctx, d->nruns, di, d->count[0], rank, s->nruns, si, s->count[0]));
  } else {
    if (how == 0) CALL(fh_gets(ctx, dbase + d->off, d->strides, rank, sbase + s->off, s->strides, d->count, d->levels));
    if (how == 1) CALL(fh_gets_nb(ctx, dbase + d->off, d->strides, rank, sbase + s->off, s->strides, d->count, d->levels, &h));
    if (how == 2) CALL(fh_gets_nbi(ctx, dbase + d->off, d->strides, rank, sbase + s->off, s->strides, d->count, d->levels));
  }
  if (how == 1) CALL(fh_wait(ctx, h));
  if (how == 2) CALL(fh_wait_nbi(ctx, FH_NBI_GETS));
}

/* A destination and a source shape with the same total. For the strided form the
 * source copies the destination's counts (its own offset and strides). */
static void shapes(shape_t *d, shape_t *s, int form) {
  random_shape(d, 0);
  if (form == 2) {
    *s = *d;
    size_t extent = s->count[0];
    for (size_t l = 0; l < s->levels; l++) {
      s->strides[l] = extent + rnd() % 2 * 24;
      extent = (s->count[l + 1] - 1) * s->strides[l] + extent;
    }
    s->off = rnd() % (AREA - extent);
    enumerate(s);
  } else if (form == 1) {
    random_shape(s, d->total); /* equal-size pieces on each side */
  } else {
    random_shape(s, d->total);
  }
}

static void bad_input(fh_ctx_t *ctx, int right, unsigned char *rarea, unsigned char *src) {
  fh_memvec_t d = {rarea, 16}, s = {src, 8};
  size_t count[2] = {(size_t)1 << 62, 8}, strides[1] = {16};
  int rc;
  if ((rc = fh_putv(ctx, right, 1, &d, 1, &s)) != FH_ERR_INVALID_ARG)
    FAIL("mismatched totals gave %s", fh_strerror(rc));
  if ((rc = fh_puts(ctx, right, rarea, strides, src, strides, count, 1)) != FH_ERR_INVALID_ARG)
    FAIL("overflowing counts gave %s", fh_strerror(rc));
  if ((rc = fh_getv(ctx, 3, NULL, right, 1, &s)) != FH_ERR_INVALID_ARG)
    FAIL("a NULL list with count 3 gave %s", fh_strerror(rc));
  fh_handle_t h = 123;
  if ((rc = fh_puti_nb(ctx, right, 1, (void *const *)&d.addr, 8, 2, (void *const *)&s.addr, 8, &h)) != FH_ERR_INVALID_ARG)
    FAIL("indexed totals 8 vs 16 gave %s", fh_strerror(rc));
  /* Counts whose product with the piece size wraps around (2^61 x 8 = 2^64 = 0, and
   * (2^61 + 2) x 8 = 16, equal to the other side's total): refused before any list
   * is read (they once walked the short list until a fault). */
  void *dl[1] = {rarea}, *sl[1] = {src};
  if ((rc = fh_puti(ctx, right, (size_t)1 << 61, dl, 8, 1, sl, 0)) != FH_ERR_INVALID_ARG)
    FAIL("an indexed count of 2^61 pieces of 8 bytes gave %s", fh_strerror(rc));
  if ((rc = fh_puti(ctx, right, ((size_t)1 << 61) + 2, dl, 8, 1, sl, 16)) != FH_ERR_INVALID_ARG)
    FAIL("an indexed count wrapping to a total of 16 gave %s", fh_strerror(rc));
  if ((rc = fh_geti(ctx, 1, sl, 16, right, ((size_t)1 << 61) + 2, dl, 8)) != FH_ERR_INVALID_ARG)
    FAIL("an indexed get count wrapping to a total of 16 gave %s", fh_strerror(rc));
  /* Nothing to move is fine, even with NULL lists. */
  CALL(fh_putv(ctx, right, 0, NULL, 0, NULL));
  CALL(fh_putv_nb(ctx, right, 0, NULL, 0, NULL, &h));
  if (h != FH_HANDLE_NULL) FAIL("an empty vector put returned a handle");
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int n;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  fh_ctx_t *ctx;
  CALL(fh_init(MPI_COMM_WORLD, NULL, &ctx));
  int right = (me + 1) % n, left = (me + n - 1) % n;

  unsigned char *area[3];
  area[0] = fh_malloc(ctx, AREA);
  if (!area[0]) FAIL("fh_malloc");
  area[1] = malloc(AREA);
  CALL(fh_mem_register(ctx, area[1], AREA));
  area[2] = malloc(AREA); /* plain: nobody registers it */
  uintptr_t mine[3] = {(uintptr_t)area[0], (uintptr_t)area[1], (uintptr_t)area[2]};
  uintptr_t *all = malloc(sizeof mine * (size_t)n);
  MPI_Allgather(mine, 3 * sizeof(uintptr_t), MPI_BYTE, all, 3 * sizeof(uintptr_t), MPI_BYTE, MPI_COMM_WORLD);
  unsigned char *src = malloc(AREA), *expect = malloc(AREA), *got = malloc(AREA);
  shape_t *d = malloc(sizeof *d), *s = malloc(sizeof *s);

  int round = 0;
  for (int kind = 0; kind < 3; kind++)
    for (int form = 0; form < 3; form++)
      for (int how = 0; how < 3; how++, round++) {
        /* Put phase: everyone puts into its right neighbour's area. */
        memset(area[kind], 0xEE, AREA);
        for (size_t i = 0; i < AREA; i++) src[i] = val(me, round, i);
        MPI_Barrier(MPI_COMM_WORLD);
        rng_state = (uint64_t)round * 1000003u + (uint64_t)me; /* sender's shapes */
        shapes(d, s, form);
        put(ctx, right, (unsigned char *)all[3 * right + kind], d, src, s, form, how);
        MPI_Barrier(MPI_COMM_WORLD);
        rng_state = (uint64_t)round * 1000003u + (uint64_t)left; /* the left's shapes */
        shapes(d, s, form);
        memset(expect, 0xEE, AREA);
        model(expect, d, s, left, round);
        for (size_t i = 0; i < AREA; i++)
          if (area[kind][i] != expect[i])
            FAIL("kind %d form %d how %d: byte %zu is %d, expected %d", kind, form, how, i, area[kind][i], expect[i]);
        /* Get phase: everyone fills its area with its pattern, then gets from the left. */
        for (size_t i = 0; i < AREA; i++) area[kind][i] = val(me, round, i);
        MPI_Barrier(MPI_COMM_WORLD);
        rng_state = (uint64_t)round * 7919u + (uint64_t)me;
        shapes(d, s, form); /* d: local destination in got, s: the left's source */
        memset(got, 0xEE, AREA);
        get(ctx, got, d, left, (unsigned char *)all[3 * left + kind], s, form, how);
        memset(expect, 0xEE, AREA);
        model(expect, d, s, left, round);
        if (memcmp(got, expect, AREA) != 0) FAIL("get kind %d form %d how %d: wrong bytes", kind, form, how);
        MPI_Barrier(MPI_COMM_WORLD);
      }

  memset(area[2], 0xEE, AREA);
  MPI_Barrier(MPI_COMM_WORLD);
  bad_input(ctx, right, (unsigned char *)all[3 * right + 2], src);
  MPI_Barrier(MPI_COMM_WORLD);
  for (size_t i = 0; i < AREA; i++)
    if (area[2][i] != 0xEE) FAIL("a refused call wrote byte %zu", i);
  MPI_Barrier(MPI_COMM_WORLD); /* everyone checked before the next put lands */
  /* The job goes on: one more strided put after the refusals. */
  rng_state = 42 + (uint64_t)me;
  shapes(d, s, 2);
  for (size_t i = 0; i < AREA; i++) src[i] = val(me, 999, i);
  put(ctx, right, (unsigned char *)all[3 * right + 2], d, src, s, 2, 0);
  MPI_Barrier(MPI_COMM_WORLD);
  rng_state = 42 + (uint64_t)left;
  shapes(d, s, 2);
  memset(expect, 0xEE, AREA);
  model(expect, d, s, left, 999);
  if (memcmp(area[2], expect, AREA) != 0) FAIL("the put after the refusals is wrong");

  MPI_Barrier(MPI_COMM_WORLD);
  CALL(fh_mem_unregister(ctx, area[1], AREA));
  CALL(fh_finalize(ctx));
  if (me == 0) printf("test_vis: OK (%d ranks, %d rounds)\n", n, round);
  MPI_Finalize();
  return 0;
}
