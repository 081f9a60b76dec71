/* Active messages still in flight when every rank calls fh_finalize, as a stranger
 * writes it: every rank sends ROUNDS short and medium requests to every rank (itself
 * included), whose handlers reply (short or medium), and then calls fh_finalize at
 * once, without polling or a barrier. The header: fh_finalize completes all
 * operations and serves AMs until every rank arrives, so after it every request
 * handler and every reply handler has run, and nothing is left in flight.
 * Once, some replies were lost (fh_finalize returned FH_OK; 9 launches in 10 at 8
 * ranks), and with FH_SHM=0 the ranks hung closing the transport. */
#include "common.h"

#define ROUNDS 200
#define H_REQ 128
#define H_REP 129

static volatile long requests, replies;
static int reply_failed;

static void on_request(fh_token_t *t, void *buf, size_t n, const uint64_t *args, size_t nargs,
                       void *user) {
  (void)buf, (void)user;
  requests++;
  if (nargs != 1 || (args[0] & 1) != (n > 0)) reply_failed = 1;
  char body[100];
  memset(body, (int)(args[0] & 0x7f), sizeof body);
  int rc = (args[0] & 1) ? fh_am_reply_medium(t, H_REP, body, sizeof body, args, 1)
                         : fh_am_reply_short(t, H_REP, args, 1);
  if (rc != FH_OK) reply_failed = 1;
}

static void on_reply(fh_token_t *t, void *buf, size_t n, const uint64_t *args, size_t nargs,
                     void *user) {
  (void)t, (void)user;
  if (nargs != 1) reply_failed = 1;
  if (n > 0 && (n != 100 || ((unsigned char *)buf)[99] != (unsigned char)(args[0] & 0x7f)))
    reply_failed = 1;
  replies++;
}

int main(int argc, char **argv) {
  int me, np;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  fh_test_rank = me;
  fh_ctx_t *ctx;
  CHECK_OK(fh_init(MPI_COMM_WORLD, NULL, &ctx));
  CHECK_OK(fh_am_register(ctx, H_REQ, on_request, NULL));
  CHECK_OK(fh_am_register(ctx, H_REP, on_reply, NULL));
  MPI_Barrier(MPI_COMM_WORLD);
  char payload[2000];
  memset(payload, 7, sizeof payload);
  for (int i = 0; i < ROUNDS; i++)
    for (int p = 0; p < np; p++) {
      uint64_t a = (uint64_t)i;
      int to = (p + me) % np;
      if (i & 1)
        CHECK_OK(fh_am_request_medium(ctx, to, H_REQ, payload, sizeof payload, &a, 1));
      else
        CHECK_OK(fh_am_request_short(ctx, to, H_REQ, &a, 1));
    }
  CHECK_OK(fh_finalize(ctx));
  long want = (long)ROUNDS * np;
  CHECK(!reply_failed, "a handler saw a bad frame or could not reply");
  CHECK(requests == want, "fh_finalize returned with %ld of %ld requests handled", requests, want);
  CHECK(replies == want, "fh_finalize returned with %ld of %ld replies handled", replies, want);
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 0) printf("PASS test_finalize_am (%d ranks, %ld requests each)\n", np, want);
  MPI_Finalize();
  return 0;
}
