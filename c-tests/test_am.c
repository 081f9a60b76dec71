/* Active messages: short and medium requests and replies.
 *
 *  - Storm: every rank sends N medium requests (pseudo-random payloads, random sizes
 *    0 .. fh_am_max_medium, checksum in the args) to every rank, itself included.
 *    The handler checks the payload checksum, the size and that fh_am_source is the
 *    real sender, counts per source and replies (short) with its count. The sender
 *    polls until every reply arrived and checks each request was answered exactly
 *    once; per-source counts and job totals (MPI_Allreduce) are exact on both sides.
 *  - Short requests with 0 .. fh_am_max_args() arguments, every value checked, each
 *    answered by a reply carrying the maximum number of arguments, also checked.
 *  - Medium echo: the reply (medium) carries the request's payload back.
 * Handlers record problems in globals (they must not abort inside the library); the
 * main program checks them. */
#include "common.h"

enum { H_MED = 130, H_MED_REP = 131, H_ARGS = 140, H_ARGS_REP = 141, H_ECHO = 150, H_ECHO_REP = 151 };
#define MAGIC 0xf1e2d3c4b5a69788ULL

static fh_ctx_t *ctx;
static int me, np, N;
static size_t max_medium, max_args;
static int user_tag; /* its address is the `user` pointer of every handler */


static uint64_t fnv(const unsigned char *p, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 1099511628211ULL; }
  return h;
}
static uint64_t mix(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  uint64_t s = (a + 1) * 0x9e3779b97f4a7c15ULL ^ (b + 7) * 0xbf58476d1ce4e5b9ULL ^ (c + 3) * 0x94d049bb133111ebULL ^ d;
  if (s == 0) s = 1;
  rng_next(&s);
  return rng_next(&s);
}

/* ---- storm ---- */
static long *med_from;       /* [src] medium requests handled from src */
static long *rep_from;       /* [dst] replies received from dst */
static long *rep_countsum;   /* [dst] sum of the counts dst replied with */
static unsigned char *seen;  /* [dst * N + seq] replies per request */

static void h_med(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  int src = fh_am_source(tok);
  HCHECK(user == &user_tag, "medium handler: user pointer %p, expected %p", user, (void *)&user_tag);
  HCHECK(nargs == 5, "medium handler: nargs %zu", nargs);
  if (nargs != 5) return;
  HCHECK(args[4] == MAGIC, "medium handler: bad magic");
  HCHECK(src >= 0 && src < np && (uint64_t)src == args[0], "medium handler: fh_am_source %d but sender says %llu",
         src, (unsigned long long)args[0]);
  if (src < 0 || src >= np) return;
  HCHECK(nbytes == args[2], "medium from %d seq %llu: nbytes %zu, sent %llu", src, (unsigned long long)args[1], nbytes,
         (unsigned long long)args[2]);
  HCHECK(nbytes == 0 || buf != NULL, "medium handler: NULL buf with %zu bytes", nbytes);
  HCHECK(nbytes <= max_medium, "medium handler: %zu bytes > max", nbytes);
  if (nbytes == args[2] && buf)
    HCHECK(fnv(buf, nbytes) == args[3], "medium from %d seq %llu (%zu B): checksum mismatch", src,
           (unsigned long long)args[1], nbytes);
  med_from[src]++;
  uint64_t rep[3] = {(uint64_t)me, (uint64_t)med_from[src], args[1]};
  int rc = fh_am_reply_short(tok, H_MED_REP, rep, 3);
  HCHECK(rc == FH_OK, "fh_am_reply_short in handler: %d", rc);
}

static void h_med_rep(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  int src = fh_am_source(tok);
  HCHECK(user == &user_tag, "reply handler: bad user pointer");
  HCHECK(buf == NULL && nbytes == 0, "short reply with a payload (%p, %zu)", buf, nbytes);
  HCHECK(nargs == 3, "reply handler: nargs %zu", nargs);
  if (nargs != 3 || src < 0 || src >= np) { HCHECK(0, "reply from bad source %d", src); return; }
  HCHECK((uint64_t)src == args[0], "reply: fh_am_source %d but replier says %llu", src, (unsigned long long)args[0]);
  HCHECK(args[2] < (uint64_t)N, "reply: seq %llu out of range", (unsigned long long)args[2]);
  if (args[2] < (uint64_t)N) seen[(size_t)src * N + args[2]]++;
  HCHECK(args[1] >= 1 && args[1] <= (uint64_t)N, "reply: count %llu out of range", (unsigned long long)args[1]);
  rep_from[src]++;
  rep_countsum[src] += (long)args[1];
}

