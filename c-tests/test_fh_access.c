/* Firehose access rules and the explicit pin API, at any rank count >= 2.
 *
 * (a) Unmapped target memory: every rank maps pages, unmaps the middle ones and
 *     publishes the hole; its left neighbour's fh_put / fh_get / fh_put_nb /
 *     fh_get_nbi / fh_remote_pin there (and on a range running from a mapped page
 *     into the hole) fail with FH_ERR_ACCESS, and ordinary operations keep working.
 * (b) Invalidate, then reuse: a target maps a region holding A, everyone fh_gets it
 *     (pinning it); the target unmaps it, maps new memory at the same address
 *     (MAP_FIXED) holding B and calls fh_mem_invalidate; everyone's next fh_get sees B.
 *     Done with each of rank 0 and rank np-1 as the target.
 * (c) The explicit API: fh_remote_pin blocking and with a callback, fh_pin_bounds,
 *     fh_try_remote_pin (hit and miss), fh_partial_remote_pin, fh_local_pin,
 *     fh_try_local_pin, fh_partial_local_pin, fh_release, fh_stats_get/reset, and bad
 *     arguments to every one of them. */
#include <sys/mman.h>
#include <unistd.h>
#include "common.h"

static int me, np;
static fh_ctx_t *ctx;
static size_t pg;

static void *map(size_t len, void *at) {
  void *p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED : 0), -1, 0);
  CHECK(p != MAP_FAILED, "mmap(%zu)", len);
  CHECK(!at || p == at, "mmap MAP_FIXED moved");
  return p;
}

/* Ordinary operations still work: a put + get round trip to the right neighbour's
 * heap memory. */
static unsigned char *heap;
static void *heaps[256];
static void sanity(int tag) {
  int right = (me + 1) % np;
  unsigned char src[256], dst[256];
  for (int i = 0; i < 256; i++) src[i] = (unsigned char)(i * 3 + tag + me);
  CHECK_OK(fh_put(ctx, right, (unsigned char *)heaps[right] + 256 * (size_t)tag, src, sizeof src));
  memset(dst, 0, sizeof dst);
  CHECK_OK(fh_get(ctx, dst, right, (unsigned char *)heaps[right] + 256 * (size_t)tag, sizeof dst));
  CHECK(memcmp(src, dst, sizeof src) == 0, "sanity round trip %d: data differs", tag);
}

