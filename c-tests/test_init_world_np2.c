/* A program that never calls MPI_Init: fh_init_world initialises MPI, the library
 * owns it and finalizes it with its last context.
 *  - before: MPI_Initialized is 0; after fh_init_world: 1, and MPI_COMM_WORLD agrees
 *    with fh_rank/fh_size;
 *  - a second fh_init_world context shares that MPI;
 *  - puts, gets (heap and registered memory) and AMs work;
 *  - finalizing the second context leaves MPI up; finalizing the last one finalizes
 *    MPI (MPI_Finalized is 1), and fh_init_world afterwards is FH_ERR_STATE.
 * The program does not call MPI_Finalize itself (MPI is already finalized). */
#include "common.h"

enum { H_REQ = 180, H_REP = 181 };
static long reps, reqs;
static int me, np;

static void h_req(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  (void)user;
  if (nargs == 1 && args[0] == (uint64_t)fh_am_source(tok) && nbytes == 8 && memcmp(buf, "fh-world", 8) == 0) reqs++;
  uint64_t r = (uint64_t)me;
  fh_am_reply_short(tok, H_REP, &r, 1);
}
static void h_rep(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  (void)buf; (void)nbytes; (void)user;
  if (nargs == 1 && args[0] == (uint64_t)fh_am_source(tok)) reps++;
}

/* After MPI is finalized FAILF (MPI_Abort) cannot be used. */
#define LATE_CHECK(cond, ...)                                                      \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      fprintf(stderr, "[rank %d] FAIL %s:%d: ", me, __FILE__, __LINE__);           \
      fprintf(stderr, __VA_ARGS__);                                                \
      fprintf(stderr, "\n");                                                       \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

int main(void) {
  int flag = 1;
  MPI_Initialized(&flag);
  if (flag) { fprintf(stderr, "FAIL: MPI initialised before fh_init_world\n"); return 1; }

  fh_ctx_t *ctx, *ctx2;
  int rc = fh_init_world(NULL, &ctx);
  if (rc != FH_OK) {
    char m[512];
    fh_last_error(m, sizeof m);
    fprintf(stderr, "FAIL: fh_init_world returned %d: %s\n", rc, m);
    return 1;
  }
  me = fh_rank(ctx);
  np = fh_size(ctx);
  fh_test_rank = me;
  MPI_Initialized(&flag);
  CHECK(flag == 1, "MPI not initialised by fh_init_world");
  int wr, wn, provided;
  MPI_Comm_rank(MPI_COMM_WORLD, &wr);
  MPI_Comm_size(MPI_COMM_WORLD, &wn);
  CHECK(wr == me && wn == np, "fh_rank/fh_size %d/%d, MPI_COMM_WORLD %d/%d", me, np, wr, wn);
  MPI_Query_thread(&provided);
  CHECK(provided >= MPI_THREAD_SINGLE && provided <= MPI_THREAD_MULTIPLE, "thread level %d", provided);

  /* A second context on the world, on the MPI the library owns. */
  CHECK_OK(fh_init_world(NULL, &ctx2));
  CHECK(fh_rank(ctx2) == me, "second context rank");

  unsigned char *heap = fh_malloc(ctx, 1 << 16);
  unsigned char *user = malloc(1 << 16);
  CHECK(heap && user, "allocations");
  CHECK_OK(fh_mem_register(ctx, user, 1 << 16));
  void *heaps[2], *users[2];
  CHECK(np == 2, "run at 2 ranks");
  exchange_ptrs(heap, heaps, MPI_COMM_WORLD);
  exchange_ptrs(user, users, MPI_COMM_WORLD);
  CHECK_OK(fh_am_register(ctx, H_REQ, h_req, NULL));
  CHECK_OK(fh_am_register(ctx, H_REP, h_rep, NULL));
  MPI_Barrier(MPI_COMM_WORLD);

  int peer = 1 - me;
  unsigned char src[4096], dst[4096];
  for (int i = 0; i < 4096; i++) src[i] = (unsigned char)(me * 91 + i);
  CHECK_OK(fh_put(ctx, peer, heaps[peer], src, sizeof src));
  CHECK_OK(fh_put(ctx, peer, users[peer], src, sizeof src)); /* needs the peer's AM service */
  CHECK_OK(fh_get(ctx, dst, peer, users[peer], sizeof dst));
  CHECK(memcmp(dst, src, sizeof dst) == 0, "get from registered memory");
  CHECK_OK(fh_get(ctx, dst, peer, heaps[peer], sizeof dst));
  CHECK(memcmp(dst, src, sizeof dst) == 0, "get from heap");
  for (int k = 0; k < 100; k++) {
    uint64_t a = (uint64_t)me;
    CHECK_OK(fh_am_request_medium(ctx, k % 2 ? peer : me, H_REQ, "fh-world", 8, &a, 1));
  }
  double t0 = MPI_Wtime();
  while (reps < 100) {
    CHECK_OK(fh_poll(ctx));
    if (MPI_Wtime() - t0 > 60) FAILF("%ld of 100 replies", reps);
  }
  MPI_Request r;
  MPI_Ibarrier(MPI_COMM_WORLD, &r);
  for (int done = 0; !done;) {
    CHECK_OK(fh_poll(ctx));
    MPI_Test(&r, &done, MPI_STATUS_IGNORE);
  }
  CHECK(reqs == 100, "handled %ld requests, expected 100", reqs);
  for (int i = 0; i < 4096; i++) CHECK(heap[i] == (unsigned char)(peer * 91 + i) && user[i] == heap[i], "byte %d", i);

  CHECK_OK(fh_mem_unregister(ctx, user, 1 << 16));
  CHECK_OK(fh_finalize(ctx2));
  MPI_Finalized(&flag);
  CHECK(flag == 0, "MPI finalized while a context was still live");
  MPI_Barrier(MPI_COMM_WORLD); /* still usable */

  rc = fh_finalize(ctx);
  LATE_CHECK(rc == FH_OK, "fh_finalize returned %d", rc);
  flag = 0;
  MPI_Finalized(&flag);
  LATE_CHECK(flag == 1, "MPI_Finalized is 0 after the last context of fh_init_world was finalized");
  LATE_CHECK(fh_rank(ctx) == FH_ERR_STATE, "fh_rank after finalize = %d", fh_rank(ctx));
  fh_ctx_t *again = NULL;
  rc = fh_init_world(NULL, &again);
  LATE_CHECK(rc == FH_ERR_STATE, "fh_init_world after MPI was finalized returned %d, expected FH_ERR_STATE", rc);
  LATE_CHECK(again == NULL, "ctx_out written by a failed fh_init_world");
  rc = fh_init_comm_f(0, NULL, &again);
  LATE_CHECK(rc == FH_ERR_STATE, "fh_init_comm_f after MPI was finalized returned %d, expected FH_ERR_STATE", rc);
  TEST_PASS("init_world");
  free(user);
  return 0;
}
