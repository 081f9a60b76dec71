/* Configuration: environment, fh_config_t fields, their precedence, what
 * fh_config_print reports, and the settings' effects.
 *  1. A malformed FH_HEAP_SIZE: fh_config_init reports it (fh_last_error), fh_init
 *     fails with FH_ERR_INVALID_ARG naming the variable.
 *  2. FH_AM_CREDITS=2 in the environment: fh_config_print shows 2 (environment);
 *     an AM storm still completes exactly (flow control, no loss); the third request
 *     to a rank that does not poll blocks until it polls (back-pressure at 2).
 *  3. Fields set by the program (am_credits 3, am_max_medium 4K, heap_size 1M) show
 *     as "fh_config_t" and take effect (fh_am_max_medium, heap exhaustion, medium
 *     size limit, back-pressure at 3).
 *  4. The environment wins over a field; fh_config_print(NULL) shows defaults +
 *     environment. */
#include "common.h"
#include <unistd.h>

enum { H_REQ = 190, H_REP = 191, H_CNT = 192 };
static fh_ctx_t *ctx;
static int me, np;
static long reqs, reps, cnts, bad;

static uint64_t fnv(const unsigned char *p, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 1099511628211ULL; }
  return h;
}
static void h_req(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  (void)user;
  if (nargs != 2 || fnv(buf, nbytes) != args[0] || args[1] != (uint64_t)fh_am_source(tok)) bad++;
  reqs++;
  fh_am_reply_short(tok, H_REP, args, nargs);
}
static void h_rep(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  (void)tok; (void)buf; (void)nbytes; (void)args; (void)nargs; (void)user;
  reps++;
}
static void h_cnt(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  (void)tok; (void)buf; (void)nbytes; (void)args; (void)nargs; (void)user;
  cnts++;
}

/* Barrier that keeps serving active messages (fh_barrier). */
static void poll_barrier(void) { CHECK_OK(fh_barrier(ctx)); }

/* The value and source fh_config_print shows for setting `name`. */
static void setting(const char *out, const char *name, char *value, char *source) {
  char key[64];
  snprintf(key, sizeof key, "  %s ", name);
  const char *l = strstr(out, key);
  CHECK(l != NULL, "fh_config_print does not list %s:\n%s", name, out);
  char nm[64];
  CHECK(sscanf(l, " %63s = %63s (%63[^;)]", nm, value, source) == 3, "cannot parse the %s line", name);
}

static void expect_setting(const char *out, const char *name, const char *value, const char *source) {
  char v[64], s[64];
  setting(out, name, v, s);
  CHECK(strcmp(v, value) == 0 && strcmp(s, source) == 0, "%s is shown as %s (%s), expected %s (%s)", name, v, s, value,
        source);
}

