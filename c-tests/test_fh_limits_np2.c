/* Registration strategies that never give pins back run out cleanly (2 ranks).
 *
 * Each rank reads and writes ever more distinct memory of its peer's plain malloc'd
 * buffer (64 KiB per access, every access at new memory). With FH_REGISTRATION=
 * pin-everything or rendezvous-keep (set by the run script, with a small
 * FH_FIREHOSE_M) this must end in FH_ERR_NO_RESOURCE -- returned, not a crash --
 * before the peer's pinned bytes pass limit_bytes (M + MAXVICTIM); already pinned
 * memory stays usable, a non-blocking access to new memory fails the same way, and
 * the job goes on (fh_barrier, put/get to fh_malloc memory). With any other
 * strategy (firehose, rendezvous-unpin) every access must succeed; the buffer is
 * then 4x limit_bytes (at most 32 MiB). */
#include "common.h"

#define CH ((size_t)64 * 1024)

static unsigned char pat(int owner, size_t o) { return (unsigned char)(owner * 83 + o * 5 + (o >> 12)); }

int main(int argc, char **argv) {
  /* Firehose itself is under test: node peers' memory would otherwise go through the
   * kernel's single copy (FH_CMA). An explicit FH_CMA in the environment still wins. */
  setenv("FH_CMA", "0", 0);
  MPI_Init(&argc, &argv);
  int me, np;
  fh_ctx_t *ctx = fh_test_init(&me, &np);
  CHECK(np == 2, "runs on 2 ranks");
  int peer = 1 - me;

  const char *strategy = getenv("FH_REGISTRATION");
  if (!strategy || !*strategy) strategy = "firehose";
  int keeps = strcmp(strategy, "pin-everything") == 0 || strcmp(strategy, "rendezvous-keep") == 0;
  fh_stats_t st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(fh_stats_get(ctx, &st));
  uint64_t limit = st.limit_bytes;
  CHECK(limit > 0, "limit_bytes is 0");
  if (keeps)
    CHECK(limit <= ((uint64_t)64 << 20),
          "strategy %s with limit_bytes %llu: set a small FH_FIREHOSE_M (and MAXVICTIM) for this test", strategy,
          (unsigned long long)limit);
  size_t big = (size_t)limit * 4 + 4 * CH;
  if (big > ((size_t)32 << 20)) big = (size_t)32 << 20;
  big = (big + CH - 1) / CH * CH;
  if (me == 0)
    printf("fh_limits: strategy %s, limit_bytes %llu, touching %zu B of the peer%s\n", strategy,
           (unsigned long long)limit, big,
           keeps ? " (expect FH_ERR_NO_RESOURCE)" : " (not a keeping strategy: every access must succeed)");

  unsigned char *buf = malloc(big);
  CHECK(buf != NULL, "malloc(%zu)", big);
  for (size_t o = 0; o < big; o++) buf[o] = pat(me, o);
  void *bufs[2];
  exchange_ptrs(buf, bufs, MPI_COMM_WORLD);
  unsigned char *rb = bufs[peer];
  unsigned char *heap = fh_malloc(ctx, CH);
  CHECK(heap != NULL, "fh_malloc");
  void *heaps[2];
  exchange_ptrs(heap, heaps, MPI_COMM_WORLD);
  unsigned char *tmp = malloc(CH), *src = malloc(CH);
  CHECK_OK(fh_barrier(ctx));

  /* Gets of the first half, puts (of the pattern back onto itself) of the second. */
  size_t off = 0, fail_at = (size_t)-1;
  int rc = FH_OK;
  for (off = 0; off < big; off += CH) {
    if (off < big / 2) {
      memset(tmp, 0, CH);
      rc = fh_get(ctx, tmp, peer, rb + off, CH);
      if (rc == FH_OK)
        for (size_t i = 0; i < CH; i++)
          CHECK(tmp[i] == pat(peer, off + i), "get at offset %zu: byte %zu is %d", off, i, tmp[i]);
    } else {
      for (size_t i = 0; i < CH; i++) src[i] = pat(peer, off + i);
      rc = fh_put(ctx, peer, rb + off, src, CH);
    }
    if (rc != FH_OK) break;
  }
  if (rc != FH_OK) fail_at = off;
  if (keeps) {
    CHECK_RC(rc, FH_ERR_NO_RESOURCE);
    CHECK(fail_at > 0, "the very first access failed");
    CHECK(fail_at <= limit + 2 * CH, "%s: %zu B accessed before FH_ERR_NO_RESOURCE, limit_bytes %llu", strategy,
          fail_at, (unsigned long long)limit);
    /* Still no room for new memory, blocking or not; memory pinned before still works. */
    size_t next = fail_at + CH < big ? fail_at + CH : fail_at;
    CHECK_RC(fh_get(ctx, tmp, peer, rb + next, 64), FH_ERR_NO_RESOURCE);
    fh_handle_t h = FH_HANDLE_NULL;
    rc = fh_get_nb(ctx, tmp, peer, rb + next, 64, &h);
    if (rc == FH_OK) rc = fh_wait(ctx, h);
    CHECK_RC(rc, FH_ERR_NO_RESOURCE);
    memset(tmp, 0, 64);
    CHECK_OK(fh_get(ctx, tmp, peer, rb + 100, 64));
    for (size_t i = 0; i < 64; i++) CHECK(tmp[i] == pat(peer, 100 + i), "re-get of pinned memory: byte %zu", i);
  } else {
    CHECK_OK(rc);
  }
  /* The job goes on. */
  CHECK_OK(fh_barrier(ctx));
  for (size_t i = 0; i < 256; i++) src[i] = (unsigned char)(i + 7 * me);
  CHECK_OK(fh_put(ctx, peer, heaps[peer], src, 256));
  memset(tmp, 0, 256);
  CHECK_OK(fh_get(ctx, tmp, peer, heaps[peer], 256));
  CHECK(memcmp(tmp, src, 256) == 0, "put/get of fh_malloc memory after the limit was hit");
  CHECK_OK(fh_barrier(ctx));
  for (size_t i = 0; i < 256; i++) CHECK(heap[i] == (unsigned char)(i + 7 * peer), "heap byte %zu", i);
  /* Nothing this rank's peer wrote changed its data (puts wrote the pattern). */
  for (size_t o = 0; o < big; o++)
    if (buf[o] != pat(me, o)) FAILF("buffer byte %zu is %d, expected %d", o, buf[o], pat(me, o));

  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(fh_stats_get(ctx, &st));
  CHECK(st.bytes_pinned_peak <= st.limit_bytes, "bytes_pinned_peak %llu > limit_bytes %llu",
        (unsigned long long)st.bytes_pinned_peak, (unsigned long long)st.limit_bytes);
  printf("fh_limits: rank %d: %s after %zu B, bytes_pinned_peak %llu of %llu\n", me,
         fail_at == (size_t)-1 ? "no failure" : "FH_ERR_NO_RESOURCE", fail_at == (size_t)-1 ? off : fail_at,
         (unsigned long long)st.bytes_pinned_peak, (unsigned long long)st.limit_bytes);
  CHECK_OK(fh_barrier(ctx));
  fh_free(ctx, heap);
  CHECK_OK(fh_finalize(ctx));
  TEST_PASS("fh_limits");
  free(buf); free(tmp); free(src);
  MPI_Finalize();
  return 0;
}
