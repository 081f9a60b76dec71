/* Misuse that used to hang or give wrong answers (issue 14), 2 ranks, MPI_Barrier
 * between cases. Each case checks the status and a piece of the message:
 *  1. registrations until FH_ERR_NO_RESOURCE ("registrations in use", with the
 *     count); a put to plain memory still works; after one unregister another
 *     register works.
 *  2. fh_release with another context's pin: FH_ERR_INVALID_ARG, nothing changes (the
 *     right context then releases it).
 *  3. fh_init on an intercommunicator: FH_ERR_INVALID_ARG ("intracommunicator") on
 *     every rank.
 *  4. sizes that overflow (cfg.heap_size = SIZE_MAX; FH_HEAP_SIZE=2^64-1): refused
 *     naming FH_HEAP_SIZE.
 *  5. fh_version_check: semantic versioning before 1.0 (minor must match), and a
 *     config size of 0.
 *  6. messages: a put to a peer's read-only memory says "read-only"; FH_DEBUG_TABLES
 *     with a bad value is refused by name; an empty FH_SHM means the default;
 *     the 129th lock says 128. */
#include "common.h"

static const uint64_t ro_const[512] = {1, 2, 3};
static int me;

static void expect(int rc, int want, const char *what, const char *needle) {
  if (rc != want) FAILF("%s: returned %d (%s), expected %d", what, rc, fh_strerror(rc), want);
  char msg[1024];
  fh_last_error(msg, sizeof msg);
  if (needle && !strstr(msg, needle)) FAILF("%s: message lacks '%s': %s", what, needle, msg);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int np;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  fh_test_rank = me;
  CHECK(np == 2, "needs 2 ranks");
  int peer = 1 - me;
  fh_ctx_t *ctx;
  CHECK_OK(fh_init(MPI_COMM_WORLD, NULL, &ctx));

  /* 1. */
  enum { MAXR = 200, RLEN = 16384 };
  char *bufs[MAXR];
  int n = 0, rc = FH_OK;
  for (; n < MAXR; n++) {
    bufs[n] = aligned_alloc(4096, 4 * RLEN); /* apart: never adjacent */
    rc = fh_mem_register(ctx, bufs[n], RLEN);
    if (rc != FH_OK) break;
  }
  CHECK(n < MAXR, "1. %d registrations and no limit", n);
  expect(rc, FH_ERR_NO_RESOURCE, "1. register past the limit", "registrations in use");
  if (me == 0) printf("  1. %d registrations, then FH_ERR_NO_RESOURCE\n", n);
  char *plain = malloc(4096), *all[2];
  exchange_ptrs(plain, (void **)all, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  uint64_t v = 77;
  CHECK_OK(fh_put(ctx, peer, all[peer], &v, 8));
  CHECK_OK(fh_mem_unregister(ctx, bufs[0], RLEN));
  CHECK_OK(fh_mem_register(ctx, bufs[n], RLEN));
  CHECK_OK(fh_mem_unregister(ctx, bufs[n], RLEN));
  for (int i = 1; i < n; i++) CHECK_OK(fh_mem_unregister(ctx, bufs[i], RLEN));
  for (int i = 0; i <= n; i++) free(bufs[i]);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(*(uint64_t *)plain == 77, "1. put while the registrations were full");

  /* 2. */
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  fh_ctx_t *ctx2;
  CHECK_OK(fh_init(dup, NULL, &ctx2));
  fh_pin_t *pin;
  CHECK_OK(fh_local_pin(ctx, plain, 64, &pin));
  expect(fh_release(ctx2, pin), FH_ERR_INVALID_ARG, "2. fh_release with another context", "another context");
  CHECK_OK(fh_release(ctx, pin));
  CHECK_OK(fh_finalize(ctx2));
  MPI_Comm_free(&dup);

  /* 3. */
  MPI_Comm half, inter;
  MPI_Comm_split(MPI_COMM_WORLD, me, 0, &half);
  MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, peer, 5, &inter);
  fh_ctx_t *bad = NULL;
  expect(fh_init(inter, NULL, &bad), FH_ERR_INVALID_ARG, "3. fh_init on an intercommunicator", "intracommunicator");
  CHECK(bad == NULL, "3. ctx_out written");
  MPI_Comm_free(&inter);
  MPI_Comm_free(&half);

  /* 4. */
  fh_config_t cfg;
  fh_config_init(&cfg);
  cfg.heap_size = SIZE_MAX;
  expect(fh_init(MPI_COMM_WORLD, &cfg, &bad), FH_ERR_INVALID_ARG, "4. cfg.heap_size = SIZE_MAX", "FH_HEAP_SIZE");
  setenv("FH_HEAP_SIZE", "18446744073709551615", 1);
  expect(fh_init(MPI_COMM_WORLD, NULL, &bad), FH_ERR_INVALID_ARG, "4. FH_HEAP_SIZE=2^64-1", "FH_HEAP_SIZE");
  unsetenv("FH_HEAP_SIZE");

  /* 5. */
  CHECK_OK(fh_version_check(FH_VERSION_MAJOR, FH_VERSION_MINOR, sizeof(fh_config_t)));
  expect(fh_version_check(FH_VERSION_MAJOR, FH_VERSION_MINOR, 0), FH_ERR_VERSION, "5. config size 0", "sizeof");
  if (FH_VERSION_MAJOR == 0) {
    expect(fh_version_check(0, FH_VERSION_MINOR + 1, sizeof(fh_config_t)), FH_ERR_VERSION, "5. newer minor", "1.0");
    if (FH_VERSION_MINOR > 0)
      expect(fh_version_check(0, FH_VERSION_MINOR - 1, sizeof(fh_config_t)), FH_ERR_VERSION, "5. older minor",
             "1.0");
  }

  /* 6. */
  void *ro[2];
  exchange_ptrs((void *)ro_const, ro, MPI_COMM_WORLD);
  expect(fh_put(ctx, peer, ro[peer], &v, 8), FH_ERR_ACCESS, "6. put to read-only memory", "read-only");
  uint64_t w = 0;
  CHECK_OK(fh_get(ctx, &w, peer, ro[peer], 8));
  CHECK(w == 1, "6. get from read-only memory: %lu", (unsigned long)w);
  setenv("FH_DEBUG_TABLES", "maybe", 1);
  expect(fh_init(MPI_COMM_WORLD, NULL, &bad), FH_ERR_INVALID_ARG, "6. FH_DEBUG_TABLES=maybe", "FH_DEBUG_TABLES");
  unsetenv("FH_DEBUG_TABLES");
  setenv("FH_SHM", "", 1);
  CHECK_OK(fh_init(MPI_COMM_WORLD, NULL, &bad));
  CHECK_OK(fh_finalize(bad));
  unsetenv("FH_SHM");
  fh_lock_t *locks[129];
  int nl = 0;
  for (; nl < 129; nl++) {
    rc = fh_lock_create(ctx, 0, &locks[nl]);
    if (rc != FH_OK) break;
  }
  expect(rc, FH_ERR_NO_RESOURCE, "6. the 129th lock", "128");
  for (int i = 0; i < nl; i++) CHECK_OK(fh_lock_destroy(locks[i]));

  MPI_Barrier(MPI_COMM_WORLD);
  CHECK_OK(fh_finalize(ctx));
  TEST_PASS("test_misuse_np2");
  MPI_Finalize();
  return 0;
}
