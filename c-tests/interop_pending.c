/* Handlers already waiting for a rank run inside its next blocking MPI call, even one
 * MPI completes at once, as a stranger expects from the README ("synchronise with
 * MPI"). Each round, every rank sends a short request to its right neighbour, then
 * loops on MPI_Allreduce (phase 1) or MPI_Barrier + MPI_Allreduce (phase 2) until
 * every rank has its reply; the program never calls fh_poll. A rank that enters the
 * collective last (its request waiting for it) finds MPI done at once: if the call
 * ran no pending handler, the loop would need thousands of calls (measured: 58 000
 * on average at 4 ranks before the calls served the library on entry). The loop is
 * allowed 1000 calls per round. Run: mpirun -np 2|4|8 interop_pending */
#include "common.h"

#define ROUNDS 200
#define MAX_CALLS 1000
#define H_REQ 140
#define H_REP 141

static int me, np;
static volatile long handled, replies;

static void on_req(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *u) {
  (void)buf; (void)nbytes; (void)u;
  int src = fh_am_source(tok);
  HCHECK(nargs == 2 && args[0] == (uint64_t)src && args[1] == (uint64_t)handled, "request %ld from %d: bad args",
         handled, src);
  handled++;
  uint64_t r[2] = {args[0] * 7 + 1, args[1]};
  int rc = fh_am_reply_short(tok, H_REP, r, 2);
  HCHECK(rc == FH_OK, "fh_am_reply_short -> %d", rc);
}

static void on_rep(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *u) {
  (void)tok; (void)buf; (void)nbytes; (void)u;
  HCHECK(nargs == 2 && args[0] == (uint64_t)me * 7 + 1 && args[1] == (uint64_t)replies, "reply %ld: bad args",
         replies);
  replies++;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  fh_ctx_t *ctx = fh_test_init(&me, &np);
  alarm(120);
  CHECK_OK(fh_am_register(ctx, H_REQ, on_req, NULL));
  CHECK_OK(fh_am_register(ctx, H_REP, on_rep, NULL));
  MPI_Barrier(MPI_COMM_WORLD);
  long most = 0;
  for (int phase = 1; phase <= 2; phase++) {
    for (int r = 0; r < ROUNDS; r++) {
      long want = replies + 1;
      uint64_t a[2] = {(uint64_t)me, (uint64_t)(replies)};
      CHECK_OK(fh_am_request_short(ctx, (me + 1) % np, H_REQ, a, 2));
      /* Rank 1 arrives late, so the others wait for it inside the collective. */
      if (me == 1 % np && r % 4 == 0) usleep(2000);
      long calls = 0;
      int all = 0;
      while (!all) {
        int mine = replies >= want;
        if (phase == 2) MPI_Barrier(MPI_COMM_WORLD);
        MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        calls++;
        CHECK(calls <= MAX_CALLS, "phase %d round %d: no reply after %ld MPI calls (the calls did not run the waiting handlers)",
              phase, r, calls);
      }
      if (calls > most) most = calls;
    }
  }
  CHECK_HANDLERS();
  CHECK(replies == 2 * ROUNDS && handled == 2 * ROUNDS, "%ld replies, %ld requests handled, expected %d", replies,
        handled, 2 * ROUNDS);
  long worst = 0;
  MPI_Allreduce(&most, &worst, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
  if (me == 0) printf("interop_pending: %d round trips per rank, at most %ld MPI calls each\n", 2 * ROUNDS, worst);
  CHECK_OK(fh_finalize(ctx));
  MPI_Finalize();
  return 0;
}
