/* Long active messages: payload placement.
 *
 * Every rank sends long requests of sizes 0, 1, 63, 4097, 64 KiB, 300000 and 1 MiB to
 * every rank (itself included), each into its own slot of the target's buffer, first
 * in fh_malloc memory, then in fh_mem_register'ed memory. The request handler must
 * see buf == dst with the payload already in place (checksum checked inside the
 * handler, guard bytes after it untouched) and replies long with a transformed
 * payload into the requester's buffer, where the reply handler checks placement the
 * same way. Afterwards every byte of every buffer is checked (payloads stay where
 * they landed, nothing else was written).
 *
 * Refusals: fh_am_request_long to memory the target never registered (a malloc'd
 * buffer of a peer and of this rank, address 0x1000, a range running past the end of
 * a registration) fails synchronously with FH_ERR_ACCESS and runs no handler; a
 * reply_long to memory the requester never registered is refused by the requester
 * and reported to the replier by fh_poll as FH_ERR_ACCESS. The job goes on: a long
 * AM afterwards succeeds. */
#include "common.h"

enum { H_LONG = 160, H_LONG_REP = 161, H_BADREPLY = 162, H_NEVER = 163 };
#define GUARD 0xEE
#define NSIZES 7
static const size_t sizes[NSIZES] = {0, 1, 63, 4097, 65536, 300000, 1 << 20};
static size_t slot_off[NSIZES], LANE;

static fh_ctx_t *ctx;
static int me, np;


static uint64_t fnv(const unsigned char *p, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 1099511628211ULL; }
  return h;
}
/* Byte i of the request payload from src to dst, size index k, region g. */
static unsigned char pat(int src, int dst, int k, int g, size_t i) {
  return (unsigned char)(src * 31 + dst * 17 + k * 7 + g * 101 + i * 13 + (i >> 10));
}

/* Barrier that keeps serving active messages (fh_barrier). */
static void poll_barrier(void) { CHECK_OK(fh_barrier(ctx)); }

static long req_handled, rep_handled, never_handled;

static int guard_ok(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != GUARD) return 0;
  return 1;
}

/* args: [src, k, size, checksum, dst, reply_dst, region] */
static void h_long(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  (void)user;
  req_handled++;
  HCHECK(nargs == 7, "long request: nargs %zu", nargs);
  if (nargs != 7) return;
  int src = fh_am_source(tok);
  HCHECK(src == (int)args[0], "long request: fh_am_source %d, sender %d", src, (int)args[0]);
  HCHECK(buf == (void *)(uintptr_t)args[4], "long request from %d size %llu: buf %p but dst was %p", src,
         (unsigned long long)args[2], buf, (void *)(uintptr_t)args[4]);
  HCHECK(nbytes == args[2], "long request from %d: nbytes %zu, sent %llu", src, nbytes, (unsigned long long)args[2]);
  if (buf != (void *)(uintptr_t)args[4] || nbytes != args[2]) return;
  HCHECK(fnv(buf, nbytes) == args[3], "long request from %d (%zu B at %p): payload not in place when the handler ran",
         src, nbytes, buf);
  HCHECK(guard_ok((unsigned char *)buf + nbytes, 64), "long request from %d (%zu B): bytes after the payload changed",
         src, nbytes);
  /* Reply long with the payload transformed, into the requester's buffer. */
  unsigned char *t = malloc(nbytes + 1);
  for (size_t i = 0; i < nbytes; i++) t[i] = ((unsigned char *)buf)[i] ^ 0xA5;
  uint64_t r[5] = {(uint64_t)me, args[1], nbytes, fnv(t, nbytes), args[5]};
  int rc = fh_am_reply_long(tok, H_LONG_REP, t, nbytes, (void *)(uintptr_t)args[5], r, 5);
  HCHECK(rc == FH_OK, "fh_am_reply_long: %d", rc);
  memset(t, 0, nbytes); /* the reply copied the payload */
  free(t);
}

