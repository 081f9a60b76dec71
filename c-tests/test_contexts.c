/* Two contexts at once: A on MPI_COMM_WORLD, B on a communicator from MPI_Comm_split
 * (even/odd ranks, in reverse order so B's ranks differ from A's; at 2 ranks one
 * reversed communicator of both ranks -- see the note below). Puts, gets and AMs on
 * both, interleaved. The same handler indices are registered to different handlers
 * on A and B and must dispatch to the right one, with fh_am_source giving the rank in
 * that context's communicator. A handle of one context is unknown to the other. Both
 * are finalized; MPI is still usable; a new context on MPI_COMM_WORLD still works,
 * and a rank waiting in one context (fh_finalize) answers what a peer needs from it in
 * another (the invalidation of an fh_mem_unregister).
 *
 * Note: the split never makes single-rank communicators, because Open MPI 4.1's
 * osc/rdma fails MPI_Win_create on a communicator of one process (MPI_ERR_WIN, see
 * open-mpi/ompi#10726), so fh_init fails with FH_ERR_MPI there; and the halves
 * create their contexts one at a time (see main). */
#include "common.h"

enum { H_REQ = 170, H_REP = 171, H_MED = 172 };
#define ITER 60
#define SLOT 64
#define RO_OFF ((size_t)1 << 20) /* read-only area of each heap */
#define RO_LEN ((size_t)8192)

typedef struct {
  char tag;      /* 'A' or 'B' */
  fh_ctx_t *ctx;
  MPI_Comm comm;
  int me, np;
  unsigned char *heap;
  void *heaps[256];
  long reqs, reps, meds, bad;
  long med_to[256]; /* mediums sent to each rank */
  char err[256];
} cx_t;

static cx_t A = {.tag = 'A'}, B = {.tag = 'B'};

static void note(cx_t *c, const char *what) {
  if (c->bad++ == 0) snprintf(c->err, sizeof c->err, "%s", what);
}

static void h_req(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  cx_t *c = user;
  (void)buf;
  if (nbytes != 0 || nargs != 3) { note(c, "request shape"); return; }
  if (args[0] != (uint64_t)c->tag) note(c, "a request sent on the other context ran this context's handler");
  if ((uint64_t)fh_am_source(tok) != args[1]) note(c, "fh_am_source is not the sender's rank in this communicator");
  if (fh_rank(c->ctx) != c->me) note(c, "fh_rank in handler");
  c->reqs++;
  uint64_t r[3] = {(uint64_t)c->tag, (uint64_t)c->me, args[2]};
  if (fh_am_reply_short(tok, H_REP, r, 3) != FH_OK) note(c, "reply failed");
}
static void h_rep(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  cx_t *c = user;
  (void)buf; (void)nbytes;
  if (nargs != 3 || args[0] != (uint64_t)c->tag) { note(c, "reply dispatched to the wrong context"); return; }
  if ((uint64_t)fh_am_source(tok) != args[1]) note(c, "reply source");
  c->reps++;
}
static void h_med(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  cx_t *c = user;
  (void)tok;
  if (nargs != 1 || args[0] != (uint64_t)c->tag || nbytes != 100) { note(c, "medium on the wrong context"); return; }
  for (size_t i = 0; i < nbytes; i++)
    if (((unsigned char *)buf)[i] != (unsigned char)(c->tag + i)) { note(c, "medium payload"); return; }
  c->meds++;
}
/* Registered on the other context at the same index: must never run. */
static void h_wrong(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  (void)tok; (void)buf; (void)nbytes; (void)args; (void)nargs;
  note(user, "handler of the other context ran");
}

static unsigned char ro(char tag, int rank, size_t i) { return (unsigned char)(tag * 3 + rank * 29 + i * 7 + (i >> 8)); }
static unsigned char slotbyte(char tag, int src, int it, size_t i) { return (unsigned char)(tag + src * 13 + it * 5 + i); }

/* Poll both contexts (each context progresses only its own AMs). */
static void poll_both(void) {
  CHECK_OK(fh_poll(A.ctx));
  CHECK_OK(fh_poll(B.ctx));
}
static void barrier_both(void) {
  MPI_Request r[2];
  MPI_Ibarrier(A.comm, &r[0]);
  MPI_Ibarrier(B.comm, &r[1]);
  MPI_Status st[2]; /* not MPI_STATUSES_IGNORE: GCC 12 -Wstringop-overflow trips on MPICH's definition */
  int done = 0;
  while (!done) {
    poll_both();
    MPI_Testall(2, r, &done, st);
  }
}

static void setup(cx_t *c, MPI_Comm comm) {
  c->comm = comm;
  CHECK_OK(fh_init(comm, NULL, &c->ctx));
  c->me = fh_rank(c->ctx);
  c->np = fh_size(c->ctx);
  int r, n;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &n);
  CHECK(c->me == r && c->np == n, "context %c: fh_rank/fh_size %d/%d, communicator says %d/%d", c->tag, c->me, c->np, r, n);
  c->heap = fh_malloc(c->ctx, RO_OFF + RO_LEN);
  CHECK(c->heap != NULL, "fh_malloc on %c", c->tag);
  for (size_t i = 0; i < RO_LEN; i++) c->heap[RO_OFF + i] = ro(c->tag, c->me, i);
  memset(c->heap, 0, RO_OFF);
  exchange_ptrs(c->heap, c->heaps, comm);
}

