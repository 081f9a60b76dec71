/* test_extended.c -- value forms, memset, access regions, fh_test_some, handler-safe
 * locks and no-interrupt sections, as a user writes them from firehose.h: MPI_Init,
 * addresses exchanged with MPI_Allgather, MPI_Barrier between phases.
 *
 * 1. Every rank writes values of 1, 2, 4 and 8 bytes into its right neighbour's
 *    plain malloc'd area (fh_put_val), then reads its left neighbour's back
 *    (fh_get_val); every byte of the area is checked.
 * 2. Every rank memsets ranges of its right neighbour's area, blocking, _nb and _nbi,
 *    from 1 byte to more than 200 KiB; the owner checks every byte.
 * 3. An access region: puts, a get, a memset and a vector put to both neighbours,
 *    completed by the one handle fh_end_nbi_accessregion returns.
 * 4. fh_test_some over a batch of _nb puts until every handle is FH_HANDLE_NULL.
 * 5. A counter shared by the main code and an AM handler: the handler takes a
 *    handler-safe lock; the main code takes the same lock and polls while holding
 *    it (a handler run there would deadlock: the library must keep it for later),
 *    and polls inside a no-interrupt section (no handler may run there without a
 *    progress thread). Every increment must be counted exactly once.
 * 6. Misuse: wrong widths, nested regions, foreign ends, unheld unlocks, a handler
 *    that returns holding a lock: clear FH_ERR_* and the job goes on.
 * 7. Hostile targets: a vector put, a vector get, a memset and a value put that
 *    touch a PROT_NONE or read-only page of the neighbour are refused with
 *    FH_ERR_ACCESS (the neighbour is not crashed), and the job goes on.
 * Rank 0 prints "test_extended: OK". */
#include <mpi.h>
#include <firehose.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define AREA (256 * 1024)
#define NREQ 50

static int me = -1;
#define FAIL(...)                                                              \
  do {                                                                         \
    char m_[512];                                                              \
    fh_last_error(m_, sizeof m_);                                              \
    fprintf(stderr, "[rank %d] test_extended FAIL (line %d): ", me, __LINE__); \
    fprintf(stderr, __VA_ARGS__);                                              \
    fprintf(stderr, " [last error: %s]\n", m_);                                \
    MPI_Abort(MPI_COMM_WORLD, 1);                                              \
  } while (0)