static void h_long_rep(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  (void)user;
  rep_handled++;
  HCHECK(nargs == 5, "long reply: nargs %zu", nargs);
  if (nargs != 5) return;
  HCHECK(fh_am_source(tok) == (int)args[0], "long reply: wrong source");
  HCHECK(buf == (void *)(uintptr_t)args[4], "long reply from %d: buf %p but dst was %p", (int)args[0], buf,
         (void *)(uintptr_t)args[4]);
  HCHECK(nbytes == args[2], "long reply: nbytes %zu, expected %llu", nbytes, (unsigned long long)args[2]);
  if (buf != (void *)(uintptr_t)args[4] || nbytes != args[2]) return;
  HCHECK(fnv(buf, nbytes) == args[3], "long reply from %d (%zu B): payload not in place", (int)args[0], nbytes);
  HCHECK(guard_ok((unsigned char *)buf + nbytes, 64), "long reply (%zu B): bytes after the payload changed", nbytes);
}

/* Replies long to an address the requester never registered (args[0]). */
static long badreply_sent;
static void h_badreply(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  (void)buf; (void)nbytes; (void)user;
  HCHECK(nargs == 1, "badreply nargs");
  unsigned char data[256];
  memset(data, 1, sizeof data);
  int rc = fh_am_reply_long(tok, H_NEVER, data, sizeof data, (void *)(uintptr_t)args[0], NULL, 0);
  HCHECK(rc == FH_OK, "reply_long to a bad address must be accepted locally: %d", rc);
  badreply_sent++;
}
static void h_never(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  (void)tok; (void)buf; (void)nbytes; (void)args; (void)nargs; (void)user;
  never_handled++;
}

