/* Many outstanding non-blocking puts and gets.
 *
 * Phase 1 (explicit handles): every rank issues hundreds of fh_put_nb / fh_get_nb of
 * mixed sizes (1 B .. 64 KiB) to random ranks (itself included), each into its own
 * non-overlapping slot of the target's fh_malloc'd region or fh_mem_register'ed
 * region, then completes them in random order with a mix of fh_wait, fh_test (until
 * FH_OK), fh_wait_all, fh_test_all and fh_wait_some. A get's data is checked as soon
 * as its handle completes; some puts are read back with a blocking fh_get as soon as
 * their handle completes (remote completion). Every handle is checked to be retired
 * afterwards (fh_test/fh_wait on it again is FH_ERR_INVALID_ARG), entries completed
 * by the array calls become FH_HANDLE_NULL, and every byte of every region is
 * checked at the end (puts landed exactly where intended, nothing else changed).
 *
 * Phase 2 (implicit handles): the same with fh_put_nbi / fh_get_nbi completed by
 * fh_wait_nbi(FH_NBI_PUTS / FH_NBI_GETS / FH_NBI_ALL) and fh_test_nbi. */
#include "common.h"

#define LANE ((size_t)1 << 20) /* bytes of a target region reserved for one source */
#define NOPS 300               /* operations per rank per phase */

typedef struct {
  int target, region, is_get;
  size_t off;  /* offset in the target's region */
  size_t len;
  size_t loff; /* offset in the local buffer */
} op_t;

static int me, np;
static fh_ctx_t *ctx;

/* Initial content of byte `o` of rank r's region g (what gets read). */
static unsigned char pat_init(int r, int g, size_t o, int phase) {
  return (unsigned char)(r * 37 + g * 101 + phase * 59 + o * 13 + (o >> 8) * 7);
}
/* Byte i of put number idx from rank src. */
static unsigned char pat_put(int src, int idx, size_t i, int phase) {
  return (unsigned char)(src * 53 + idx * 17 + phase * 29 + i * 11 + (i >> 9));
}

static size_t rand_size(uint64_t *s) {
  uint64_t c = rng_next(s) % 8, r = rng_next(s);
  if (c <= 2) return 1 + r % 64;
  if (c <= 4) return 65 + r % 960;
  if (c == 5) return 1025 + r % 7168;
  if (c == 6) return 8193 + r % 24576;
  return 32769 + r % 32768;
}

/* Rank src's operations of a phase; every rank can recompute every rank's plan. */
static size_t make_plan(int src, int phase, op_t *ops) {
  uint64_t s = 0x9e3779b97f4a7c15ULL ^ ((uint64_t)(src + 1) * 1000003ULL) ^ ((uint64_t)phase << 40);
  size_t *used = calloc((size_t)np * 2, sizeof(size_t));
  size_t loff = 0;
  for (int i = 0; i < NOPS; i++) {
    op_t *o = &ops[i];
    o->target = (int)(rng_next(&s) % (uint64_t)np);
    o->region = (int)(rng_next(&s) % 2);
    o->is_get = (int)(rng_next(&s) % 2);
    size_t len = rand_size(&s);
    if (i == 0) len = 1;
    if (i == 1) len = 65536;
    size_t gap = rng_next(&s) % 16; /* vary alignment */
    size_t *u = &used[o->target * 2 + o->region];
    if (*u + gap + len > LANE) len = LANE - *u > gap + 1 ? LANE - *u - gap : 0;
    if (len == 0) { /* lane full: use a 1-byte op somewhere with room */
      for (int k = 0; k < np * 2 && len == 0; k++)
        if (used[k] + 1 <= LANE) { o->target = k / 2; o->region = k % 2; u = &used[k]; gap = 0; len = 1; }
    }
    CHECK(len > 0, "plan: every lane is full");
    o->off = (size_t)src * LANE + *u + gap;
    o->len = len;
    *u += gap + len;
    o->loff = loff;
    loff += len + 8;
  }
  free(used);
  return loff;
}

/* fh_barrier: an MPI barrier that keeps serving AMs (peers may still need our
 * answers to their access queries or invalidations). */
/* Barrier that keeps serving active messages (fh_barrier). */
static void poll_barrier(void) { CHECK_OK(fh_barrier(ctx)); }

static unsigned char *regions[2];  /* mine: heap and registered */
static void *all_regions[2][256];  /* everyone's */
static unsigned char *lbuf;        /* local sources / destinations */
static unsigned char *tmp;         /* read-back buffer */
static op_t ops[NOPS], others[NOPS];

