/* Memory that changes under a peer. Ranks pair up (even = owner, odd = accessor; an
 * odd last rank idles). Only MPI_Barrier separates the phases.
 *  A. For 1.5 s the owner invalidates its live buffer (fh_mem_invalidate) and
 *     registers/unregisters it, over and over, while the accessor puts and gets it:
 *     every access succeeds with the right data or fails with FH_ERR_ACCESS, and the
 *     accesses after the last invalidation succeed.
 *  B. The owner unmaps (munmap) memory the accessor already used, without telling
 *     the library: the accessor's next put and get give FH_ERR_ACCESS quickly. Then
 *     read-only (mprotect) memory: puts refused, gets still work.
 *  C. The owner free()s a buffer the accessor is streaming puts into, then calls
 *     fh_mem_invalidate: the invalidate returns, the accessor's puts fail or land, and
 *     nobody spins.
 * With FH_CMA=0 and FH_SHM=0 the bytes travel by MPI RMA, and Open MPI retries a
 * failing copy into unmapped memory for ever: phase B needs the kernel copy (node
 * peers), so B and C are skipped there (README: without fh_mem_invalidate). */
#include "common.h"
#include <sys/mman.h>

#define LEN 65536

static int env_is(const char *name, const char *v) {
  const char *e = getenv(name);
  return e && strcmp(e, v) == 0;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  fh_ctx_t *ctx = fh_test_init(&rank, &n);
  int active = !(n % 2 == 1 && rank == n - 1);
  int owner = active && rank % 2 == 0, peer = active ? (rank ^ 1) : -1;
  int kernel_copy = !(env_is("FH_CMA", "0"));

  /* ---- A: invalidate and register/unregister live memory under a peer's loop. */
  uint64_t *live = malloc(LEN);
  memset(live, 0, LEN);
  void *lives[64], **all = malloc(sizeof(void *) * (size_t)n);
  exchange_ptrs(live, all, MPI_COMM_WORLD);
  for (int i = 0; i < n && i < 64; i++) lives[i] = all[i];
  MPI_Barrier(MPI_COMM_WORLD);
  int stop = 0;
  long ok = 0, refused = 0, churns = 0;
  double t0 = fh_test_now();
  if (owner) {
    int registered = 0;
    MPI_Request req;
    /* The accessor tells us when it is done with a zero-byte message. */
    MPI_Irecv(NULL, 0, MPI_BYTE, peer, 9, MPI_COMM_WORLD, &req);
    while (!stop) {
      if (churns % 3 == 2) {
        if (registered) CHECK_OK(fh_mem_unregister(ctx, live, LEN));
        else CHECK_OK(fh_mem_register(ctx, live, LEN));
        registered = !registered;
      } else {
        int rc = fh_mem_invalidate(ctx, live, LEN);
        CHECK(rc == FH_OK, "fh_mem_invalidate: %d", rc);
        registered = 0; /* an invalidation drops the registration too */
      }
      churns++;
      CHECK_OK(fh_poll(ctx));
      MPI_Test(&req, &stop, MPI_STATUS_IGNORE);
      CHECK(fh_test_now() - t0 < 60, "accessor never finished");
    }
    if (registered) CHECK_OK(fh_mem_unregister(ctx, live, LEN));
  } else if (active) {
    uint64_t out[64], in[64];
    uint64_t *remote = lives[peer];
    for (long it = 0; fh_test_now() - t0 < 1.5; it++) {
      size_t off = (size_t)(it * 64) % (LEN / 8 - 64);
      for (int k = 0; k < 64; k++) out[k] = ((uint64_t)rank << 48) ^ ((uint64_t)it << 8) ^ (uint64_t)k;
      int rc = fh_put(ctx, peer, remote + off, out, sizeof out);
      if (rc == FH_OK) rc = fh_get(ctx, in, peer, remote + off, sizeof in);
      if (rc == FH_OK) {
        CHECK(memcmp(in, out, sizeof in) == 0, "phase A: read back different data at iteration %ld", it);
        ok++;
      } else {
        CHECK(rc == FH_ERR_ACCESS, "phase A: put/get returned %d (%s)", rc, fh_strerror(rc));
        refused++;
      }
    }
    MPI_Send(NULL, 0, MPI_BYTE, peer, 9, MPI_COMM_WORLD);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (active && !owner) {
    uint64_t v = 0x1234, w = 0;
    CHECK_OK(fh_put(ctx, peer, lives[peer], &v, 8));
    CHECK_OK(fh_get(ctx, &w, peer, lives[peer], 8));
    CHECK(w == v, "after the churn: %lx", (unsigned long)w);
    printf("churn rank %d: phase A %ld ok, %ld refused while the owner churned\n", rank, ok, refused);
  }
  if (owner) CHECK(churns > 3, "owner churned only %ld times", churns);
  MPI_Barrier(MPI_COMM_WORLD);

  /* ---- B: munmap and mprotect without fh_mem_invalidate. */
  if (kernel_copy) {
    char *m = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED, "mmap");
    memset(m, 7, LEN);
    exchange_ptrs(m, all, MPI_COMM_WORLD);
    char buf[256];
    if (active && !owner) {
      CHECK_OK(fh_put(ctx, peer, all[peer], buf, sizeof buf));
      CHECK_OK(fh_get(ctx, buf, peer, all[peer], sizeof buf));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (owner) CHECK(munmap(m, LEN) == 0, "munmap");
    MPI_Barrier(MPI_COMM_WORLD);
    if (active && !owner) {
      double t1 = fh_test_now();
      CHECK_RC(fh_put(ctx, peer, all[peer], buf, sizeof buf), FH_ERR_ACCESS);
      CHECK_RC(fh_get(ctx, buf, peer, all[peer], sizeof buf), FH_ERR_ACCESS);
      CHECK(fh_test_now() - t1 < 10, "refusals took %.1f s", fh_test_now() - t1);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (!owner) munmap(m, LEN);
    char *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(p, 9, LEN);
    exchange_ptrs(p, all, MPI_COMM_WORLD);
    if (active && !owner) CHECK_OK(fh_put(ctx, peer, all[peer], buf, sizeof buf));
    MPI_Barrier(MPI_COMM_WORLD);
    if (owner) CHECK(mprotect(p, LEN, PROT_READ) == 0, "mprotect");
    MPI_Barrier(MPI_COMM_WORLD);
    if (active && !owner) {
      memset(buf, 1, sizeof buf);
      CHECK_RC(fh_put(ctx, peer, all[peer] + 4096, buf, sizeof buf), FH_ERR_ACCESS);
      CHECK_OK(fh_get(ctx, buf, peer, (char *)all[peer] + 4096, sizeof buf));
      CHECK(buf[0] == 9 && buf[255] == 9, "get from now read-only memory");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    munmap(p, LEN);
  }

  /* ---- C: free() under a stream of puts, then fh_mem_invalidate (needs the kernel
   * copy for the same reason as B). */
  if (!kernel_copy) goto done;
  size_t big = 4 << 20; /* glibc serves this with mmap: free() unmaps it */
  char *b = malloc(big);
  memset(b, 0, big);
  exchange_ptrs(b, all, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  long landed = 0, failed = 0;
  t0 = fh_test_now();
  if (owner) {
    while (fh_test_now() - t0 < 0.3) CHECK_OK(fh_poll(ctx));
    free(b);
    b = NULL;
    double t1 = fh_test_now();
    CHECK_OK(fh_mem_invalidate(ctx, all[rank], big));
    CHECK(fh_test_now() - t1 < 30, "fh_mem_invalidate took %.1f s", fh_test_now() - t1);
  } else if (active) {
    char src[4096];
    memset(src, 3, sizeof src);
    while (fh_test_now() - t0 < 1.0) {
      int rc = fh_put(ctx, peer, (char *)all[peer] + (size_t)(landed + failed) % (big / 4096) * 4096, src, sizeof src);
      if (rc == FH_OK) landed++;
      else {
        CHECK(rc == FH_ERR_ACCESS, "phase C: put returned %d (%s)", rc, fh_strerror(rc));
        failed++;
      }
    }
    printf("churn rank %d: phase C %ld puts landed, %ld refused after the free\n", rank, landed, failed);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  free(b);
done:
  CHECK_OK(fh_finalize(ctx));
  TEST_PASS("test_churn");
  MPI_Finalize();
  return 0;
}