static void storm(int n) {
  unsigned char *p = malloc(fh_am_max_medium(ctx));
  uint64_t s = 77 + (uint64_t)me;
  long r0 = reps;
  for (int i = 0; i < n; i++) {
    for (int d = 0; d < np; d++) {
      size_t len = rng_next(&s) % (fh_am_max_medium(ctx) + 1);
      for (size_t k = 0; k < len; k++) p[k] = (unsigned char)rng_next(&s);
      uint64_t a[2] = {fnv(p, len), (uint64_t)me};
      CHECK_OK(fh_am_request_medium(ctx, (me + d) % np, H_REQ, p, len, a, 2));
    }
  }
  double t0 = MPI_Wtime();
  while (reps - r0 < (long)n * np) {
    CHECK_OK(fh_poll(ctx));
    if (MPI_Wtime() - t0 > 60) FAILF("storm: %ld of %d replies", reps - r0, n * np);
  }
  poll_barrier();
  CHECK(bad == 0, "%ld requests arrived damaged", bad);
  long tot[2], mine[2] = {reqs, reps};
  MPI_Allreduce(mine, tot, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  reqs = reps = 0;
  CHECK(tot[0] == (long)n * np * np && tot[1] == tot[0], "storm: job handled %ld requests, %ld replies, expected %ld",
        tot[0], tot[1], (long)n * np * np);
  free(p);
}

/* With `credits` credits, rank 0 can have `credits` requests unhandled at rank 1
 * without rank 1 polling; the next one blocks until rank 1 polls. */
static void back_pressure(int credits) {
  const double hold = 0.5;
  poll_barrier();
  long c0 = cnts;
  if (me == 0) {
    /* Wait until rank 1 has left the polling barrier: from then on it does not poll. */
    int ready = 0;
    MPI_Recv(&ready, 1, MPI_INT, 1, 78, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (int i = 0; i < credits; i++) CHECK_OK(fh_am_request_short(ctx, 1, H_CNT, NULL, 0));
    double t0 = MPI_Wtime();
    int go = 1;
    MPI_Send(&go, 1, MPI_INT, 1, 77, MPI_COMM_WORLD);
    CHECK_OK(fh_am_request_short(ctx, 1, H_CNT, NULL, 0)); /* must wait for rank 1 */
    double dt = MPI_Wtime() - t0;
    CHECK(dt >= hold * 0.9, "with %d credits, request %d returned after %.3f s although rank 1 did not poll for %.1f s",
          credits, credits + 1, dt, hold);
  } else {
    /* Do not poll: the first `credits` requests must not need us. */
    int ready = 1;
    MPI_Send(&ready, 1, MPI_INT, 0, 78, MPI_COMM_WORLD);
    int go = 0, done = 0;
    MPI_Request r;
    MPI_Irecv(&go, 1, MPI_INT, 0, 77, MPI_COMM_WORLD, &r);
    double t0 = MPI_Wtime();
    while (!done) {
      MPI_Test(&r, &done, MPI_STATUS_IGNORE);
      if (!done && MPI_Wtime() - t0 > 30) FAILF("rank 0 blocked with fewer than %d requests outstanding", credits);
    }
    t0 = MPI_Wtime();
    while (MPI_Wtime() - t0 < hold) usleep(1000);
    t0 = MPI_Wtime();
    while (cnts - c0 < credits + 1) {
      CHECK_OK(fh_poll(ctx));
      if (MPI_Wtime() - t0 > 30) FAILF("%ld of %d requests arrived", cnts - c0, credits + 1);
    }
  }
  poll_barrier();
}

static void start(const fh_config_t *cfg) {
  CHECK_OK(fh_init(MPI_COMM_WORLD, cfg, &ctx));
  CHECK_OK(fh_am_register(ctx, H_REQ, h_req, NULL));
  CHECK_OK(fh_am_register(ctx, H_REP, h_rep, NULL));
  CHECK_OK(fh_am_register(ctx, H_CNT, h_cnt, NULL));
  MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  fh_test_rank = me;
  CHECK(np == 2, "run at 2 ranks");
  unsetenv("FH_AM_CREDITS");
  unsetenv("FH_HEAP_SIZE");
  unsetenv("FH_AM_MAX_MEDIUM");
  char msg[512];
  int rc;

  /* 1. Malformed environment value. */
  setenv("FH_HEAP_SIZE", "lots", 1);
  fh_config_t cfg;
  fh_config_init(&cfg);
  fh_last_error(msg, sizeof msg);
  CHECK(strstr(msg, "FH_HEAP_SIZE") != NULL, "fh_config_init did not report FH_HEAP_SIZE: \"%s\"", msg);
  CHECK(cfg.heap_size == 32u << 20, "a malformed FH_HEAP_SIZE must leave the default (32M), got %zu", cfg.heap_size);
  fh_ctx_t *bad_ctx = NULL;
  CHECK_RC(fh_init(MPI_COMM_WORLD, NULL, &bad_ctx), FH_ERR_INVALID_ARG);
  fh_last_error(msg, sizeof msg);
  CHECK(strstr(msg, "FH_HEAP_SIZE") != NULL && strstr(msg, "lots") != NULL, "fh_init error \"%s\" does not name FH_HEAP_SIZE=lots", msg);
  CHECK_RC(fh_init(MPI_COMM_WORLD, &cfg, &bad_ctx), FH_ERR_INVALID_ARG);
  CHECK(bad_ctx == NULL, "ctx_out written by a failed fh_init");
  char *out = fh_test_config_text(NULL, &rc);
  CHECK(rc == FH_ERR_INVALID_ARG, "fh_config_print(NULL) with a malformed environment returned %d", rc);
  free(out);
  unsetenv("FH_HEAP_SIZE");

  /* 2. FH_AM_CREDITS=2 from the environment. */
  setenv("FH_AM_CREDITS", "2", 1);
  start(NULL);
  out = fh_test_config_text(ctx, &rc);
  CHECK_OK(rc);
  expect_setting(out, "FH_AM_CREDITS", "2", "environment");
  expect_setting(out, "FH_HEAP_SIZE", "32M", "default");
  expect_setting(out, "FH_PROGRESS", "poll", "default");
  CHECK(strstr(out, "rank 0/2") || strstr(out, "rank 1/2"), "fh_config_print does not show the rank:\n%s", out);
  free(out);
  storm(3000);
  back_pressure(2);
  storm(500);
  CHECK_OK(fh_finalize(ctx));
  unsetenv("FH_AM_CREDITS");

  /* 3. Fields set by the program. */
  fh_config_init(&cfg);
  cfg.am_credits = 3;
  cfg.am_max_medium = 4096;
  cfg.heap_size = 1 << 20;
  start(&cfg);
  out = fh_test_config_text(ctx, &rc);
  CHECK_OK(rc);
  expect_setting(out, "FH_AM_CREDITS", "3", "fh_config_t");
  expect_setting(out, "FH_AM_MAX_MEDIUM", "4K", "fh_config_t");
  expect_setting(out, "FH_HEAP_SIZE", "1M", "fh_config_t");
  expect_setting(out, "FH_AM_RECV_BUFFERS", "32", "default");
  free(out);
  CHECK(fh_am_max_medium(ctx) == 4096, "fh_am_max_medium = %zu, cfg said 4096", fh_am_max_medium(ctx));
  unsigned char big[4097] = {0};
  CHECK_RC(fh_am_request_medium(ctx, 1 - me, H_REQ, big, 4097, NULL, 0), FH_ERR_INVALID_ARG);
  void *p = fh_malloc(ctx, 256 << 10);
  CHECK(p != NULL, "a 256 KiB fh_malloc from a 1 MiB heap failed");
  /* 2 MiB cannot come from the 1 MiB heap: the heap grows by a segment elsewhere. */
  unsigned char *q = fh_malloc(ctx, 2 << 20);
  CHECK(q != NULL, "a 2 MiB fh_malloc did not grow the 1 MiB heap");
  CHECK(q + (2 << 20) <= (unsigned char *)p || q >= (unsigned char *)p + (1 << 20),
        "a 2 MiB block overlaps the 1 MiB heap's region: FH_HEAP_SIZE not applied");
  q[0] = q[(2 << 20) - 1] = 1;
  fh_free(ctx, q);
  fh_free(ctx, p);
  storm(2000);
  back_pressure(3);
  CHECK_OK(fh_finalize(ctx));

  /* 4. The environment wins over a field. */
  setenv("FH_AM_CREDITS", "5", 1);
  fh_config_init(&cfg);
  CHECK(cfg.am_credits == 5, "fh_config_init did not read FH_AM_CREDITS (%u)", cfg.am_credits);
  cfg.am_credits = 3;
  start(&cfg);
  out = fh_test_config_text(ctx, &rc);
  CHECK_OK(rc);
  expect_setting(out, "FH_AM_CREDITS", "5", "environment");
  free(out);
  back_pressure(5);
  CHECK_OK(fh_finalize(ctx));
  setenv("FH_AM_CREDITS", "7", 1);
  out = fh_test_config_text(NULL, &rc);
  CHECK_OK(rc);
  expect_setting(out, "FH_AM_CREDITS", "7", "environment");
  expect_setting(out, "FH_AM_MAX_MEDIUM", "32K", "default");
  free(out);
  unsetenv("FH_AM_CREDITS");

  TEST_PASS("config");
  MPI_Finalize();
  return 0;
}
