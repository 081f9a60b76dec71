/* fh_finalize called from inside an AM handler must be refused with FH_ERR_STATE
 * ("Blocking calls return FH_ERR_STATE inside handlers") and leave the context
 * working: afterwards this rank still has its rank, can put, get and exchange AMs,
 * and the real fh_finalize succeeds. */
#include "common.h"

enum { H_FIN = 210, H_PING = 211, H_PONG = 212 };
static fh_ctx_t *ctx;
static int fin_rc = 12345, fin_ran, pongs;

static void h_fin(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  (void)tok; (void)buf; (void)nbytes; (void)args; (void)nargs; (void)user;
  fin_rc = fh_finalize(ctx);
  fin_ran++;
}
static void h_ping(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  (void)buf; (void)nbytes; (void)user;
  fh_am_reply_short(tok, H_PONG, args, nargs);
}
static void h_pong(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  (void)tok; (void)buf; (void)nbytes; (void)args; (void)nargs; (void)user;
  pongs++;
}

/* Barrier that keeps serving active messages (fh_barrier). */
static void poll_barrier(void) { CHECK_OK(fh_barrier(ctx)); }

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int me, np;
  ctx = fh_test_init(&me, &np);
  int right = (me + 1) % np;
  unsigned char *heap = fh_malloc(ctx, 4096);
  void *heaps[256];
  CHECK(heap && np <= 256, "setup");
  exchange_ptrs(heap, heaps, MPI_COMM_WORLD);
  CHECK_OK(fh_am_register(ctx, H_FIN, h_fin, NULL));
  CHECK_OK(fh_am_register(ctx, H_PING, h_ping, NULL));
  CHECK_OK(fh_am_register(ctx, H_PONG, h_pong, NULL));
  MPI_Barrier(MPI_COMM_WORLD);

  CHECK_OK(fh_am_request_short(ctx, right, H_FIN, NULL, 0));
  double t0 = MPI_Wtime();
  while (!fin_ran) {
    CHECK_OK(fh_poll(ctx));
    if (MPI_Wtime() - t0 > 60) FAILF("the handler never ran");
  }
  CHECK_RC(fin_rc, FH_ERR_STATE);
  /* The context must be untouched. */
  CHECK(fh_rank(ctx) == me, "fh_rank after a refused fh_finalize in a handler = %d", fh_rank(ctx));
  poll_barrier();
  unsigned char src[64], dst[64];
  memset(src, me + 1, sizeof src);
  CHECK_OK(fh_put(ctx, right, heaps[right], src, sizeof src));
  CHECK_OK(fh_get(ctx, dst, right, heaps[right], sizeof dst));
  CHECK(memcmp(src, dst, sizeof src) == 0, "put/get after the refused fh_finalize");
  CHECK_OK(fh_am_request_short(ctx, right, H_PING, NULL, 0));
  t0 = MPI_Wtime();
  while (!pongs) {
    CHECK_OK(fh_poll(ctx));
    if (MPI_Wtime() - t0 > 60) FAILF("no AM reply after the refused fh_finalize");
  }
  poll_barrier();
  CHECK_OK(fh_finalize(ctx));
  TEST_PASS("handler_finalize");
  MPI_Finalize();
  return 0;
}