static void fill_regions(int phase) {
  for (int g = 0; g < 2; g++)
    for (size_t o = 0; o < (size_t)np * LANE; o++) regions[g][o] = pat_init(me, g, o, phase);
}

static void fill_sources(int phase) {
  for (int i = 0; i < NOPS; i++) {
    op_t *o = &ops[i];
    if (o->is_get)
      memset(lbuf + o->loff, 0xCD, o->len);
    else
      for (size_t b = 0; b < o->len; b++) lbuf[o->loff + b] = pat_put(me, i, b, phase);
  }
}

static void *remote_addr(const op_t *o) {
  return (unsigned char *)all_regions[o->region][o->target] + o->off;
}

/* Check a completed operation from the initiator's side. */
static void check_done(int i, int phase, int readback) {
  op_t *o = &ops[i];
  if (o->is_get) {
    for (size_t b = 0; b < o->len; b++)
      if (lbuf[o->loff + b] != pat_init(o->target, o->region, o->off + b, phase))
        FAILF("phase %d op %d: get of %zu B from rank %d region %d: byte %zu is %d, expected %d",
              phase, i, o->len, o->target, o->region, b, lbuf[o->loff + b],
              pat_init(o->target, o->region, o->off + b, phase));
  } else if (readback) {
    memset(tmp, 0, o->len);
    CHECK_OK(fh_get(ctx, tmp, o->target, remote_addr(o), o->len));
    for (size_t b = 0; b < o->len; b++)
      if (tmp[b] != pat_put(me, i, b, phase))
        FAILF("phase %d op %d: completed put of %zu B to rank %d region %d not visible: byte %zu is %d",
              phase, i, o->len, o->target, o->region, b, tmp[b]);
  }
}

/* After everyone finished a phase: every byte of my regions is what the plans say. */
static void check_regions(int phase) {
  for (int g = 0; g < 2; g++) {
    unsigned char *want = malloc((size_t)np * LANE);
    for (size_t o = 0; o < (size_t)np * LANE; o++) want[o] = pat_init(me, g, o, phase);
    for (int src = 0; src < np; src++) {
      make_plan(src, phase, others);
      for (int i = 0; i < NOPS; i++) {
        op_t *o = &others[i];
        if (o->target != me || o->region != g || o->is_get) continue;
        for (size_t b = 0; b < o->len; b++) want[o->off + b] = pat_put(src, i, b, phase);
      }
    }
    for (size_t o = 0; o < (size_t)np * LANE; o++)
      if (regions[g][o] != want[o])
        FAILF("phase %d: region %d byte %zu (lane of rank %zu) is %d, expected %d", phase, g, o,
              o / LANE, regions[g][o], want[o]);
    free(want);
  }
}

static void shuffle(int *a, int n, uint64_t *s) {
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(rng_next(s) % (uint64_t)(i + 1));
    int t = a[i]; a[i] = a[j]; a[j] = t;
  }
}