/* ---- (a) ---- */
static void part_a(void) {
  int right = (me + 1) % np;
  /* 16 pages; the middle 14 are unmapped, the guard pages around them stay. */
  unsigned char *m = map(16 * pg, NULL);
  CHECK(munmap(m + pg, 14 * pg) == 0, "munmap");
  void *holes[256];
  exchange_ptrs(m, holes, MPI_COMM_WORLD);
  unsigned char *hole = (unsigned char *)holes[right] + pg;
  unsigned char buf[64];
  memset(buf, 1, sizeof buf);
  CHECK_OK(fh_barrier(ctx));

  CHECK_RC(fh_put(ctx, right, hole, buf, 8), FH_ERR_ACCESS);
  sanity(0);
  CHECK_RC(fh_get(ctx, buf, right, hole + 100, 64), FH_ERR_ACCESS);
  sanity(1);
  /* Starts in the mapped guard page, ends in the hole. */
  CHECK_RC(fh_get(ctx, buf, right, hole - 32, 64), FH_ERR_ACCESS);
  CHECK_RC(fh_put(ctx, right, hole - 32, buf, 64), FH_ERR_ACCESS);
  /* The mapped guard page itself is fine. */
  CHECK_OK(fh_get(ctx, buf, right, hole - 64, 64));
  sanity(2);
  /* Non-blocking: the error comes from the call or from its completion. */
  fh_handle_t h = FH_HANDLE_NULL;
  int rc = fh_put_nb(ctx, right, hole + 4096, buf, 16, &h);
  if (rc == FH_OK) rc = fh_wait(ctx, h);
  CHECK_RC(rc, FH_ERR_ACCESS);
  rc = fh_get_nbi(ctx, buf, right, hole + 8, 16);
  if (rc == FH_OK) rc = fh_wait_nbi(ctx, FH_NBI_GETS);
  CHECK_RC(rc, FH_ERR_ACCESS);
  CHECK_OK(fh_wait_nbi(ctx, FH_NBI_ALL)); /* the error was reported once */
  /* Explicit pins of unmapped memory. */
  fh_pin_t *pin = NULL;
  CHECK_RC(fh_remote_pin(ctx, right, hole, 4096, 0, NULL, NULL, &pin), FH_ERR_ACCESS);
  CHECK_RC(fh_local_pin(ctx, m + pg, 4096, &pin), FH_ERR_ACCESS);
  sanity(3);
  CHECK_OK(fh_barrier(ctx));

  fh_stats_t st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(fh_stats_get(ctx, &st));
  uint64_t refused = st.access_refused, total = 0;
  MPI_Allreduce(&refused, &total, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  CHECK(total > 0, "no rank counted a refused access (access_refused)");
  /* The left neighbour read the guard page: drop its pins before unmapping (the
   * range may be mapped again later, e.g. by part (b)). */
  CHECK_OK(fh_mem_invalidate(ctx, m, 16 * pg));
  CHECK(munmap(m, pg) == 0 && munmap(m + 15 * pg, pg) == 0, "munmap guards");
  CHECK_OK(fh_barrier(ctx));
  TEST_PASS("fh_access (a) unmapped target memory");
}

/* ---- (b) ---- */
static void part_b(int target) {
  const size_t len = 64 * 1024;
  unsigned char *r = NULL;
  if (me == target) {
    r = map(len, NULL);
    memset(r, 0xAA, len);
  }
  uint64_t a = (uint64_t)(uintptr_t)r;
  MPI_Bcast(&a, 1, MPI_UINT64_T, target, MPI_COMM_WORLD);
  unsigned char *ra = (unsigned char *)(uintptr_t)a;
  unsigned char *buf = malloc(len);
  CHECK_OK(fh_barrier(ctx));
  if (me != target) {
    memset(buf, 0, len);
    CHECK_OK(fh_get(ctx, buf, target, ra, len));
    for (size_t i = 0; i < len; i++) CHECK(buf[i] == 0xAA, "get before reuse: byte %zu is %d", i, buf[i]);
    /* and a small one, so a pin of part of the range is cached too */
    CHECK_OK(fh_get(ctx, buf, target, ra + 4096 + 8, 8));
    CHECK(buf[0] == 0xAA, "small get before reuse");
  }
  CHECK_OK(fh_barrier(ctx));
  if (me == target) {
    CHECK(munmap(r, len) == 0, "munmap");
    unsigned char *r2 = map(len, r);
    memset(r2, 0xBB, len);
    CHECK_OK(fh_mem_invalidate(ctx, r2, len));
  }
  CHECK_OK(fh_barrier(ctx));
  if (me != target) {
    memset(buf, 0, len);
    CHECK_OK(fh_get(ctx, buf, target, ra, len));
    for (size_t i = 0; i < len; i++)
      CHECK(buf[i] == 0xBB, "get after munmap + MAP_FIXED mmap + fh_mem_invalidate: byte %zu is %#x (old 0xaa)",
            i, buf[i]);
    CHECK_OK(fh_get(ctx, buf, target, ra + 4096 + 8, 8));
    CHECK(buf[0] == 0xBB, "small get after reuse returned %#x", buf[0]);
  }
  CHECK_OK(fh_barrier(ctx));
  if (me != target) { /* and puts land in the new memory */
    memset(buf, 0xC0 + me % 16, 64);
    CHECK_OK(fh_put(ctx, target, ra + 64 * (size_t)me, buf, 64));
  }
  CHECK_OK(fh_barrier(ctx));
  if (me == target) {
    for (int p = 0; p < np; p++)
      for (size_t i = 0; i < 64; i++) {
        unsigned char want = p == target ? 0xBB : (unsigned char)(0xC0 + p % 16);
        CHECK(r[64 * (size_t)p + i] == want, "put after reuse from rank %d: byte %zu is %#x", p, i,
              r[64 * (size_t)p + i]);
      }
    CHECK_OK(fh_mem_invalidate(ctx, r, len));
    CHECK(munmap(r, len) == 0, "munmap");
  }
  free(buf);
  CHECK_OK(fh_barrier(ctx));
}

/* ---- (c) ---- */
typedef struct {
  int calls, status;
  fh_pin_t *pin;
} cb_state_t;
static void pin_cb(fh_pin_t *pin, int status, void *arg) {
  cb_state_t *s = arg;
  s->calls++;
  s->status = status;
  s->pin = pin;
}

static void covers(const fh_pin_t *pin, const void *addr, size_t len, const char *what) {
  const void *a = NULL;
  size_t l = 0;
  CHECK_OK(fh_pin_bounds(pin, &a, &l));
  CHECK((uintptr_t)a <= (uintptr_t)addr && (uintptr_t)a + l >= (uintptr_t)addr + len,
        "%s: pin covers [%p, +%zu), not the requested [%p, +%zu)", what, a, l, addr, len);
}
/* A partial pin: a non-empty part of the request, at least `min` bytes. */
static void inside(const fh_pin_t *pin, const void *addr, size_t len, size_t min, const char *what) {
  const void *a = NULL;
  size_t l = 0;
  CHECK_OK(fh_pin_bounds(pin, &a, &l));
  CHECK(l >= min && (uintptr_t)a >= (uintptr_t)addr && (uintptr_t)a + l <= (uintptr_t)addr + len,
        "%s: partial pin [%p, +%zu) is not a part (>= %zu B) of the request [%p, +%zu)", what, a, l, min, addr,
        len);
}

static void part_c(void) {
  int right = (me + 1) % np;
  /* Plain memory laid out in slots of S >= one pin unit (page or largest region),
   * so pins of different slots never share a unit: slot 0 holds the blocking pin,
   * slot 1 the local pins, slot 2 the callback pin; slots 6 and 7 are never touched.
   * A pin may use at most f firehoses: lengths are clipped to f units. */
  fh_stats_t st;
  CHECK_OK(fh_stats_get(ctx, &st));
  const size_t u = (size_t)st.unit_bytes, f = (size_t)st.firehoses_per_peer;
  CHECK(u >= 4096 && f >= 1, "unit_bytes %zu, firehoses_per_peer %zu", u, f);
  const size_t S = u > ((size_t)1 << 20) ? u : (size_t)1 << 20, big = 8 * S + u;
  unsigned char *mem = map(big, NULL);
  memset(mem, 0x11, big);
  void *mems[256];
  exchange_ptrs(mem, mems, MPI_COMM_WORLD);
  unsigned char *rm = (unsigned char *)(((uintptr_t)mems[right] + u - 1) & ~(uintptr_t)(u - 1));
  unsigned char *lm0 = (unsigned char *)(((uintptr_t)mem + u - 1) & ~(uintptr_t)(u - 1));
  const size_t far = 6 * S;
  size_t len0 = f * u < 8192 ? f * u : 8192;
  size_t off0 = f * u >= len0 + u ? 4096 : 0; /* unaligned when the units allow */
  size_t lencb = f * u < 65536 ? f * u : 65536;
  /* Local pins may use at most the local share (MAXVICTIM, by default 1/8 of
   * limit_bytes). */
  size_t llen = st.limit_bytes / 16 < 12345 ? (size_t)st.limit_bytes / 16 : 12345;
  CHECK_OK(fh_barrier(ctx));

  /* Blocking remote pin, then a try on the same range is a hit. */
  fh_pin_t *p1 = NULL, *p2 = NULL, *p3 = NULL;
  CHECK_OK(fh_remote_pin(ctx, right, rm + off0, len0, 0, NULL, NULL, &p1));
  CHECK(p1 != NULL, "fh_remote_pin gave no pin");
  covers(p1, rm + off0, len0, "fh_remote_pin");
  CHECK_OK(fh_try_remote_pin(ctx, right, rm + off0, len0, &p2));
  CHECK(p2 != NULL && p2 != p1, "fh_try_remote_pin hit gave no (distinct) pin");
  covers(p2, rm + off0, len0, "fh_try_remote_pin");
  /* Partial: the pinned part of a range that runs on into never-touched memory. */
  CHECK_OK(fh_partial_remote_pin(ctx, right, rm + off0, far - off0, &p3));
  inside(p3, rm + off0, far - off0, len0, "fh_partial_remote_pin");
  CHECK_OK(fh_release(ctx, p3));
  CHECK_OK(fh_release(ctx, p2));
  CHECK_OK(fh_release(ctx, p1));

  /* Never-touched memory: try and partial miss. */
  CHECK_RC(fh_try_remote_pin(ctx, right, rm + far, 4096, &p1), FH_ERR_NOT_PINNED);
  CHECK_RC(fh_partial_remote_pin(ctx, right, rm + far + 8192, 8192, &p1), FH_ERR_NOT_PINNED);

  /* Remote pin with a callback, on memory not pinned yet. */
  unsigned char *rcb = rm + 2 * S;
  cb_state_t cs = {0, 12345, NULL};
  p1 = NULL;
  int rc = fh_remote_pin(ctx, right, rcb, lencb, 0, pin_cb, &cs, &p1);
  if (rc == FH_OK) {
    CHECK(p1 != NULL && cs.calls == 0, "fh_remote_pin hit: pin %p, callback calls %d", (void *)p1, cs.calls);
  } else {
    CHECK_RC(rc, FH_NOT_READY);
    CHECK(p1 == NULL, "fh_remote_pin FH_NOT_READY left *pin_out set");
    double t0 = MPI_Wtime();
    while (cs.calls == 0) {
      CHECK_OK(fh_poll(ctx));
      CHECK(MPI_Wtime() - t0 < 60, "pin callback did not run within 60 s");
    }
    CHECK(cs.status == FH_OK && cs.pin != NULL, "callback: status %d pin %p", cs.status, (void *)cs.pin);
    p1 = cs.pin;
  }
  if (me == 0) printf("fh_access: callback pin: %s\n", rc == FH_OK ? "hit (no callback)" : "miss, callback ran");
  covers(p1, rcb, lencb, "callback pin");
  for (int i = 0; i < 100; i++) CHECK_OK(fh_poll(ctx));
  CHECK(cs.calls <= 1, "pin callback ran %d times", cs.calls);
  /* While held, the range is a try hit; and data moves through it. */
  CHECK_OK(fh_try_remote_pin(ctx, right, rcb + 1000, 100, &p2));
  unsigned char b[100];
  CHECK_OK(fh_get(ctx, b, right, rcb + 1000, 100));
  CHECK(b[0] == 0x11 && b[99] == 0x11, "get through a held pin");
  CHECK_OK(fh_release(ctx, p2));
  CHECK_OK(fh_release(ctx, p1));
  /* A second callback pin of the same range: hit (FH_OK, no callback) or a callback
   * whose pin is released afterwards. */
  cb_state_t cs2 = {0, 12345, NULL};
  p1 = NULL;
  rc = fh_remote_pin(ctx, right, rcb, lencb, 0, pin_cb, &cs2, &p1);
  if (rc == FH_OK) {
    CHECK(p1 != NULL && cs2.calls == 0, "second callback pin");
    CHECK_OK(fh_release(ctx, p1));
  } else {
    CHECK_RC(rc, FH_NOT_READY);
    while (cs2.calls == 0) CHECK_OK(fh_poll(ctx));
    CHECK(cs2.status == FH_OK && cs2.pin, "second callback: status %d", cs2.status);
    CHECK_OK(fh_release(ctx, cs2.pin));
  }
  /* My own rank is not remote (the header says: use fh_local_pin). */
  CHECK_RC(fh_remote_pin(ctx, me, lm0 + 4096, 4096, 0, NULL, NULL, &p1), FH_ERR_INVALID_ARG);

  /* Local pins. */
  unsigned char *lm = lm0 + S;
  CHECK_OK(fh_local_pin(ctx, lm, llen, &p1));
  covers(p1, lm, llen, "fh_local_pin");
  CHECK_OK(fh_try_local_pin(ctx, lm + llen / 4, llen / 2, &p2));
  covers(p2, lm + llen / 4, llen / 2, "fh_try_local_pin");
  CHECK_OK(fh_partial_local_pin(ctx, lm, far - S, &p3));
  inside(p3, lm, far - S, llen, "fh_partial_local_pin");
  CHECK_OK(fh_release(ctx, p3));
  CHECK_OK(fh_release(ctx, p2));
  CHECK_OK(fh_release(ctx, p1));
  CHECK_RC(fh_try_local_pin(ctx, lm0 + far, 4096, &p1), FH_ERR_NOT_PINNED);
  CHECK_RC(fh_partial_local_pin(ctx, lm0 + far + 4096, 4096, &p1), FH_ERR_NOT_PINNED);
  /* fh_malloc memory is prepinned: pinned already here, and pinnable by peers. */
  CHECK_OK(fh_try_local_pin(ctx, heap, 4096, &p1));
  covers(p1, heap, 4096, "fh_try_local_pin of fh_malloc memory");
  CHECK_OK(fh_release(ctx, p1));
  CHECK_OK(fh_local_pin(ctx, heap + 4096, 4096, &p1));
  covers(p1, heap + 4096, 4096, "fh_local_pin of fh_malloc memory");
  CHECK_OK(fh_release(ctx, p1));
  CHECK_OK(fh_remote_pin(ctx, right, heaps[right], 4096, 0, NULL, NULL, &p1));
  covers(p1, heaps[right], 4096, "fh_remote_pin of the peer's fh_malloc memory");
  CHECK_OK(fh_release(ctx, p1));

  CHECK_OK(fh_barrier(ctx));
  CHECK_OK(fh_mem_invalidate(ctx, mem, big)); /* peers pinned it */
  CHECK(munmap(mem, big) == 0, "munmap");
  TEST_PASS("fh_access (c) explicit pins");
}

/* Bad arguments: the documented status, never a crash. */
static void bad_args(void) {
  int right = (me + 1) % np;
  unsigned char local[64];
  unsigned char *rh = heaps[right];
  fh_pin_t *p = NULL;
  fh_stats_t st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  const int E = FH_ERR_INVALID_ARG;

  CHECK_RC(fh_local_pin(NULL, local, 8, &p), E);
  CHECK_RC(fh_local_pin(ctx, local, 8, NULL), E);
  CHECK_RC(fh_local_pin(ctx, NULL, 8, &p), E);
  CHECK_RC(fh_local_pin(ctx, local, 0, &p), E);
  CHECK_RC(fh_try_local_pin(NULL, local, 8, &p), E);
  CHECK_RC(fh_try_local_pin(ctx, local, 8, NULL), E);
  CHECK_RC(fh_try_local_pin(ctx, local, 0, &p), E);
  CHECK_RC(fh_partial_local_pin(NULL, local, 8, &p), E);
  CHECK_RC(fh_partial_local_pin(ctx, local, 8, NULL), E);
  CHECK_RC(fh_partial_local_pin(ctx, local, 0, &p), E);

  CHECK_RC(fh_remote_pin(NULL, right, rh, 8, 0, NULL, NULL, &p), E);
  CHECK_RC(fh_remote_pin(ctx, right, rh, 8, 0, NULL, NULL, NULL), E);
  CHECK_RC(fh_remote_pin(ctx, right, rh, 0, 0, NULL, NULL, &p), E);
  CHECK_RC(fh_remote_pin(ctx, right, NULL, 8, 0, NULL, NULL, &p), E);
  CHECK_RC(fh_remote_pin(ctx, right, rh, 8, 1, NULL, NULL, &p), E);
  CHECK_RC(fh_remote_pin(ctx, right, rh, 8, -1, pin_cb, NULL, &p), E);
  CHECK_RC(fh_remote_pin(ctx, -1, rh, 8, 0, NULL, NULL, &p), FH_ERR_BAD_RANK);
  CHECK_RC(fh_remote_pin(ctx, np, rh, 8, 0, NULL, NULL, &p), FH_ERR_BAD_RANK);
  CHECK_RC(fh_try_remote_pin(NULL, right, rh, 8, &p), E);
  CHECK_RC(fh_try_remote_pin(ctx, right, rh, 8, NULL), E);
  CHECK_RC(fh_try_remote_pin(ctx, right, rh, 0, &p), E);
  CHECK_RC(fh_try_remote_pin(ctx, np, rh, 8, &p), FH_ERR_BAD_RANK);
  CHECK_RC(fh_try_remote_pin(ctx, -5, rh, 8, &p), FH_ERR_BAD_RANK);
  CHECK_RC(fh_partial_remote_pin(NULL, right, rh, 8, &p), E);
  CHECK_RC(fh_partial_remote_pin(ctx, right, rh, 8, NULL), E);
  CHECK_RC(fh_partial_remote_pin(ctx, right, rh, 0, &p), E);
  CHECK_RC(fh_partial_remote_pin(ctx, np + 3, rh, 8, &p), FH_ERR_BAD_RANK);

  const void *a;
  size_t l;
  CHECK_RC(fh_pin_bounds(NULL, &a, &l), E);
  CHECK_OK(fh_local_pin(ctx, local, sizeof local, &p));
  CHECK_RC(fh_pin_bounds(p, NULL, &l), E);
  CHECK_RC(fh_pin_bounds(p, &a, NULL), E);
  CHECK_RC(fh_release(NULL, p), E);
  CHECK_OK(fh_release(ctx, p));
  CHECK_RC(fh_release(ctx, NULL), E);

  CHECK_RC(fh_stats_get(NULL, &st), E);
  CHECK_RC(fh_stats_get(ctx, NULL), E);
  CHECK_RC(fh_stats_reset(NULL), E);

  /* Reset zeroes the counters, not the settings. */
  CHECK_OK(fh_stats_get(ctx, &st));
  uint64_t limit = st.limit_bytes;
  CHECK(st.struct_size == sizeof st, "struct_size %llu, sizeof %zu", (unsigned long long)st.struct_size,
        sizeof st);
  CHECK_OK(fh_stats_reset(ctx));
  memset(&st, 0xFF, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(fh_stats_get(ctx, &st));
  CHECK(st.hits == 0 && st.misses == 0 && st.puts == 0 && st.gets == 0,
        "after fh_stats_reset: hits %llu misses %llu puts %llu gets %llu", (unsigned long long)st.hits,
        (unsigned long long)st.misses, (unsigned long long)st.puts, (unsigned long long)st.gets);
  CHECK(st.limit_bytes == limit && st.limit_bytes > 0, "fh_stats_reset changed limit_bytes");
  CHECK(st.bytes_pinned_peak <= st.limit_bytes, "bytes_pinned_peak > limit_bytes");
  CHECK_OK(fh_barrier(ctx));
  TEST_PASS("fh_access bad arguments");
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  ctx = fh_test_init(&me, &np);
  CHECK(np >= 2 && np <= 256, "needs 2..256 ranks");
  pg = (size_t)sysconf(_SC_PAGESIZE);
  heap = fh_malloc(ctx, 1 << 16);
  CHECK(heap != NULL, "fh_malloc");
  exchange_ptrs(heap, heaps, MPI_COMM_WORLD);
  CHECK_OK(fh_barrier(ctx));

  part_a();
  part_b(0);
  part_b(np - 1);
  TEST_PASS("fh_access (b) invalidate then reuse");
  part_c();
  bad_args();
  sanity(4);

  CHECK_OK(fh_barrier(ctx));
  fh_free(ctx, heap);
  CHECK_OK(fh_finalize(ctx));
  TEST_PASS("fh_access");
  MPI_Finalize();
  return 0;
}