static size_t payload(int src, int dst, int seq, unsigned char *p) {
  uint64_t s = mix((uint64_t)src, (uint64_t)dst, (uint64_t)seq, 42);
  size_t n;
  if (seq == 0) n = 0;
  else if (seq == 1) n = max_medium;
  else if (rng_next(&s) % 8 == 0) n = rng_next(&s) % (max_medium + 1);
  else n = rng_next(&s) % 2049;
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(rng_next(&s) >> 56);
  return n;
}

static long total(long *a) {
  long t = 0;
  for (int i = 0; i < np; i++) t += a[i];
  return t;
}

/* Poll until cond() holds; fail after `secs` seconds instead of hanging. */
#define POLL_UNTIL(cond, secs, ...)                                               \
  do {                                                                            \
    double t0_ = MPI_Wtime();                                                     \
    while (!(cond)) {                                                             \
      CHECK_OK(fh_poll(ctx));                                                     \
      if (MPI_Wtime() - t0_ > (secs)) FAILF(__VA_ARGS__);                         \
    }                                                                             \
  } while (0)

/* An MPI barrier that keeps serving AMs. */
/* Barrier that keeps serving active messages (fh_barrier). */
static void poll_barrier(void) { CHECK_OK(fh_barrier(ctx)); }

static void storm(void) {
  unsigned char *p = malloc(max_medium + 1);
  double t0 = MPI_Wtime();
  for (int seq = 0; seq < N; seq++) {
    for (int k = 0; k < np; k++) {
      int d = (me + seq + k) % np;
      size_t n = payload(me, d, seq, p);
      uint64_t args[5] = {(uint64_t)me, (uint64_t)seq, n, fnv(p, n), MAGIC};
      CHECK_OK(fh_am_request_medium(ctx, d, H_MED, p, n, args, 5));
      memset(p, 0x5a, n); /* buf may be reused as soon as the call returns */
    }
  }
  POLL_UNTIL(total(rep_from) == (long)N * np, 120, "storm: %ld of %ld replies arrived", total(rep_from), (long)N * np);
  poll_barrier();
  double dt = MPI_Wtime() - t0;
  CHECK_HANDLERS();
  /* Exact counts on both sides. */
  long want_sum = (long)N * (N + 1) / 2;
  for (int r = 0; r < np; r++) {
    CHECK(med_from[r] == N, "handled %ld medium requests from rank %d, expected %d", med_from[r], r, N);
    CHECK(rep_from[r] == N, "got %ld replies from rank %d, expected %d", rep_from[r], r, N);
    CHECK(rep_countsum[r] == want_sum, "counts replied by rank %d sum to %ld, expected %ld (1..N once each)", r,
          rep_countsum[r], want_sum);
    for (int s = 0; s < N; s++)
      CHECK(seen[(size_t)r * N + s] == 1, "request %d to rank %d answered %d times", s, r, seen[(size_t)r * N + s]);
  }
  long mine[2] = {total(med_from), total(rep_from)}, all[2];
  MPI_Allreduce(mine, all, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  CHECK(all[0] == (long)N * np * np, "job handled %ld requests, expected %ld", all[0], (long)N * np * np);
  CHECK(all[1] == (long)N * np * np, "job received %ld replies, expected %ld", all[1], (long)N * np * np);
  if (me == 0) printf("am storm: %d medium requests per pair, %ld in total, %.2f s\n", N, all[0], dt);
  free(p);
}

/* ---- every argument count ---- */
static long args_from_total, args_rep_total, args_zero;

static void h_args(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  int src = fh_am_source(tok);
  HCHECK(user == &user_tag && buf == NULL && nbytes == 0, "args handler: bad user/buf");
  HCHECK(nargs <= max_args, "args handler: nargs %zu", nargs);
  HCHECK(src >= 0 && src < np, "args handler: bad source %d", src);
  uint64_t k = UINT32_MAX;
  if (nargs == 0) {
    args_zero++;
  } else {
    HCHECK(args != NULL, "args handler: NULL args with nargs %zu", nargs);
    HCHECK(args[0] >> 32 == (uint64_t)src, "args handler: args[0] names sender %llu, fh_am_source %d",
           (unsigned long long)(args[0] >> 32), src);
    k = args[0] & 0xffffffffu;
    for (size_t i = 1; i < nargs; i++)
      HCHECK(args[i] == mix((uint64_t)src, k, i, nargs), "args from %d msg %llu: arg %zu/%zu is %#llx", src,
             (unsigned long long)k, i, nargs, (unsigned long long)args[i]);
  }
  args_from_total++;
  uint64_t rep[16];
  for (size_t i = 0; i < max_args; i++) rep[i] = mix((uint64_t)me, k, i, 99);
  int rc = fh_am_reply_short(tok, H_ARGS_REP, rep, max_args);
  HCHECK(rc == FH_OK, "reply with max args: %d", rc);
}

static void h_args_rep(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  int src = fh_am_source(tok);
  (void)buf; (void)nbytes; (void)user;
  HCHECK(nargs == max_args, "args reply: nargs %zu", nargs);
  if (nargs != max_args) return;
  /* args[0] was built from k; recover k by trying the values we could have sent */
  int ok = 0;
  for (uint64_t k = 0; k < 64 && !ok; k++) ok = args[0] == mix((uint64_t)src, k, 0, 99);
  if (!ok) ok = args[0] == mix((uint64_t)src, UINT32_MAX, 0, 99);
  HCHECK(ok, "args reply from %d: arg 0 does not match", src);
  for (size_t i = 1; i < nargs; i++) {
    int good = 0;
    for (uint64_t k = 0; k < 64 && !good; k++) good = args[0] == mix((uint64_t)src, k, 0, 99) && args[i] == mix((uint64_t)src, k, i, 99);
    if (!good) good = args[i] == mix((uint64_t)src, UINT32_MAX, i, 99);
    HCHECK(good, "args reply from %d: arg %zu wrong", src, i);
  }
  args_rep_total++;
}

static void args_test(void) {
  const int M = 40; /* per peer: argument counts cycle through 0 .. max_args */
  for (int d = 0; d < np; d++) {
    for (int k = 0; k < M; k++) {
      size_t nargs = k < 17 ? (size_t)k % (max_args + 1) : max_args;
      uint64_t a[16];
      if (nargs > 0) a[0] = ((uint64_t)me << 32) | (uint64_t)k;
      for (size_t i = 1; i < nargs; i++) a[i] = mix((uint64_t)me, (uint64_t)k, i, nargs);
      CHECK_OK(fh_am_request_short(ctx, d, H_ARGS, nargs ? a : NULL, nargs));
    }
  }
  POLL_UNTIL(args_rep_total == (long)M * np, 60, "args: %ld of %d replies", args_rep_total, M * np);
  poll_barrier();
  CHECK_HANDLERS();
  CHECK(args_from_total == (long)M * np, "handled %ld short requests, expected %d", args_from_total, M * np);
  CHECK(args_zero == np, "handled %ld requests without arguments, expected %d", args_zero, np);
}

/* ---- medium echo (medium replies) ---- */
static long echo_rep_total, echo_req_total;

static void h_echo(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  (void)user;
  HCHECK(nargs == 2 && fnv(buf, nbytes) == args[0], "echo request: checksum mismatch");
  echo_req_total++;
  int rc = fh_am_reply_medium(tok, H_ECHO_REP, buf, nbytes, args, nargs);
  HCHECK(rc == FH_OK, "fh_am_reply_medium: %d", rc);
}
static void h_echo_rep(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  (void)user;
  HCHECK(nargs == 2, "echo reply nargs %zu", nargs);
  if (nargs != 2) return;
  HCHECK(args[1] == (uint64_t)fh_am_source(tok), "echo reply from the wrong rank");
  HCHECK(nbytes <= max_medium && fnv(buf, nbytes) == args[0], "echo reply: payload (%zu B) differs", nbytes);
  echo_rep_total++;
}

static void echo_test(void) {
  const int M = 30;
  unsigned char *p = malloc(max_medium);
  for (int k = 0; k < M; k++) {
    for (int d = 0; d < np; d++) {
      size_t n = payload(me, d, k + 2, p);
      if (k == 0) { n = max_medium; memset(p, 0x77, n); }
      uint64_t a[2] = {fnv(p, n), (uint64_t)d};
      CHECK_OK(fh_am_request_medium(ctx, d, H_ECHO, p, n, a, 2));
    }
  }
  POLL_UNTIL(echo_rep_total == (long)M * np, 60, "echo: %ld of %d replies", echo_rep_total, M * np);
  poll_barrier();
  CHECK_HANDLERS();
  CHECK(echo_req_total == (long)M * np, "echo: handled %ld, expected %d", echo_req_total, M * np);
  free(p);
}

/* ---- the ends of the user index range ---- */
static long edge_req, edge_rep;
static void h_edge(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  (void)buf; (void)nbytes;
  HCHECK(user == &edge_req && nargs == 1 && args[0] == (uint64_t)fh_am_source(tok), "edge request");
  edge_req++;
  int rc = fh_am_reply_short(tok, FH_AM_INDEX_USER_MAX, args, 1);
  HCHECK(rc == FH_OK, "edge reply: %d", rc);
}
static void h_edge_rep(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  (void)buf; (void)nbytes; (void)tok;
  HCHECK(user == &edge_rep && nargs == 1 && args[0] == (uint64_t)me, "edge reply");
  edge_rep++;
}
static void edge_test(void) {
  for (int d = 0; d < np; d++) {
    uint64_t a = (uint64_t)me;
    CHECK_OK(fh_am_request_short(ctx, d, FH_AM_INDEX_USER_MIN, &a, 1));
  }
  POLL_UNTIL(edge_rep == np, 60, "edge: %ld of %d replies", edge_rep, np);
  poll_barrier();
  CHECK_HANDLERS();
  CHECK(edge_req == np, "edge: handled %ld, expected %d", edge_req, np);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  ctx = fh_test_init(&me, &np);
  max_medium = fh_am_max_medium(ctx);
  max_args = fh_am_max_args();
  CHECK(max_medium >= 512, "fh_am_max_medium = %zu", max_medium);
  CHECK(max_args == 16, "fh_am_max_args = %zu (the header says 16)", max_args);
  N = np <= 2 ? 2000 : 1000; /* per pair: 8000 .. 64000 requests in all */

  med_from = calloc((size_t)np, sizeof(long));
  rep_from = calloc((size_t)np, sizeof(long));
  rep_countsum = calloc((size_t)np, sizeof(long));
  seen = calloc((size_t)np * (size_t)N, 1);

  CHECK_OK(fh_am_register(ctx, H_MED, h_med, &user_tag));
  CHECK_OK(fh_am_register(ctx, H_MED_REP, h_med_rep, &user_tag));
  CHECK_OK(fh_am_register(ctx, H_ARGS, h_args, &user_tag));
  CHECK_OK(fh_am_register(ctx, H_ARGS_REP, h_args_rep, &user_tag));
  CHECK_OK(fh_am_register(ctx, H_ECHO, h_echo, &user_tag));
  CHECK_OK(fh_am_register(ctx, H_ECHO_REP, h_echo_rep, &user_tag));
  /* Also the ends of the user range. */
  CHECK_OK(fh_am_register(ctx, FH_AM_INDEX_USER_MIN, h_edge, &edge_req));
  CHECK_OK(fh_am_register(ctx, FH_AM_INDEX_USER_MAX, h_edge_rep, &edge_rep));
  MPI_Barrier(MPI_COMM_WORLD); /* every handler registered before anyone sends */

  storm();
  args_test();
  echo_test();
  edge_test();

  CHECK_OK(fh_finalize(ctx));
  CHECK_HANDLERS();
  TEST_PASS("am");
  MPI_Finalize();
  return 0;
}
