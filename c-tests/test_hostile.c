/* Hostile targets: every rank exposes memory a peer must not be able to use (PROT_NONE,
 * read-only mappings and constants, a guard page, never-mapped and kernel addresses,
 * a range that runs off the end of a mapping, the library's own structures) and its
 * left neighbour tries puts, gets, atomics, explicit pins on it, at 8 B and 64 KiB,
 * first and after earlier successful accesses. Every attempt must be refused with
 * FH_ERR_ACCESS, no byte may change, no rank may crash or spin, and the job must go on
 * (a final checked exchange). Run with FH_SHM=1 (kernel single copy to node peers) and
 * FH_SHM=0 (firehose moves: the target checks protection). Output is capped by the
 * runner: an endless log is the failure this test exists to catch. */
#include "common.h"
#include <sys/mman.h>
#include <unistd.h>

#define BIG 65536
#define PAGE 4096

static const uint64_t ro_global[3 * BIG / 8] = {11, 12, 13, 14};

enum { NONE, RO_MAP, RO_GLOBAL, GUARD, STRADDLE, UNMAPPED, KERNEL, INTERNAL, GOOD, NADDR };
static const char *names[NADDR] = {"PROT_NONE", "read-only mapping", "const global", "guard page",
                                   "straddling the end of a mapping", "never mapped", "kernel half",
                                   "library's own structures", "good"};

static void expect_access(int rc, const char *what, const char *kind, size_t n) {
  if (rc != FH_ERR_ACCESS)
    FAILF("%s on %s (%zu B) returned %d (%s), expected FH_ERR_ACCESS", what, kind, n, rc, fh_strerror(rc));
  char msg[512];
  fh_last_error(msg, sizeof msg);
  CHECK(strlen(msg) > 10, "%s on %s: no message with the error", what, kind);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  fh_ctx_t *ctx = fh_test_init(&rank, &n);
  if (n < 2) {
    fh_finalize(ctx);
    MPI_Finalize();
    return 0;
  }

  /* What this rank exposes. */
  void *mine[NADDR];
  char *none = mmap(NULL, 2 * BIG, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  char *ro = mmap(NULL, 2 * BIG, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  char *guard = mmap(NULL, 3 * BIG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  char *edge = mmap(NULL, 3 * BIG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  char *gone = mmap(NULL, BIG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(none != MAP_FAILED && ro != MAP_FAILED && guard != MAP_FAILED && edge != MAP_FAILED &&
            gone != MAP_FAILED, "mmap");
  CHECK(mprotect(guard + BIG, BIG, PROT_NONE) == 0, "mprotect guard");
  CHECK(munmap(edge + 2 * BIG, BIG) == 0, "munmap edge");
  CHECK(munmap(gone, BIG) == 0, "munmap gone");
  memset(guard, 0x5A, BIG);
  memset(edge, 0xA5, 2 * BIG);
  uint64_t *first = fh_malloc(ctx, 4096); /* the library's structures end right below it */
  uint64_t *good = malloc(BIG);
  CHECK(first && good, "alloc");
  memset(good, 0, BIG);
  mine[NONE] = none;
  mine[RO_MAP] = ro;
  mine[RO_GLOBAL] = (void *)ro_global;
  mine[GUARD] = guard + BIG;
  mine[STRADDLE] = edge + 2 * BIG; /* transfers end here; they start before it */
  mine[UNMAPPED] = gone;
  mine[KERNEL] = (void *)(uintptr_t)0xffff888000000000ULL;
  mine[INTERNAL] = (char *)first - 64;
  mine[GOOD] = good;
  void **all = malloc(sizeof(void *) * NADDR * (size_t)n);
  MPI_Allgather(mine, NADDR * (int)sizeof(void *), MPI_BYTE, all, NADDR * (int)sizeof(void *), MPI_BYTE,
                MPI_COMM_WORLD);
  int peer = (rank + 1) % n;
  void **his = all + (size_t)peer * NADDR;
  char *buf = malloc(BIG);
  CHECK(buf, "malloc");
  size_t sizes[2] = {8, BIG};

  for (int si = 0; si < 2; si++) {
    size_t s = sizes[si];
    for (int k = 0; k < GOOD; k++) {
      char *a = his[k];
      if (k == STRADDLE) a -= s / 2;
      if (k == INTERNAL) a -= (s > 64 ? s - 64 : 0);
      int readable = (k == RO_MAP || k == RO_GLOBAL);
      memset(buf, 0x33, s);
      int rc = fh_get(ctx, buf, peer, a, s);
      if (readable) {
        CHECK_RC(rc, FH_OK);
        if (k == RO_GLOBAL && s == 8) CHECK(((uint64_t *)buf)[0] == 11, "const global read %lu", ((unsigned long *)buf)[0]);
        if (k == RO_MAP) CHECK(buf[0] == 0 && buf[s - 1] == 0, "read-only mapping read");
      } else {
        expect_access(rc, "fh_get", names[k], s);
      }
      /* A put after a successful get of the same memory (which may have pinned it). */
      expect_access(fh_put(ctx, peer, a, buf, s), "fh_put", names[k], s);
      fh_handle_t h = FH_HANDLE_NULL;
      rc = fh_put_nb(ctx, peer, a, buf, s, &h);
      if (rc == FH_OK) rc = fh_wait(ctx, h);
      expect_access(rc, "fh_put_nb", names[k], s);
      if (s == 8 && k != STRADDLE) {
        uint64_t old = 0;
        expect_access(fh_atomic_fetch_add_u64(ctx, peer, (uint64_t *)((uintptr_t)a & ~(uintptr_t)7), 1, &old),
                      "fh_atomic_fetch_add_u64", names[k], 8);
      }
      if (k != INTERNAL && k != KERNEL) {
        fh_pin_t *pin = NULL;
        rc = fh_remote_pin(ctx, peer, a, s, 0, NULL, NULL, &pin);
        if (rc == FH_OK) FAILF("fh_remote_pin on %s (%zu B) succeeded", names[k], s);
        expect_access(rc, "fh_remote_pin", names[k], s);
      }
    }
  }
  /* Registering memory peers could not use is refused. */
  expect_access(fh_mem_register(ctx, none, PAGE), "fh_mem_register", "PROT_NONE", PAGE);
  expect_access(fh_mem_register(ctx, ro, PAGE), "fh_mem_register", "read-only mapping", PAGE);

  /* The job goes on: a checked exchange into plain memory. */
  for (size_t i = 0; i < BIG / 8; i++) ((uint64_t *)buf)[i] = ((uint64_t)rank << 32) | i;
  CHECK_OK(fh_put(ctx, peer, his[GOOD], buf, BIG));
  MPI_Barrier(MPI_COMM_WORLD);
  int left = (rank + n - 1) % n;
  for (size_t i = 0; i < BIG / 8; i++)
    CHECK(good[i] == (((uint64_t)left << 32) | i), "good[%zu] = %lx", i, (unsigned long)good[i]);
  /* No refused transfer changed a byte. */
  for (size_t i = 0; i < BIG; i++) CHECK((unsigned char)guard[i] == 0x5A, "guard neighbour changed at %zu", i);
  for (size_t i = 0; i < 2 * BIG; i++) CHECK((unsigned char)edge[i] == 0xA5, "edge changed at %zu", i);
  for (size_t i = 0; i < 4; i++) CHECK(ro_global[i] == 11 + i, "const global changed");

  MPI_Barrier(MPI_COMM_WORLD);
  CHECK_OK(fh_finalize(ctx));
  TEST_PASS("test_hostile");
  MPI_Finalize();
  return 0;
}