static void phase_nb(void) {
  const int phase = 1;
  fill_regions(phase);
  make_plan(me, phase, ops);
  fill_sources(phase);
  poll_barrier();

  static fh_handle_t h[NOPS];
  for (int i = 0; i < NOPS; i++) {
    op_t *o = &ops[i];
    h[i] = 0xdeadbeef;
    if (o->is_get)
      CHECK_OK(fh_get_nb(ctx, lbuf + o->loff, o->target, remote_addr(o), o->len, &h[i]));
    else
      CHECK_OK(fh_put_nb(ctx, o->target, remote_addr(o), lbuf + o->loff, o->len, &h[i]));
    CHECK(h[i] != FH_HANDLE_NULL && h[i] != 0xdeadbeef, "op %d: no handle", i);
  }
  /* Every outstanding handle is distinct. */
  for (int i = 0; i < NOPS; i++)
    for (int j = i + 1; j < NOPS; j++) CHECK(h[i] != h[j], "handles %d and %d are equal", i, j);

  uint64_t s = 0x1234567ULL + (uint64_t)me * 7919;
  int order[NOPS];
  for (int i = 0; i < NOPS; i++) order[i] = i;
  shuffle(order, NOPS, &s);
  int done[NOPS] = {0};
  int counts[5] = {0};
  for (int pos = 0; pos < NOPS;) {
    int chunk = 1 + (int)(rng_next(&s) % 16);
    if (pos + chunk > NOPS) chunk = NOPS - pos;
    int *c = &order[pos];
    int m = (int)(rng_next(&s) % 5);
    counts[m]++;
    int readback = (rng_next(&s) % 4) == 0;
    fh_handle_t arr[40];
    int idx[40], na = 0;
    switch (m) {
    case 0: /* fh_wait one by one */
      for (int k = 0; k < chunk; k++) {
        CHECK_OK(fh_wait(ctx, h[c[k]]));
        done[c[k]] = 1;
        check_done(c[k], phase, readback);
      }
      break;
    case 1: /* fh_test until FH_OK */
      for (int k = 0; k < chunk; k++) {
        int rc, spins = 0;
        while ((rc = fh_test(ctx, h[c[k]])) == FH_NOT_READY) spins++;
        CHECK_RC(rc, FH_OK);
        (void)spins;
        done[c[k]] = 1;
        check_done(c[k], phase, readback);
      }
      break;
    default: /* array calls, with FH_HANDLE_NULL entries mixed in */
      for (int k = 0; k < chunk; k++) {
        if (rng_next(&s) % 4 == 0) { arr[na] = FH_HANDLE_NULL; idx[na++] = -1; }
        arr[na] = h[c[k]]; idx[na++] = c[k];
      }
      if (m == 2) {
        CHECK_OK(fh_wait_all(ctx, arr, (size_t)na));
      } else if (m == 3) {
        int rc;
        while ((rc = fh_test_all(ctx, arr, (size_t)na)) == FH_NOT_READY) {
          /* entries completed so far are FH_HANDLE_NULL, the rest unchanged */
          for (int k = 0; k < na; k++)
            CHECK(arr[k] == FH_HANDLE_NULL || (idx[k] >= 0 && arr[k] == h[idx[k]]), "test_all mangled entry %d", k);
        }
        CHECK_RC(rc, FH_OK);
      } else {
        for (;;) {
          int before = 0, after = 0;
          for (int k = 0; k < na; k++) before += arr[k] != FH_HANDLE_NULL;
          CHECK_OK(fh_wait_some(ctx, arr, (size_t)na));
          for (int k = 0; k < na; k++) {
            after += arr[k] != FH_HANDLE_NULL;
            if (arr[k] == FH_HANDLE_NULL && idx[k] >= 0 && !done[idx[k]]) {
              done[idx[k]] = 1; /* reported complete: its data must be there now */
              check_done(idx[k], phase, readback);
            } else if (arr[k] != FH_HANDLE_NULL) {
              CHECK(arr[k] == h[idx[k]], "wait_some mangled a pending entry");
            }
          }
          if (before == 0) break;
          CHECK(after < before, "fh_wait_some returned without completing anything (%d pending)", before);
        }
      }
      for (int k = 0; k < na; k++) {
        CHECK(arr[k] == FH_HANDLE_NULL, "method %d: completed entry %d is %#llx, not FH_HANDLE_NULL", m, k,
              (unsigned long long)arr[k]);
        if (idx[k] >= 0 && !done[idx[k]]) { done[idx[k]] = 1; check_done(idx[k], phase, readback); }
      }
      break;
    }
    pos += chunk;
  }
  for (int i = 0; i < NOPS; i++) CHECK(done[i], "op %d never completed", i);
  /* Retired handles are refused. */
  for (int i = 0; i < NOPS; i++) {
    CHECK_RC(fh_test(ctx, h[i]), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_wait(ctx, h[i]), FH_ERR_INVALID_ARG);
  }
  fh_handle_t two[2] = {h[0], h[1]};
  CHECK_RC(fh_wait_all(ctx, two, 2), FH_ERR_INVALID_ARG);
  /* All-null arrays complete at once. */
  fh_handle_t nulls[3] = {FH_HANDLE_NULL, FH_HANDLE_NULL, FH_HANDLE_NULL};
  CHECK_OK(fh_wait_some(ctx, nulls, 3));
  CHECK_OK(fh_test_all(ctx, nulls, 3));
  CHECK_OK(fh_wait_all(ctx, nulls, 3));

  poll_barrier();
  check_regions(phase);
  poll_barrier();
  if (me == 0)
    printf("nb: %d ops/rank; chunks by wait %d, test %d, wait_all %d, test_all %d, wait_some %d\n", NOPS,
           counts[0], counts[1], counts[2], counts[3], counts[4]);
}