/* One round on one context: a put into my slot at the right neighbour, a get of the
 * neighbour's read-only area, an AM request (and its reply) to a random rank. */
static void round_on(cx_t *c, int it, uint64_t *s) {
  int right = (c->me + 1) % c->np;
  unsigned char src[SLOT], dst[256];
  for (size_t i = 0; i < SLOT; i++) src[i] = slotbyte(c->tag, c->me, it, i);
  unsigned char *slot = (unsigned char *)c->heaps[right] + ((size_t)c->me * ITER + (size_t)it) * SLOT;
  if (it % 2) {
    CHECK_OK(fh_put(c->ctx, right, slot, src, SLOT));
  } else {
    fh_handle_t h;
    CHECK_OK(fh_put_nb(c->ctx, right, slot, src, SLOT, &h));
    /* The handle means nothing to the other context (which has none outstanding). */
    cx_t *other = c == &A ? &B : &A;
    CHECK_RC(fh_test(other->ctx, h), FH_ERR_INVALID_ARG);
    CHECK_OK(fh_wait(c->ctx, h));
  }
  int peer = (int)(rng_next(s) % (uint64_t)c->np);
  size_t off = rng_next(s) % (RO_LEN - sizeof dst);
  CHECK_OK(fh_get(c->ctx, dst, peer, (unsigned char *)c->heaps[peer] + RO_OFF + off, sizeof dst));
  for (size_t i = 0; i < sizeof dst; i++)
    CHECK(dst[i] == ro(c->tag, peer, off + i), "context %c: get from rank %d byte %zu is %d, expected %d", c->tag, peer,
          off + i, dst[i], ro(c->tag, peer, off + i));
  uint64_t a[3] = {(uint64_t)c->tag, (uint64_t)c->me, (uint64_t)it};
  CHECK_OK(fh_am_request_short(c->ctx, (int)(rng_next(s) % (uint64_t)c->np), H_REQ, a, 3));
  unsigned char m[100];
  for (size_t i = 0; i < sizeof m; i++) m[i] = (unsigned char)(c->tag + i);
  uint64_t t = (uint64_t)c->tag;
  int to = (int)(rng_next(s) % (uint64_t)c->np);
  CHECK_OK(fh_am_request_medium(c->ctx, to, H_MED, m, sizeof m, &t, 1));
  c->med_to[to]++;
}