#define CALL(x)                                                                \
  do {                                                                         \
    int rc_ = (x);                                                             \
    if (rc_ != FH_OK) FAIL("%s returned %s", #x, fh_strerror(rc_));            \
  } while (0)
#define EXPECT(x, want)                                                        \
  do {                                                                         \
    int rc_ = (x);                                                             \
    if (rc_ != (want))                                                         \
      FAIL("%s returned %s, expected %s", #x, fh_strerror(rc_),                \
           fh_strerror(want));                                                 \
  } while (0)

static fh_hsl_t *hsl;
static long shared_count; /* protected by hsl */
static volatile long handled; /* handler calls that ran */

static void on_add(fh_token_t *t, void *buf, size_t n, const uint64_t *args,
                   size_t nargs, void *user) {
  (void)t; (void)buf; (void)n; (void)nargs; (void)user;
  if (fh_hsl_lock(hsl) != FH_OK) abort();
  shared_count += (long)args[0];
  if (fh_hsl_unlock(hsl) != FH_OK) abort();
  handled++;
}

static fh_hsl_t *leaked;
static void on_leak(fh_token_t *t, void *buf, size_t n, const uint64_t *args,
                    size_t nargs, void *user) {
  (void)t; (void)buf; (void)n; (void)args; (void)nargs; (void)user;
  if (fh_hsl_lock(leaked) != FH_OK) abort(); /* and returns holding it */
}

static void check_fill(const unsigned char *a, size_t from, size_t to, int v,
                       const char *what) {
  for (size_t i = from; i < to; i++)
    if (a[i] != (unsigned char)v)
      FAIL("%s: byte %zu is %d, expected %d", what, i, a[i], v & 0xff);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int n;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  fh_ctx_t *ctx;
  CALL(fh_init(MPI_COMM_WORLD, NULL, &ctx));
  int right = (me + 1) % n, left = (me + n - 1) % n;
  const char *pt = getenv("FH_PROGRESS");
  int progress_thread = pt && strcmp(pt, "thread") == 0;

  unsigned char *area = malloc(AREA); /* plain memory: firehose pins it */
  uintptr_t *all = malloc(sizeof(uintptr_t) * (size_t)n);
  uintptr_t mine = (uintptr_t)area;
  MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all, sizeof mine, MPI_BYTE, MPI_COMM_WORLD);
  unsigned char *ra = (unsigned char *)all[right], *la = (unsigned char *)all[left];

  /* 1. value forms */
  memset(area, 0xEE, AREA);
  MPI_Barrier(MPI_COMM_WORLD);
  static const size_t widths[4] = {1, 2, 4, 8};
  for (int k = 0; k < 4; k++) {
    uint64_t v = 0x0102030405060708ull * (uint64_t)(me + 1) + (uint64_t)k;
    CALL(fh_put_val(ctx, right, ra + 64 * k, v, widths[k]));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  for (int k = 0; k < 4; k++) {
    uint64_t v = 0x0102030405060708ull * (uint64_t)(left + 1) + (uint64_t)k, got = 0;
    size_t w = widths[k];
    uint64_t mask = w == 8 ? ~0ull : ((1ull << (8 * w)) - 1);
    if (memcmp(area + 64 * k, &v, w) != 0) FAIL("put_val width %zu: wrong bytes", w);
    check_fill(area, 64 * (size_t)k + w, 64 * (size_t)k + 64, 0xEE, "put_val neighbours");
    CALL(fh_get_val(ctx, right, ra + 64 * k, w, &got));
    uint64_t want = (0x0102030405060708ull * (uint64_t)(me + 1) + (uint64_t)k) & mask;
    if (got != want) FAIL("get_val width %zu: %llx, expected %llx", w,
                          (unsigned long long)got, (unsigned long long)want);
  }
  uint64_t dummy = 0;
  EXPECT(fh_put_val(ctx, right, ra, 1, 3), FH_ERR_INVALID_ARG);
  EXPECT(fh_get_val(ctx, right, ra, 16, &dummy), FH_ERR_INVALID_ARG);
  EXPECT(fh_get_val(ctx, right, ra, 4, NULL), FH_ERR_INVALID_ARG);
  EXPECT(fh_put_val(ctx, n + 3, ra, 1, 4), FH_ERR_BAD_RANK);

  /* 2. memset */
  MPI_Barrier(MPI_COMM_WORLD);
  memset(area, 0xEE, AREA);
  MPI_Barrier(MPI_COMM_WORLD);
  fh_handle_t h;
  CALL(fh_memset(ctx, right, ra + 1, me + 1, 1));
  CALL(fh_memset(ctx, right, ra + 10, me + 2, 1000));
  CALL(fh_memset_nb(ctx, right, ra + 2000, me + 3, 70000, &h));
  CALL(fh_wait(ctx, h));
  CALL(fh_memset_nbi(ctx, right, ra + 80000, 0x100 + me + 4, 170000));
  CALL(fh_memset(ctx, right, ra + 5, 9, 0)); /* nothing */
  CALL(fh_wait_nbi(ctx, FH_NBI_PUTS));
  MPI_Barrier(MPI_COMM_WORLD);
  check_fill(area, 0, 1, 0xEE, "memset: before");
  check_fill(area, 1, 2, left + 1, "memset 1 byte");
  check_fill(area, 2, 10, 0xEE, "memset: gap");
  check_fill(area, 10, 1010, left + 2, "memset 1000");
  check_fill(area, 1010, 2000, 0xEE, "memset: gap");
  check_fill(area, 2000, 72000, left + 3, "memset_nb 70000");
  check_fill(area, 72000, 80000, 0xEE, "memset: gap");
  check_fill(area, 80000, 250000, left + 4, "memset_nbi 170000");
  check_fill(area, 250000, AREA, 0xEE, "memset: after");
  EXPECT(fh_memset(ctx, right, NULL, 1, 8), FH_ERR_INVALID_ARG);
  EXPECT(fh_memset_nb(ctx, right, ra, 1, 8, NULL), FH_ERR_INVALID_ARG);

  /* 3. an access region */
  MPI_Barrier(MPI_COMM_WORLD);
  memset(area, 0xEE, AREA);
  unsigned char src[4096], back[512];
  for (int i = 0; i < 4096; i++) src[i] = (unsigned char)(i * 7 + me);
  for (int i = 0; i < 512; i++) area[100000 + i] = (unsigned char)(i ^ me);
  MPI_Barrier(MPI_COMM_WORLD);
  CALL(fh_begin_nbi_accessregion(ctx));
  EXPECT(fh_begin_nbi_accessregion(ctx), FH_ERR_STATE);
  CALL(fh_put_nbi(ctx, right, ra, src, 4096));
  CALL(fh_memset_nbi(ctx, left, la + 8192, 0x5A, 3000));
  CALL(fh_get_nbi(ctx, back, right, ra + 100000, 512));
  fh_memvec_t dv[2] = {{la + 20000, 16}, {la + 20100, 16}}, sv[1] = {{src, 32}};
  CALL(fh_putv_nbi(ctx, left, 2, dv, 1, sv));
  CALL(fh_end_nbi_accessregion(ctx, &h));
  if (h == FH_HANDLE_NULL) FAIL("a region with operations gave FH_HANDLE_NULL");
  CALL(fh_wait(ctx, h));
  EXPECT(fh_wait(ctx, h), FH_ERR_INVALID_ARG); /* synced once */
  for (int i = 0; i < 512; i++)
    if (back[i] != (unsigned char)(i ^ right)) FAIL("region get: byte %d", i);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < 4096; i++)
    if (area[i] != (unsigned char)(i * 7 + left)) FAIL("region put: byte %d", i);
  check_fill(area, 8192, 8192 + 3000, 0x5A, "region memset");
  check_fill(area, 8192 + 3000, 8192 + 3001, 0xEE, "region memset end");
  for (int i = 0; i < 16; i++)
    if (area[20000 + i] != (unsigned char)(i * 7 + right) ||
        area[20100 + i] != (unsigned char)((16 + i) * 7 + right))
      FAIL("region vector put: byte %d", i);
  EXPECT(fh_end_nbi_accessregion(ctx, &h), FH_ERR_STATE);
  CALL(fh_begin_nbi_accessregion(ctx));
  CALL(fh_end_nbi_accessregion(ctx, &h));
  if (h != FH_HANDLE_NULL) FAIL("an empty region gave a handle");

  /* 4. fh_test_some */
  MPI_Barrier(MPI_COMM_WORLD);
  fh_handle_t hs[9];
  for (int i = 0; i < 8; i++) CALL(fh_put_nb(ctx, right, ra + 4096 * (size_t)i, src, 4096, &hs[i]));
  hs[8] = FH_HANDLE_NULL;
  for (long rounds = 0;; rounds++) {
    int left_ = 0;
    for (int i = 0; i < 9; i++) left_ += hs[i] != FH_HANDLE_NULL;
    if (!left_) break;
    int rc = fh_test_some(ctx, hs, 9);
    if (rc != FH_OK && rc != FH_NOT_READY) FAIL("fh_test_some: %s", fh_strerror(rc));
    if (rounds > 10000000) FAIL("fh_test_some never completed the puts");
  }
  CALL(fh_test_some(ctx, hs, 9)); /* all NULL */
  EXPECT(fh_test_some(ctx, NULL, 3), FH_ERR_INVALID_ARG);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < 8 * 4096; i++)
    if (area[i] != (unsigned char)((i % 4096) * 7 + left)) FAIL("test_some put: byte %d", i);

  /* 5. handler-safe lock and no-interrupt sections */
  CALL(fh_hsl_init(ctx, &hsl));
  CALL(fh_am_register(ctx, 200, on_add, NULL));
  MPI_Barrier(MPI_COMM_WORLD);
  CALL(fh_hsl_lock(hsl));
  EXPECT(fh_hsl_lock(hsl), FH_ERR_STATE);
  EXPECT(fh_hsl_destroy(hsl), FH_ERR_STATE);
  if (!progress_thread) {
    /* Handlers run only inside this thread's progress: it may poll (and sit in
     * MPI_Barrier) while holding the lock; the handlers wait for the unlock. */
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < NREQ; i++) {
      uint64_t a = 1;
      CALL(fh_am_request_short(ctx, right, 200, &a, 1));
      shared_count += 1000; /* main code's share, under the lock */
      CALL(fh_poll(ctx));
    }
    if (handled != 0)
      FAIL("%ld handlers ran on a thread holding a handler-safe lock", handled);
    CALL(fh_hsl_unlock(hsl));
  } else {
    /* Handlers run on the progress thread, concurrently: the lock is held around
     * the main code's share only (no library call while holding it). */
    CALL(fh_hsl_unlock(hsl));
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < NREQ; i++) {
      uint64_t a = 1;
      CALL(fh_am_request_short(ctx, right, 200, &a, 1));
      CALL(fh_hsl_lock(hsl));
      shared_count += 1000;
      CALL(fh_hsl_unlock(hsl));
    }
  }
  EXPECT(fh_hsl_unlock(hsl), FH_ERR_STATE);
  CALL(fh_hold_interrupts(ctx));
  MPI_Barrier(MPI_COMM_WORLD);
  long in_section = handled;
  for (int i = 0; i < NREQ; i++) {
    uint64_t a = 1;
    CALL(fh_am_request_short(ctx, right, 200, &a, 1));
    CALL(fh_poll(ctx));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (!progress_thread && handled != in_section)
    FAIL("%ld handlers ran inside a no-interrupt section", handled - in_section);
  CALL(fh_resume_interrupts(ctx));
  EXPECT(fh_resume_interrupts(ctx), FH_ERR_STATE);
  for (long spins = 0; handled < 2 * NREQ; spins++) {
    CALL(fh_poll(ctx));
    if (spins > 100000000) FAIL("only %ld of %d handlers ran", handled, 2 * NREQ);
  }
  CALL(fh_hsl_lock(hsl));
  if (shared_count != 2 * NREQ + 1000L * NREQ)
    FAIL("shared count %ld, expected %ld", shared_count, 2L * NREQ + 1000L * NREQ);
  CALL(fh_hsl_unlock(hsl));
  MPI_Barrier(MPI_COMM_WORLD);

  /* 6. a handler that returns holding an hsl: released and reported */
  CALL(fh_hsl_init(ctx, &leaked));
  CALL(fh_am_register(ctx, 201, on_leak, NULL));
  MPI_Barrier(MPI_COMM_WORLD);
  CALL(fh_am_request_short(ctx, right, 201, NULL, 0));
  int rc = FH_OK;
  for (long spins = 0; rc == FH_OK; spins++) {
    rc = fh_poll(ctx);
    if (spins > 100000000) FAIL("the leaked lock was never reported");
  }
  if (rc != FH_ERR_STATE) FAIL("a handler leaking an hsl gave %s", fh_strerror(rc));
  MPI_Barrier(MPI_COMM_WORLD);
  CALL(fh_hsl_trylock(leaked)); /* free again */
  CALL(fh_hsl_unlock(leaked));
  CALL(fh_hsl_destroy(leaked));
  EXPECT(fh_hsl_lock(leaked), FH_ERR_STATE); /* stale */
  EXPECT(fh_hsl_lock(NULL), FH_ERR_INVALID_ARG);
  CALL(fh_hsl_destroy(hsl));

  /* 7. hostile targets: page 0 writable, page 1 PROT_NONE, page 2 read-only */
  long pg = 4096;
  unsigned char *pages = mmap(NULL, 3 * (size_t)pg, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (pages == MAP_FAILED) FAIL("mmap");
  memset(pages, 0x11, 3 * (size_t)pg);
  if (mprotect(pages + pg, (size_t)pg, PROT_NONE) || mprotect(pages + 2 * pg, (size_t)pg, PROT_READ))
    FAIL("mprotect");
  mine = (uintptr_t)pages;
  MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all, sizeof mine, MPI_BYTE, MPI_COMM_WORLD);
  unsigned char *rp = (unsigned char *)all[right];
  fh_memvec_t good_bad[3] = {{rp + 16, 8}, {rp + 64, 8}, {rp + pg + 8, 8}};
  fh_memvec_t mine3[1] = {{src, 24}};
  EXPECT(fh_putv(ctx, right, 3, good_bad, 1, mine3), FH_ERR_ACCESS);
  fh_memvec_t to_ro[2] = {{rp + 8, 8}, {rp + 2 * pg + 8, 8}};
  fh_memvec_t mine2[1] = {{src, 16}};
  EXPECT(fh_putv(ctx, right, 2, to_ro, 1, mine2), FH_ERR_ACCESS);
  EXPECT(fh_getv(ctx, 1, mine3, right, 3, good_bad), FH_ERR_ACCESS);
  EXPECT(fh_memset(ctx, right, rp + pg - 100, 0, 200), FH_ERR_ACCESS);
  EXPECT(fh_put_val(ctx, right, rp + 2 * pg, 5, 4), FH_ERR_ACCESS);
  /* The read-only page is readable. */
  uint64_t ro = 0;
  CALL(fh_get_val(ctx, right, rp + 2 * pg + 64, 8, &ro));
  if (ro != 0x1111111111111111ull) FAIL("get_val of a read-only page: %llx", (unsigned long long)ro);
  MPI_Barrier(MPI_COMM_WORLD);
  for (long i = 2 * pg; i < 3 * pg; i++)
    if (pages[i] != 0x11) FAIL("the read-only page changed at %ld", i);

  MPI_Barrier(MPI_COMM_WORLD);
  free(area);
  free(all);
  CALL(fh_finalize(ctx));
  if (me == 0) printf("test_extended: OK\n");
  MPI_Finalize();
  return 0;
}