static void complete_nbi(int how, int first, int last, int phase, int readback) {
  int rc;
  switch (how) {
  case 0:
    CHECK_OK(fh_wait_nbi(ctx, FH_NBI_PUTS));
    for (int i = first; i < last; i++) if (!ops[i].is_get) check_done(i, phase, readback);
    CHECK_OK(fh_wait_nbi(ctx, FH_NBI_GETS));
    break;
  case 1:
    while ((rc = fh_test_nbi(ctx, FH_NBI_ALL)) == FH_NOT_READY) {}
    CHECK_RC(rc, FH_OK);
    break;
  case 2:
    CHECK_OK(fh_wait_nbi(ctx, FH_NBI_ALL));
    break;
  default:
    while ((rc = fh_test_nbi(ctx, FH_NBI_GETS)) == FH_NOT_READY) {}
    CHECK_RC(rc, FH_OK);
    for (int i = first; i < last; i++) if (ops[i].is_get) check_done(i, phase, 0);
    while ((rc = fh_test_nbi(ctx, FH_NBI_PUTS)) == FH_NOT_READY) {}
    CHECK_RC(rc, FH_OK);
    break;
  }
  for (int i = first; i < last; i++) check_done(i, phase, readback);
}

static void phase_nbi(void) {
  const int phase = 2;
  fill_regions(phase);
  make_plan(me, phase, ops);
  fill_sources(phase);
  poll_barrier();
  /* Nothing outstanding: both complete at once. */
  CHECK_OK(fh_test_nbi(ctx, FH_NBI_ALL));
  CHECK_OK(fh_wait_nbi(ctx, FH_NBI_ALL));

  uint64_t s = 0xabcdefULL + (uint64_t)me * 104729;
  const int batches = 8;
  for (int b = 0; b < batches; b++) {
    int first = b * NOPS / batches, last = (b + 1) * NOPS / batches;
    for (int i = first; i < last; i++) {
      op_t *o = &ops[i];
      if (o->is_get)
        CHECK_OK(fh_get_nbi(ctx, lbuf + o->loff, o->target, remote_addr(o), o->len));
      else
        CHECK_OK(fh_put_nbi(ctx, o->target, remote_addr(o), lbuf + o->loff, o->len));
    }
    complete_nbi(b % 4, first, last, phase, (int)(rng_next(&s) % 2));
  }
  CHECK_OK(fh_test_nbi(ctx, FH_NBI_ALL));
  poll_barrier();
  check_regions(phase);
  poll_barrier();
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  ctx = fh_test_init(&me, &np);
  CHECK(np <= 256, "at most 256 ranks");

  size_t rsize = (size_t)np * LANE;
  regions[0] = fh_malloc(ctx, rsize);
  CHECK(regions[0] != NULL, "fh_malloc(%zu)", rsize);
  regions[1] = aligned_alloc(4096, rsize);
  CHECK(regions[1] != NULL, "aligned_alloc");
  CHECK_OK(fh_mem_register(ctx, regions[1], rsize));
  exchange_ptrs(regions[0], all_regions[0], MPI_COMM_WORLD);
  exchange_ptrs(regions[1], all_regions[1], MPI_COMM_WORLD);
  lbuf = malloc((size_t)NOPS * (65536 + 8));
  tmp = malloc(65536);

  /* Zero-length operations complete at once with FH_HANDLE_NULL, even with NULL
   * pointers. */
  fh_handle_t h = 777;
  CHECK_OK(fh_put_nb(ctx, (me + 1) % np, all_regions[0][(me + 1) % np], lbuf, 0, &h));
  CHECK(h == FH_HANDLE_NULL, "zero-length fh_put_nb gave handle %#llx", (unsigned long long)h);
  h = 777;
  CHECK_OK(fh_get_nb(ctx, NULL, (me + 1) % np, NULL, 0, &h));
  CHECK(h == FH_HANDLE_NULL, "zero-length fh_get_nb gave handle %#llx", (unsigned long long)h);
  CHECK_OK(fh_test(ctx, FH_HANDLE_NULL));
  CHECK_OK(fh_wait(ctx, FH_HANDLE_NULL));
  CHECK_OK(fh_put_nbi(ctx, (me + 1) % np, NULL, NULL, 0));
  CHECK_OK(fh_get_nbi(ctx, NULL, (me + 1) % np, NULL, 0));

  phase_nb();
  phase_nbi();

  CHECK_OK(fh_mem_unregister(ctx, regions[1], rsize));
  fh_free(ctx, regions[0]);
  CHECK_OK(fh_finalize(ctx));
  TEST_PASS("nb");
  free(regions[1]);
  free(lbuf);
  free(tmp);
  MPI_Finalize();
  return 0;
}