static void check_slots(cx_t *c) {
  int left = (c->me + c->np - 1) % c->np;
  for (int it = 0; it < ITER; it++)
    for (size_t i = 0; i < SLOT; i++) {
      unsigned char v = c->heap[((size_t)left * ITER + (size_t)it) * SLOT + i];
      CHECK(v == slotbyte(c->tag, left, it, i), "context %c: slot of rank %d round %d byte %zu is %d", c->tag, left, it, i, v);
    }
  /* A medium request has no reply, and a barrier after sending it does not mean
   * the receiver ran its handler: wait (serving both contexts) until every medium
   * sent here arrived. A lost one fails after a minute. */
  long want[256];
  MPI_Allreduce(c->med_to, want, c->np, MPI_LONG, MPI_SUM, c->comm);
  double t0 = MPI_Wtime();
  while (c->meds < want[c->me]) {
    poll_both();
    if (MPI_Wtime() - t0 > 60) FAILF("context %c: %ld mediums handled, %ld sent here", c->tag, c->meds, want[c->me]);
  }
  CHECK(c->bad == 0, "context %c: %ld handler problems, first: %s", c->tag, c->bad, c->err);
  long mine[3] = {c->reqs, c->reps, c->meds}, tot[3];
  MPI_Allreduce(mine, tot, 3, MPI_LONG, MPI_SUM, c->comm);
  CHECK(c->reps == ITER, "context %c: %ld replies, expected %d", c->tag, c->reps, ITER);
  CHECK(tot[0] == (long)ITER * c->np && tot[1] == tot[0] && tot[2] == tot[0],
        "context %c: job handled %ld requests, %ld replies, %ld mediums, expected %ld each", c->tag, tot[0], tot[1],
        tot[2], (long)ITER * c->np);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int wr, wn;
  MPI_Comm_rank(MPI_COMM_WORLD, &wr);
  MPI_Comm_size(MPI_COMM_WORLD, &wn);
  fh_test_rank = wr;
  CHECK(wn <= 256, "at most 256 ranks");
  MPI_Comm sub;
  int color = (wn >= 4 && wn % 2 == 0) ? wr % 2 : 0;
  MPI_Comm_split(MPI_COMM_WORLD, color, wn - wr, &sub); /* reversed order */

  setup(&A, MPI_COMM_WORLD);
  /* The two halves create their contexts one after the other: Open MPI 4.1's
   * osc/rdma names its shared-memory file after the communicator's CID, which the
   * halves of one MPI_Comm_split share, so windows created at the same time on the
   * two halves collide (MPI_ERR_WIN; open-mpi/ompi#9492, fixed in Open MPI 5). */
  for (int c = 0; c < 2; c++) {
    if (color == c) setup(&B, sub);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  CHECK(A.ctx != B.ctx, "two contexts share a handle");
  /* Same indices, different handlers per context; a decoy on the other's index. */
  CHECK_OK(fh_am_register(A.ctx, H_REQ, h_req, &A));
  CHECK_OK(fh_am_register(B.ctx, H_REQ, h_req, &B));
  CHECK_OK(fh_am_register(A.ctx, H_REP, h_rep, &A));
  CHECK_OK(fh_am_register(B.ctx, H_REP, h_rep, &B));
  CHECK_OK(fh_am_register(A.ctx, H_MED, h_wrong, &A)); /* replaced below: the last registration wins */
  CHECK_OK(fh_am_register(A.ctx, H_MED, h_med, &A));
  CHECK_OK(fh_am_register(B.ctx, H_MED, h_med, &B));
  CHECK_OK(fh_am_register(B.ctx, H_MED + 1, h_wrong, &B));
  MPI_Barrier(MPI_COMM_WORLD);

  uint64_t s = 0x51ed + (uint64_t)wr * 977;
  for (int it = 0; it < ITER; it++) {
    if (rng_next(&s) % 2) {
      round_on(&A, it, &s);
      round_on(&B, it, &s);
    } else {
      round_on(&B, it, &s);
      round_on(&A, it, &s);
    }
    /* Wait for this round's replies on both, serving both meanwhile. */
    double t0 = MPI_Wtime();
    while (A.reps < it + 1 || B.reps < it + 1) {
      poll_both();
      if (MPI_Wtime() - t0 > 60) FAILF("round %d: replies A %ld B %ld", it, A.reps, B.reps);
    }
  }
  barrier_both();
  check_slots(&A);
  check_slots(&B);
  barrier_both();

  CHECK_OK(fh_finalize(B.ctx));
  /* A is unaffected by B's finalize. */
  CHECK(fh_rank(A.ctx) == wr, "context A after B's finalize");
  CHECK_RC(fh_rank(B.ctx), FH_ERR_STATE);
  unsigned char x = 0x99, y = 0;
  int right = (wr + 1) % wn;
  CHECK_OK(fh_put(A.ctx, right, A.heaps[right], &x, 1));
  CHECK_OK(fh_get(A.ctx, &y, right, A.heaps[right], 1));
  CHECK(y == 0x99, "put/get on A after B's finalize");
  CHECK_OK(fh_finalize(A.ctx));

  /* MPI is still usable, on both communicators. */
  int fin = 1, one = 1, sum = 0;
  MPI_Finalized(&fin);
  CHECK(fin == 0, "fh_finalize finalized the program's MPI");
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, sub);
  CHECK(sum == B.np, "MPI_Allreduce on the split communicator");
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  CHECK(sum == wn, "MPI_Allreduce on MPI_COMM_WORLD");
  MPI_Comm_free(&sub);

  /* And a fresh context on the world works. */
  fh_ctx_t *c;
  CHECK_OK(fh_init(MPI_COMM_WORLD, NULL, &c));
  unsigned char *h = fh_malloc(c, 64);
  void *hs[256];
  exchange_ptrs(h, hs, MPI_COMM_WORLD);
  x = (unsigned char)wr;
  CHECK_OK(fh_put(c, right, hs[right], &x, 1));
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(h[0] == (unsigned char)((wr + wn - 1) % wn), "put on a context created after two were finalized");

  /* A wait in one context serves the others: rank 0 unregisters memory the other
   * ranks hold through context c (they put into it), while they already wait in
   * context d's fh_finalize for rank 0. That wait must answer c's invalidation, or
   * both sides wait for ever. */
  fh_ctx_t *d;
  CHECK_OK(fh_init(MPI_COMM_WORLD, NULL, &d));
  unsigned char *m = malloc(4096);
  CHECK(m != NULL, "malloc");
  CHECK_OK(fh_mem_register(c, m, 4096));
  void *ms[256];
  exchange_ptrs(m, ms, MPI_COMM_WORLD);
  if (wr != 0) CHECK_OK(fh_put(c, 0, (unsigned char *)ms[0] + wr, &x, 1));
  MPI_Barrier(MPI_COMM_WORLD);
  if (wr == 0) CHECK_OK(fh_mem_unregister(c, m, 4096));
  CHECK_OK(fh_finalize(d)); /* collective: the others wait here for rank 0 */
  if (wr != 0) CHECK_OK(fh_mem_unregister(c, m, 4096));
  CHECK_OK(fh_finalize(c));
  free(m);

  TEST_PASS("contexts");
  MPI_Finalize();
  return 0;
}