static void run_region(int g, unsigned char *req, unsigned char *rep, void **reqs, void **reps) {
  memset(req, GUARD, (size_t)np * LANE);
  memset(rep, GUARD, (size_t)np * LANE);
  long req0 = req_handled, rep0 = rep_handled;
  poll_barrier();
  unsigned char *src = malloc(sizes[NSIZES - 1]);
  for (int j = 0; j < np; j++) {
    int d = (me + j) % np;
    for (int k = 0; k < NSIZES; k++) {
      size_t n = sizes[k];
      for (size_t i = 0; i < n; i++) src[i] = pat(me, d, k, g, i);
      unsigned char *dst = (unsigned char *)reqs[d] + (size_t)me * LANE + slot_off[k];
      unsigned char *rdst = (unsigned char *)reps[me] + (size_t)d * LANE + slot_off[k];
      uint64_t a[7] = {(uint64_t)me, (uint64_t)k, n, fnv(src, n), (uint64_t)(uintptr_t)dst,
                       (uint64_t)(uintptr_t)rdst, (uint64_t)g};
      CHECK_OK(fh_am_request_long(ctx, d, H_LONG, src, n, dst, a, 7));
      memset(src, 0x11, n); /* buf may be reused when the call returns */
    }
  }
  free(src);
  double t0 = MPI_Wtime();
  while (rep_handled - rep0 < (long)np * NSIZES) {
    CHECK_OK(fh_poll(ctx));
    if (MPI_Wtime() - t0 > 60) FAILF("region %d: %ld of %d long replies", g, rep_handled - rep0, np * NSIZES);
  }
  poll_barrier();
  CHECK_HANDLERS();
  CHECK(req_handled - req0 == (long)np * NSIZES, "region %d: handled %ld long requests, expected %d", g,
        req_handled - req0, np * NSIZES);
  CHECK(rep_handled - rep0 == (long)np * NSIZES, "region %d: %ld long replies", g, rep_handled - rep0);
  /* Every byte: payloads where they landed, guard everywhere else. */
  for (int s = 0; s < np; s++) {
    for (int k = 0; k <= NSIZES; k++) {
      size_t from = k == 0 ? 0 : slot_off[k - 1] + sizes[k - 1];
      size_t to = k == NSIZES ? LANE : slot_off[k];
      for (size_t o = from; o < to; o++) {
        if (req[(size_t)s * LANE + o] != GUARD) FAILF("region %d: request lane %d byte %zu (outside payloads) changed", g, s, o);
        if (rep[(size_t)s * LANE + o] != GUARD) FAILF("region %d: reply lane %d byte %zu (outside payloads) changed", g, s, o);
      }
      if (k == NSIZES) break;
      for (size_t i = 0; i < sizes[k]; i++) {
        unsigned char q = req[(size_t)s * LANE + slot_off[k] + i], want = pat(s, me, k, g, i);
        if (q != want) FAILF("region %d: long payload from %d size %zu byte %zu is %d, expected %d", g, s, sizes[k], i, q, want);
        unsigned char p = rep[(size_t)s * LANE + slot_off[k] + i], wantr = pat(me, s, k, g, i) ^ 0xA5;
        if (p != wantr) FAILF("region %d: long reply from %d size %zu byte %zu is %d, expected %d", g, s, sizes[k], i, p, wantr);
      }
    }
  }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  ctx = fh_test_init(&me, &np);
  CHECK(np <= 64, "at most 64 ranks");
  CHECK(fh_am_max_long(ctx) >= sizes[NSIZES - 1], "fh_am_max_long = %zu", fh_am_max_long(ctx));
  size_t off = 0;
  for (int k = 0; k < NSIZES; k++) {
    slot_off[k] = off;
    off += (sizes[k] + 64 + 127) & ~(size_t)63; /* 64 guard bytes at least */
  }
  LANE = off;

  CHECK_OK(fh_am_register(ctx, H_LONG, h_long, NULL));
  CHECK_OK(fh_am_register(ctx, H_LONG_REP, h_long_rep, NULL));
  CHECK_OK(fh_am_register(ctx, H_BADREPLY, h_badreply, NULL));
  CHECK_OK(fh_am_register(ctx, H_NEVER, h_never, NULL));

  void *reqs[64], *reps[64];
  /* 1. fh_malloc memory. */
  unsigned char *hreq = fh_malloc(ctx, (size_t)np * LANE), *hrep = fh_malloc(ctx, (size_t)np * LANE);
  CHECK(hreq && hrep, "fh_malloc of 2 x %zu bytes", (size_t)np * LANE);
  exchange_ptrs(hreq, reqs, MPI_COMM_WORLD);
  exchange_ptrs(hrep, reps, MPI_COMM_WORLD);
  run_region(0, hreq, hrep, reqs, reps);

  /* 2. fh_mem_register'ed memory (heap buffers released first). */
  poll_barrier();
  fh_free(ctx, hreq);
  fh_free(ctx, hrep);
  unsigned char *ureq = aligned_alloc(4096, (size_t)np * LANE + 4096);
  unsigned char *urep = aligned_alloc(4096, (size_t)np * LANE + 4096);
  CHECK_OK(fh_mem_register(ctx, ureq, (size_t)np * LANE));
  CHECK_OK(fh_mem_register(ctx, urep, (size_t)np * LANE));
  exchange_ptrs(ureq, reqs, MPI_COMM_WORLD);
  exchange_ptrs(urep, reps, MPI_COMM_WORLD);
  run_region(1, ureq, urep, reqs, reps);

  /* 3. Destinations the target never registered: synchronous FH_ERR_ACCESS. */
  unsigned char *unreg = malloc(8192);
  memset(unreg, GUARD, 8192);
  void *unregs[64];
  exchange_ptrs(unreg, unregs, MPI_COMM_WORLD);
  poll_barrier();
  int right = (me + 1) % np;
  long req0 = req_handled;
  unsigned char data[4097];
  memset(data, 3, sizeof data);
  uint64_t a[7] = {0};
  CHECK_RC(fh_am_request_long(ctx, right, H_LONG, data, sizeof data, unregs[right], a, 7), FH_ERR_ACCESS);
  CHECK_RC(fh_am_request_long(ctx, me, H_LONG, data, sizeof data, unreg, a, 7), FH_ERR_ACCESS);
  CHECK_RC(fh_am_request_long(ctx, right, H_LONG, data, 16, (void *)0x1000, a, 7), FH_ERR_ACCESS);
  CHECK_RC(fh_am_request_long(ctx, right, H_LONG, data, 100, (unsigned char *)reqs[right] + (size_t)np * LANE - 10,
                              a, 7), FH_ERR_ACCESS); /* runs past the end of the registration */
  poll_barrier();
  CHECK(req_handled == req0, "a refused long request ran a handler");
  CHECK_HANDLERS();

  /* 4. reply_long to memory the requester never registered: the requester refuses it
   *    and fh_poll on the replier reports FH_ERR_ACCESS. */
  /* Everyone must have left the polling barrier before anyone sends: a rank still
   * polling there would run the bad reply and see the refusal in the barrier. No
   * firehose traffic is pending, so a plain MPI barrier is safe here. */
  MPI_Barrier(MPI_COMM_WORLD);
  uint64_t bad = (uint64_t)(uintptr_t)unreg;
  CHECK_OK(fh_am_request_short(ctx, right, H_BADREPLY, &bad, 1));
  int rc = FH_OK;
  double t0 = MPI_Wtime();
  while (rc == FH_OK) {
    rc = fh_poll(ctx);
    if (MPI_Wtime() - t0 > 60) FAILF("the refused reply_long was never reported by fh_poll");
  }
  CHECK_RC(rc, FH_ERR_ACCESS);
  CHECK(badreply_sent == 1, "badreply handler ran %ld times", badreply_sent);
  poll_barrier();
  CHECK(never_handled == 0, "a refused long reply ran its handler");
  for (int i = 0; i < 8192; i++) CHECK(unreg[i] == GUARD, "unregistered memory written");
  CHECK_OK(fh_poll(ctx)); /* reported once */

  /* 5. The job goes on: another long AM round trip succeeds. */
  memset(ureq, GUARD, (size_t)np * LANE);
  memset(urep, GUARD, (size_t)np * LANE);
  poll_barrier();
  long rep0 = rep_handled;
  for (size_t i = 0; i < 4097; i++) data[i] = pat(me, right, 3, 1, i);
  unsigned char *dst = (unsigned char *)reqs[right] + (size_t)me * LANE + slot_off[3];
  unsigned char *rdst = (unsigned char *)reps[me] + (size_t)right * LANE + slot_off[3];
  uint64_t ok[7] = {(uint64_t)me, 3, 4097, fnv(data, 4097), (uint64_t)(uintptr_t)dst, (uint64_t)(uintptr_t)rdst, 1};
  CHECK_OK(fh_am_request_long(ctx, right, H_LONG, data, 4097, dst, ok, 7));
  t0 = MPI_Wtime();
  while (rep_handled == rep0) {
    CHECK_OK(fh_poll(ctx));
    if (MPI_Wtime() - t0 > 60) FAILF("no reply to the long request after the refusals");
  }
  poll_barrier();
  CHECK_HANDLERS();
  for (size_t i = 0; i < 4097; i++) CHECK(urep[(size_t)right * LANE + slot_off[3] + i] == (pat(me, right, 3, 1, i) ^ 0xA5), "final reply byte %zu", i);

  CHECK_OK(fh_mem_unregister(ctx, ureq, (size_t)np * LANE));
  CHECK_OK(fh_mem_unregister(ctx, urep, (size_t)np * LANE));
  CHECK_OK(fh_finalize(ctx));
  TEST_PASS("am_long");
  free(ureq); free(urep); free(unreg);
  MPI_Finalize();
  return 0;
}
