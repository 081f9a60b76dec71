/* Bad input to every function of firehose.h gives the documented error, and the job
 * keeps working afterwards (a successful put, get and AM round trip at the end).
 *
 * Covered: NULL / garbage ctx; bad ranks; NULL buffers with non-zero sizes; zero
 * sizes (no-ops); SIZE_MAX sizes; put/get/long AM to memory the target never
 * registered (FH_ERR_ACCESS, target still alive); fh_mem_register of NULL, 0 bytes,
 * unmapped memory, overlapping ranges, the library heap; fh_mem_unregister of
 * unregistered ranges; fh_am_register with bad indices / NULL handler; AM requests to
 * library indices, too many args, too large payloads; an AM to an index the target
 * never registered (refused, reported by fh_poll); bad `which` for the nbi calls;
 * never-issued and retired handles; NULL handle arrays; fh_strerror of every code;
 * fh_last_error; fh_config_init(NULL); init with NULL ctx_out / bad cfg;
 * fh_version_check; token misuse outside handlers; forbidden calls inside handlers
 * (blocking calls, replying twice, replying from a reply handler); every call on a
 * finalized context returns FH_ERR_STATE. */
#include "common.h"
#include <fcntl.h>
#include <limits.h>
#include <sys/mman.h>
#include <unistd.h>

enum { H_OK = 200, H_OK_REP = 201, H_INSIDE = 202, H_INSIDE_REP = 203, H_UNREGISTERED = 220 };

static fh_ctx_t *ctx;
static int me, np, right;
static void *heaps[256], *users[256], *unregs[256], *holes[256];
static unsigned char *heap, *user, *unreg;
#define USER_LEN ((size_t)65536)

/* Barrier that keeps serving active messages (fh_barrier). */
static void poll_barrier(void) { CHECK_OK(fh_barrier(ctx)); }

/* Run fh_config_print without cluttering the test output. */
static int config_print_quiet(const fh_ctx_t *c) {
  fflush(stdout);
  int saved = dup(1), fd = open("/dev/null", O_WRONLY);
  dup2(fd, 1);
  close(fd);
  int rc = fh_config_print(c);
  fflush(stdout);
  dup2(saved, 1);
  close(saved);
  return rc;
}

static size_t last_error(char *buf, size_t len) { return fh_last_error(buf, len); }

/* ---------------- handlers ---------------- */
static long ok_replies;
static void h_ok(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user_) {
  (void)buf; (void)nbytes; (void)user_;
  fh_am_reply_short(tok, H_OK_REP, args, nargs);
}
static void h_ok_rep(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user_) {
  (void)tok; (void)buf; (void)nbytes; (void)user_;
  if (nargs == 1 && args[0] == 0xabc) ok_replies++;
}

/* What the handlers saw (checked by main afterwards). */
static struct {
  int ran, rep_ran;
  int put, get, put_nb, put_nbi, poll, req_short, req_medium, req_long, wait_nbi, unreg, invalidate;
  int rank, size, source, maxmed;
  int reply_bad_index, reply_too_many_args, reply_medium_too_big, reply_long_null_dst;
  int reply_first, reply_second, reply_second_medium;
  int rep_reply_short, rep_reply_medium, rep_reply_long, rep_put, rep_poll;
  fh_handle_t h;
} in;

static void h_inside(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user_) {
  (void)buf; (void)nbytes; (void)args; (void)nargs; (void)user_;
  static unsigned char src[64];
  int peer = fh_am_source(tok);
  in.source = peer;
  in.rank = fh_rank(ctx);
  in.size = fh_size(ctx);
  in.maxmed = fh_am_max_medium(ctx) > 0;
  in.put = fh_put(ctx, peer, heaps[peer], src, 8);
  in.get = fh_get(ctx, src, peer, heaps[peer], 8);
  in.h = 777;
  in.put_nb = fh_put_nb(ctx, peer, heaps[peer], src, 8, &in.h);
  in.put_nbi = fh_put_nbi(ctx, peer, heaps[peer], src, 8);
  in.poll = fh_poll(ctx);
  in.req_short = fh_am_request_short(ctx, peer, H_OK, NULL, 0);
  in.req_medium = fh_am_request_medium(ctx, peer, H_OK, src, 8, NULL, 0);
  in.req_long = fh_am_request_long(ctx, peer, H_OK, src, 8, heaps[peer], NULL, 0);
  in.wait_nbi = fh_wait_nbi(ctx, FH_NBI_ALL);
  in.unreg = fh_mem_unregister(ctx, user, USER_LEN);
  in.invalidate = fh_mem_invalidate(ctx, user, USER_LEN);
  /* Bad replies are refused without using up the one reply. */
  uint64_t many[17] = {0};
  in.reply_bad_index = fh_am_reply_short(tok, 5, NULL, 0);
  in.reply_too_many_args = fh_am_reply_short(tok, H_INSIDE_REP, many, 17);
  static unsigned char big[1 << 16];
  in.reply_medium_too_big = fh_am_reply_medium(tok, H_INSIDE_REP, big, fh_am_max_medium(ctx) + 1, NULL, 0);
  in.reply_long_null_dst = fh_am_reply_long(tok, H_INSIDE_REP, big, 8, NULL, NULL, 0);
  uint64_t a = 0x5eed;
  in.reply_first = fh_am_reply_short(tok, H_INSIDE_REP, &a, 1);
  in.reply_second = fh_am_reply_short(tok, H_INSIDE_REP, &a, 1);
  in.reply_second_medium = fh_am_reply_medium(tok, H_INSIDE_REP, src, 8, &a, 1);
  in.ran++;
}

static void h_inside_rep(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user_) {
  (void)buf; (void)nbytes; (void)args; (void)nargs; (void)user_;
  static unsigned char src[8];
  in.rep_reply_short = fh_am_reply_short(tok, H_OK_REP, NULL, 0);
  in.rep_reply_medium = fh_am_reply_medium(tok, H_OK_REP, src, 8, NULL, 0);
  in.rep_reply_long = fh_am_reply_long(tok, H_OK_REP, src, 8, heaps[fh_am_source(tok)], NULL, 0);
  in.rep_put = fh_put(ctx, fh_am_source(tok), heaps[fh_am_source(tok)], src, 8);
  in.rep_poll = fh_poll(ctx);
  in.rep_ran++;
}

static void h_never(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user_) {
  (void)tok; (void)buf; (void)nbytes; (void)args; (void)nargs; (void)user_;
}

/* ---------------- sections ---------------- */

static void strerror_and_last_error(void) {
  const struct { int code; const char *name; } codes[] = {
      {FH_ERR_INVALID_ARG, "FH_ERR_INVALID_ARG"}, {FH_ERR_BAD_RANK, "FH_ERR_BAD_RANK"},
      {FH_ERR_NO_MEMORY, "FH_ERR_NO_MEMORY"},     {FH_ERR_NO_RESOURCE, "FH_ERR_NO_RESOURCE"},
      {FH_ERR_ACCESS, "FH_ERR_ACCESS"},           {FH_ERR_NOT_PINNED, "FH_ERR_NOT_PINNED"},
      {FH_ERR_BARRIER_MISMATCH, "FH_ERR_BARRIER_MISMATCH"}, {FH_ERR_STATE, "FH_ERR_STATE"},
      {FH_ERR_MPI, "FH_ERR_MPI"},                 {FH_ERR_TRANSPORT, "FH_ERR_TRANSPORT"},
      {FH_ERR_UNSUPPORTED, "FH_ERR_UNSUPPORTED"}, {FH_ERR_VERSION, "FH_ERR_VERSION"},
      {FH_ERR_INTERNAL, "FH_ERR_INTERNAL"},
  };
  for (size_t i = 0; i < sizeof codes / sizeof *codes; i++) {
    const char *s = fh_strerror(codes[i].code);
    CHECK(s != NULL && strstr(s, codes[i].name) != NULL, "fh_strerror(%d) = \"%s\" does not name %s", codes[i].code,
          s ? s : "(null)", codes[i].name);
  }
  for (int c = FH_ERR_INTERNAL; c <= FH_NOT_READY; c++) {
    const char *s = fh_strerror(c);
    CHECK(s != NULL && s[0] != 0, "fh_strerror(%d) is empty", c);
    for (int d = c + 1; d <= FH_NOT_READY; d++) CHECK(strcmp(s, fh_strerror(d)) != 0, "codes %d and %d described alike", c, d);
  }
  const int unknown[] = {2, 7, -14, -100, 42, INT_MIN, INT_MAX};
  for (size_t i = 0; i < sizeof unknown / sizeof *unknown; i++) {
    const char *s = fh_strerror(unknown[i]);
    CHECK(s != NULL && s[0] != 0, "fh_strerror(unknown %d) is NULL or empty", unknown[i]);
  }

  /* fh_last_error after an error: non-empty, (NULL, 0) gives the length, truncation. */
  CHECK_RC(fh_put(NULL, 0, NULL, NULL, 1), FH_ERR_INVALID_ARG);
  size_t n = last_error(NULL, 0);
  CHECK(n > 0, "fh_last_error(NULL, 0) = 0 after an error");
  char full[1024], small[5];
  memset(full, 'x', sizeof full);
  CHECK(last_error(full, sizeof full) == n, "fh_last_error length changed");
  CHECK(strlen(full) == n && n < sizeof full, "message length %zu, returned %zu", strlen(full), n);
  CHECK(strstr(full, "ctx") != NULL, "message \"%s\" does not name the bad argument", full);
  memset(small, 'x', sizeof small);
  CHECK(last_error(small, sizeof small) == n, "truncated fh_last_error must still return the full length");
  CHECK(small[4] == 0 && strncmp(small, full, 4) == 0, "truncation is not NUL-terminated or differs");
  char one[1] = {'x'};
  CHECK(last_error(one, 1) == n && one[0] == 0, "fh_last_error(buf, 1) must write just the NUL");

  /* fh_config_init(NULL) must not crash; it leaves a message. */
  fh_config_init(NULL);
  last_error(full, sizeof full);
  CHECK(full[0] != 0, "fh_config_init(NULL) left no message");

  /* Versions. */
  unsigned v = fh_version();
  CHECK(v == (((unsigned)FH_VERSION_MAJOR << 16) | ((unsigned)FH_VERSION_MINOR << 8) | FH_VERSION_PATCH),
        "fh_version() = %#x", v);
  CHECK_OK(fh_version_check(FH_VERSION_MAJOR, FH_VERSION_MINOR, sizeof(fh_config_t)));
  CHECK_RC(fh_version_check(FH_VERSION_MAJOR + 1, FH_VERSION_MINOR, sizeof(fh_config_t)), FH_ERR_VERSION);
  last_error(full, sizeof full);
  CHECK(full[0] != 0, "FH_ERR_VERSION without a message");
  CHECK_RC(fh_version_check(FH_VERSION_MAJOR, FH_VERSION_MINOR + 1, sizeof(fh_config_t)), FH_ERR_VERSION);
  CHECK_RC(fh_version_check(FH_VERSION_MAJOR, FH_VERSION_MINOR, sizeof(fh_config_t) + 64), FH_ERR_VERSION);
  CHECK(fh_am_max_args() == 16, "fh_am_max_args() = %zu", fh_am_max_args());
}

static void init_errors(void) {
  fh_ctx_t *c = (fh_ctx_t *)0x1;
  CHECK_RC(fh_init_comm_f((int)MPI_Comm_c2f(MPI_COMM_WORLD), NULL, NULL), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_init_world(NULL, NULL), FH_ERR_INVALID_ARG);
  fh_config_t cfg;
  fh_config_init(&cfg);
  CHECK(cfg.struct_size == sizeof cfg, "fh_config_init set struct_size %zu", cfg.struct_size);
  cfg.struct_size = 0;
  CHECK_RC(fh_init(MPI_COMM_WORLD, &cfg, &c), FH_ERR_INVALID_ARG);
  cfg.struct_size = sizeof cfg + 128;
  CHECK_RC(fh_init(MPI_COMM_WORLD, &cfg, &c), FH_ERR_VERSION);
  fh_config_init(&cfg);
  cfg.am_credits = 5000; /* 0 means auto; more than 4096 is refused */
  CHECK_RC(fh_init(MPI_COMM_WORLD, &cfg, &c), FH_ERR_INVALID_ARG);
  fh_config_init(&cfg);
  cfg.progress = 7;
  CHECK_RC(fh_init(MPI_COMM_WORLD, &cfg, &c), FH_ERR_INVALID_ARG);
  CHECK(c == (fh_ctx_t *)0x1, "ctx_out written by a failed init");
}

static void null_ctx(void) {
  fh_handle_t h = 777, hs[2] = {0, 0};
  char buf[16] = {0};
  uint64_t a = 1;
  fh_ctx_t *nul = NULL;
  /* A pointer that is not a context at all. */
  static uint64_t fake_mem[16];
  fh_ctx_t *fake = (fh_ctx_t *)fake_mem;
  fh_ctx_t *bad[2] = {nul, fake};
  for (int k = 0; k < 2; k++) {
    fh_ctx_t *c = bad[k];
    CHECK(fh_rank(c) < 0, "fh_rank(bad ctx %d)", k);
    CHECK(fh_size(c) < 0, "fh_size(bad ctx %d)", k);
    CHECK_RC(fh_poll(c), FH_ERR_INVALID_ARG);
    CHECK(fh_malloc(c, 64) == NULL, "fh_malloc(bad ctx)");
    fh_free(c, heap); /* must not crash nor free anything */
    CHECK_RC(fh_mem_register(c, buf, sizeof buf), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_mem_unregister(c, user, USER_LEN), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_mem_invalidate(c, user, USER_LEN), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_put(c, right, heaps[right], buf, 8), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_get(c, buf, right, heaps[right], 8), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_put_nb(c, right, heaps[right], buf, 8, &h), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_get_nb(c, buf, right, heaps[right], 8, &h), FH_ERR_INVALID_ARG);
    CHECK(h == 777, "h_out written by a failed call");
    CHECK_RC(fh_put_nbi(c, right, heaps[right], buf, 8), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_get_nbi(c, buf, right, heaps[right], 8), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_test(c, FH_HANDLE_NULL), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_wait(c, FH_HANDLE_NULL), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_wait_all(c, hs, 2), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_test_all(c, hs, 2), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_wait_some(c, hs, 2), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_wait_nbi(c, FH_NBI_ALL), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_test_nbi(c, FH_NBI_ALL), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_am_register(c, H_OK, h_ok, NULL), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_am_request_short(c, right, H_OK, &a, 1), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_am_request_medium(c, right, H_OK, buf, 8, &a, 1), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_am_request_long(c, right, H_OK, buf, 8, heaps[right], &a, 1), FH_ERR_INVALID_ARG);
    CHECK(fh_am_max_medium(c) == 0, "fh_am_max_medium(bad ctx)");
    CHECK(fh_am_max_long(c) == 0, "fh_am_max_long(bad ctx)");
    CHECK_RC(fh_finalize(c), FH_ERR_INVALID_ARG);
  }
  CHECK_RC(config_print_quiet(fake), FH_ERR_INVALID_ARG);
  /* fh_config_print(NULL) is documented: defaults + environment. */
  CHECK_OK(config_print_quiet(NULL));
  /* The real context is untouched. */
  CHECK(fh_rank(ctx) == me, "fh_rank changed");
}

static void bad_ranks(void) {
  const int ranks[] = {-1, np, np + 1, INT_MAX, INT_MIN};
  char buf[16] = {0};
  uint64_t a = 1;
  for (size_t i = 0; i < sizeof ranks / sizeof *ranks; i++) {
    int r = ranks[i];
    fh_handle_t h = 777;
    CHECK_RC(fh_put(ctx, r, heaps[right], buf, 8), FH_ERR_BAD_RANK);
    CHECK_RC(fh_get(ctx, buf, r, heaps[right], 8), FH_ERR_BAD_RANK);
    CHECK_RC(fh_put_nb(ctx, r, heaps[right], buf, 8, &h), FH_ERR_BAD_RANK);
    CHECK_RC(fh_get_nb(ctx, buf, r, heaps[right], 8, &h), FH_ERR_BAD_RANK);
    CHECK(h == 777, "h_out written by a failed call");
    CHECK_RC(fh_put_nbi(ctx, r, heaps[right], buf, 8), FH_ERR_BAD_RANK);
    CHECK_RC(fh_get_nbi(ctx, buf, r, heaps[right], 8), FH_ERR_BAD_RANK);
    CHECK_RC(fh_am_request_short(ctx, r, H_OK, &a, 1), FH_ERR_BAD_RANK);
    CHECK_RC(fh_am_request_medium(ctx, r, H_OK, buf, 8, &a, 1), FH_ERR_BAD_RANK);
    CHECK_RC(fh_am_request_long(ctx, r, H_OK, buf, 8, heaps[right], &a, 1), FH_ERR_BAD_RANK);
    last_error(buf, sizeof buf);
    CHECK(buf[0] != 0, "no message for a bad rank");
  }
}

static void null_buffers_and_sizes(void) {
  char buf[64] = {0};
  fh_handle_t h = 777;
  uint64_t a[2] = {1, 2};
  /* NULL with a non-zero size. */
  CHECK_RC(fh_put(ctx, right, NULL, buf, 8), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_put(ctx, right, heaps[right], NULL, 8), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_get(ctx, NULL, right, heaps[right], 8), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_get(ctx, buf, right, NULL, 8), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_put_nb(ctx, right, NULL, buf, 8, &h), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_put_nb(ctx, right, heaps[right], NULL, 8, &h), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_get_nb(ctx, NULL, right, heaps[right], 8, &h), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_get_nb(ctx, buf, right, NULL, 8, &h), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_put_nb(ctx, right, heaps[right], buf, 8, NULL), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_get_nb(ctx, buf, right, heaps[right], 8, NULL), FH_ERR_INVALID_ARG);
  CHECK(h == 777, "h_out written by a failed call");
  CHECK_RC(fh_put_nbi(ctx, right, NULL, buf, 8), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_put_nbi(ctx, right, heaps[right], NULL, 8), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_get_nbi(ctx, NULL, right, heaps[right], 8), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_get_nbi(ctx, buf, right, NULL, 8), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_am_request_short(ctx, right, H_OK, NULL, 2), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_am_request_medium(ctx, right, H_OK, NULL, 8, a, 1), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_am_request_medium(ctx, right, H_OK, buf, 8, NULL, 1), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_am_request_long(ctx, right, H_OK, NULL, 8, heaps[right], a, 1), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_am_request_long(ctx, right, H_OK, buf, 8, NULL, a, 1), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_am_request_long(ctx, right, H_OK, buf, 8, heaps[right], NULL, 1), FH_ERR_INVALID_ARG);

  /* A bad local buffer on the kernel-copy path (default settings, malloc memory of
   * a node peer) is named as such; the error used to blame the peer. Other paths
   * (the heap mapped from the peer, MPI) take the local buffer on trust. */
  const char *shm_env = getenv("FH_SHM"), *cma_env = getenv("FH_CMA"), *max_env = getenv("FH_SHM_MAX_RANKS");
  if (np > 1 && !(shm_env && !strcmp(shm_env, "0")) && !(cma_env && !strcmp(cma_env, "0")) && !max_env) {
    static const char ro_buf[64] = "read-only";
    char why[512];
    CHECK_RC(fh_put(ctx, right, unregs[right], (void *)0x1000, 8), FH_ERR_INVALID_ARG);
    fh_last_error(why, sizeof why);
    CHECK(strstr(why, "local source buffer") != NULL, "bad local source: %s", why);
    CHECK_RC(fh_get(ctx, (void *)ro_buf, right, unregs[right], 8), FH_ERR_INVALID_ARG);
    fh_last_error(why, sizeof why);
    CHECK(strstr(why, "local destination buffer") != NULL, "read-only local destination: %s", why);
  }

  /* Zero sizes are no-ops, whatever the pointers (even unregistered ones). */
  unsigned char *mine = heap;
  memset(mine, 0x42, 64);
  CHECK_OK(fh_put(ctx, right, NULL, NULL, 0));
  CHECK_OK(fh_get(ctx, NULL, right, NULL, 0));
  CHECK_OK(fh_put(ctx, right, unregs[right], buf, 0));
  CHECK_OK(fh_get(ctx, buf, right, unregs[right], 0));
  CHECK_OK(fh_put(ctx, right, (void *)0x1000, buf, 0));
  h = 777;
  CHECK_OK(fh_put_nb(ctx, right, NULL, NULL, 0, &h));
  CHECK(h == FH_HANDLE_NULL, "zero-length fh_put_nb handle %#llx", (unsigned long long)h);
  h = 777;
  CHECK_OK(fh_get_nb(ctx, NULL, right, NULL, 0, &h));
  CHECK(h == FH_HANDLE_NULL, "zero-length fh_get_nb handle %#llx", (unsigned long long)h);
  CHECK_OK(fh_put_nbi(ctx, right, NULL, NULL, 0));
  CHECK_OK(fh_get_nbi(ctx, NULL, right, NULL, 0));
  CHECK_OK(fh_am_request_short(ctx, right, H_OK, NULL, 0));
  CHECK_OK(fh_am_request_medium(ctx, right, H_OK, NULL, 0, NULL, 0));

  /* SIZE_MAX. */
  CHECK_RC(fh_put(ctx, right, heaps[right], buf, SIZE_MAX), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_get(ctx, buf, right, heaps[right], SIZE_MAX), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_put_nb(ctx, right, heaps[right], buf, SIZE_MAX, &h), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_get_nb(ctx, buf, right, heaps[right], SIZE_MAX, &h), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_put_nbi(ctx, right, heaps[right], buf, SIZE_MAX), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_get_nbi(ctx, buf, right, heaps[right], SIZE_MAX), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_put(ctx, me, heap, buf, SIZE_MAX), FH_ERR_INVALID_ARG);
  /* Ranges that wrap around the address space. */
  CHECK_RC(fh_put(ctx, right, (void *)(UINTPTR_MAX - 10), buf, 64), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_get(ctx, (void *)(UINTPTR_MAX - 10), right, heaps[right], 64), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_mem_register(ctx, (void *)(UINTPTR_MAX - 10), 64), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_am_request_medium(ctx, right, H_OK, buf, SIZE_MAX, a, 1), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_am_request_long(ctx, right, H_OK, buf, SIZE_MAX, heaps[right], a, 1), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_am_request_long(ctx, me, H_OK, buf, SIZE_MAX, heap, a, 1), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_mem_register(ctx, buf, SIZE_MAX), FH_ERR_INVALID_ARG);
  CHECK(fh_malloc(ctx, SIZE_MAX) == NULL, "fh_malloc(SIZE_MAX)");
  CHECK(fh_malloc(ctx, 0) == NULL, "fh_malloc(0) must fail (documented)");
  CHECK(fh_malloc(ctx, (size_t)1 << 40) == NULL, "fh_malloc(1 TiB)");
  CHECK(mine[0] == 0x42 && mine[63] == 0x42, "a no-op wrote my heap");
}

/* A non-blocking access the target refuses: refused by the call itself (a node
 * peer, or memory the initiator already knows), or, when only the target can tell
 * (an off-node peer's unpinned memory, FH_SHM=0), accepted and then refused by its
 * completion. Either way the error reaches the program and nothing is written. */
static void nb_refused(int rc, fh_handle_t h, const char *what) {
  if (rc == FH_OK) rc = fh_wait(ctx, h);
  else CHECK(h == 777, "%s: h_out written by a failed call", what);
  CHECK(rc == FH_ERR_ACCESS, "%s: %s, expected FH_ERR_ACCESS at the call or its fh_wait", what,
        fh_strerror(rc));
}

static void nbi_refused(int rc, const char *what) {
  if (rc == FH_OK) rc = fh_wait_nbi(ctx, FH_NBI_ALL);
  CHECK(rc == FH_ERR_ACCESS, "%s: %s, expected FH_ERR_ACCESS at the call or fh_wait_nbi", what,
        fh_strerror(rc));
}

static void access_errors(void) {
  char buf[256];
  memset(buf, 7, sizeof buf);
  fh_handle_t h = 777;
  poll_barrier(); /* everyone polls while the targets answer the access queries below */
  CHECK_RC(fh_put(ctx, right, holes[right], buf, 8), FH_ERR_ACCESS);
  CHECK_RC(fh_get(ctx, buf, right, holes[right], 8), FH_ERR_ACCESS);
  CHECK_RC(fh_put(ctx, right, (void *)0x1000, buf, 8), FH_ERR_ACCESS);
  CHECK_RC(fh_get(ctx, buf, right, (void *)0x1000, 8), FH_ERR_ACCESS);
  int rc = fh_put_nb(ctx, right, holes[right], buf, 8, &h);
  nb_refused(rc, h, "fh_put_nb");
  h = 777;
  rc = fh_get_nb(ctx, buf, right, holes[right], 8, &h);
  nb_refused(rc, h, "fh_get_nb");
  nbi_refused(fh_put_nbi(ctx, right, holes[right], buf, 8), "fh_put_nbi");
  nbi_refused(fh_get_nbi(ctx, buf, right, holes[right], 8), "fh_get_nbi");
  /* Long AM destinations must be registered (or heap) memory, mapped or not. */
  CHECK_RC(fh_am_request_long(ctx, right, H_OK, buf, 8, unregs[right], NULL, 0), FH_ERR_ACCESS);
  CHECK_RC(fh_am_request_long(ctx, right, H_OK, buf, 8, holes[right], NULL, 0), FH_ERR_ACCESS);
  /* This rank's own unmapped memory. */
  CHECK_RC(fh_put(ctx, me, holes[me], buf, 8), FH_ERR_ACCESS);
  CHECK_RC(fh_get(ctx, buf, me, holes[me], 8), FH_ERR_ACCESS);
  CHECK_RC(fh_put(ctx, me, (void *)0x1000, buf, 8), FH_ERR_ACCESS);
  CHECK_RC(fh_wait_nbi(ctx, FH_NBI_ALL), FH_OK); /* nothing was issued */
  poll_barrier();
  for (size_t i = 0; i < 4096; i++) CHECK(unreg[i] == 0x3c, "unregistered memory was written");
  /* The targets are alive: the same calls into registered memory work. */
  CHECK_OK(fh_put(ctx, right, users[right], buf, 8));
  CHECK_OK(fh_get(ctx, buf + 100, right, users[right], 8));
  CHECK(memcmp(buf, buf + 100, 8) == 0, "get after refused accesses");
  poll_barrier();
}

static void registration_errors(void) {
  long pg = sysconf(_SC_PAGESIZE);
  unsigned char *big = aligned_alloc((size_t)pg, 4 * (size_t)pg);
  CHECK_RC(fh_mem_register(ctx, NULL, 4096), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_mem_register(ctx, big, 0), FH_ERR_INVALID_ARG);
  /* Unmapped memory. */
  void *m = mmap(NULL, 2 * (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(m != MAP_FAILED, "mmap");
  CHECK(munmap(m, 2 * (size_t)pg) == 0, "munmap");
  CHECK_RC(fh_mem_register(ctx, m, (size_t)pg), FH_ERR_ACCESS);
  CHECK_RC(fh_mem_register(ctx, (unsigned char *)m + 100, 10), FH_ERR_ACCESS);
  /* Partly mapped: a mapped page followed by an unmapped one. */
  unsigned char *two = mmap(NULL, 2 * (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(two != MAP_FAILED, "mmap");
  CHECK(munmap(two + pg, (size_t)pg) == 0, "munmap");
  CHECK_RC(fh_mem_register(ctx, two, 2 * (size_t)pg), FH_ERR_ACCESS);
  /* Overlaps. */
  CHECK_OK(fh_mem_register(ctx, big + pg, (size_t)pg));
  CHECK_RC(fh_mem_register(ctx, big + pg, (size_t)pg), FH_ERR_INVALID_ARG);          /* the same range */
  CHECK_RC(fh_mem_register(ctx, big, 2 * (size_t)pg), FH_ERR_INVALID_ARG);           /* overlaps its start */
  CHECK_RC(fh_mem_register(ctx, big + pg + pg / 2, (size_t)pg), FH_ERR_INVALID_ARG); /* overlaps its end */
  CHECK_RC(fh_mem_register(ctx, big + pg + 100, 10), FH_ERR_INVALID_ARG);            /* inside */
  CHECK_RC(fh_mem_register(ctx, big, 4 * (size_t)pg), FH_ERR_INVALID_ARG);           /* contains it */
  CHECK_RC(fh_mem_register(ctx, heap, 64), FH_ERR_INVALID_ARG);                      /* the library heap */
  /* Unregister what is not registered. */
  CHECK_RC(fh_mem_unregister(ctx, unreg, 4096), FH_ERR_NOT_PINNED);
  CHECK_RC(fh_mem_unregister(ctx, big + pg, 100), FH_ERR_NOT_PINNED);        /* wrong length */
  CHECK_RC(fh_mem_unregister(ctx, big + pg + 64, (size_t)pg - 64), FH_ERR_NOT_PINNED); /* wrong start */
  CHECK_RC(fh_mem_unregister(ctx, heap, 64), FH_ERR_INVALID_ARG); /* the library heap, as the header says */
  CHECK_OK(fh_mem_unregister(ctx, big + pg, (size_t)pg));
  CHECK_RC(fh_mem_unregister(ctx, big + pg, (size_t)pg), FH_ERR_NOT_PINNED); /* twice */
  /* Adjacent registrations are fine; invalidate of nothing is FH_OK. */
  CHECK_OK(fh_mem_register(ctx, big, (size_t)pg));
  CHECK_OK(fh_mem_register(ctx, big + pg, (size_t)pg));
  CHECK_OK(fh_mem_invalidate(ctx, big, 2 * (size_t)pg));
  CHECK_RC(fh_mem_unregister(ctx, big, (size_t)pg), FH_ERR_NOT_PINNED); /* invalidate dropped it */
  CHECK_OK(fh_mem_invalidate(ctx, unreg, 4096));
  munmap(two, (size_t)pg);
  free(big);
}

static void am_errors(void) {
  uint64_t a[17];
  for (int i = 0; i < 17; i++) a[i] = (uint64_t)i;
  char buf[64] = {0};
  const unsigned bad_idx[] = {0, 1, 2, 3, 4, 5, 64, 127, 256, 1000, UINT_MAX};
  for (size_t i = 0; i < sizeof bad_idx / sizeof *bad_idx; i++) {
    unsigned x = bad_idx[i];
    CHECK_RC(fh_am_register(ctx, x, h_ok, NULL), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_am_request_short(ctx, right, x, a, 1), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_am_request_medium(ctx, right, x, buf, 8, a, 1), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_am_request_long(ctx, right, x, buf, 8, heaps[right], a, 1), FH_ERR_INVALID_ARG);
  }
  CHECK_RC(fh_am_register(ctx, H_OK, NULL, NULL), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_am_request_short(ctx, right, H_OK, a, 17), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_am_request_medium(ctx, right, H_OK, buf, 8, a, 17), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_am_request_long(ctx, right, H_OK, buf, 8, heaps[right], a, 17), FH_ERR_INVALID_ARG);
  size_t mm = fh_am_max_medium(ctx), ml = fh_am_max_long(ctx);
  unsigned char *p = calloc(1, ml + 1);
  CHECK_RC(fh_am_request_medium(ctx, right, H_OK, p, mm + 1, a, 1), FH_ERR_INVALID_ARG);
  /* ml is small here (cfg.am_max_long); the destination is big enough. */
  CHECK_RC(fh_am_request_long(ctx, right, H_OK, p, ml + 1, heaps[right], a, 1), FH_ERR_INVALID_ARG);
  free(p);

  /* A request to an index the target never registered: accepted here, refused there,
   * reported by a later fh_poll here. */
  poll_barrier();
  uint64_t x = 1;
  CHECK_OK(fh_am_request_short(ctx, right, H_UNREGISTERED, &x, 1));
  int rc = FH_OK;
  double t0 = MPI_Wtime();
  while (rc == FH_OK) {
    rc = fh_poll(ctx);
    if (MPI_Wtime() - t0 > 60) FAILF("the refusal of an AM to an unregistered index was never reported");
  }
  CHECK_RC(rc, FH_ERR_INVALID_ARG);
  char msg[512];
  last_error(msg, sizeof msg);
  CHECK(strstr(msg, "220") != NULL, "refusal message \"%s\" does not name the handler index", msg);
  poll_barrier();
  CHECK_OK(fh_poll(ctx)); /* reported once */
  /* A medium one too. */
  CHECK_OK(fh_am_request_medium(ctx, right, H_UNREGISTERED, buf, 8, &x, 1));
  rc = FH_OK;
  t0 = MPI_Wtime();
  while (rc == FH_OK) {
    rc = fh_poll(ctx);
    if (MPI_Wtime() - t0 > 60) FAILF("the refusal of a medium AM to an unregistered index was never reported");
  }
  CHECK_RC(rc, FH_ERR_INVALID_ARG);
  poll_barrier();

  /* Tokens outside handlers. */
  _Alignas(64) unsigned char fake[256];
  memset(fake, 0, sizeof fake);
  fh_token_t *ft = (fh_token_t *)fake;
  CHECK_RC(fh_am_reply_short(ft, H_OK_REP, a, 1), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_am_reply_medium(ft, H_OK_REP, buf, 8, a, 1), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_am_reply_long(ft, H_OK_REP, buf, 8, heaps[right], a, 1), FH_ERR_INVALID_ARG);
  CHECK(fh_am_source(ft) < 0, "fh_am_source(fake token)");
  CHECK_RC(fh_am_reply_short(NULL, H_OK_REP, a, 1), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_am_reply_medium(NULL, H_OK_REP, buf, 8, a, 1), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_am_reply_long(NULL, H_OK_REP, buf, 8, heaps[right], a, 1), FH_ERR_INVALID_ARG);
  CHECK(fh_am_source(NULL) < 0, "fh_am_source(NULL)");
  memset(fake, 0xff, sizeof fake);
  CHECK_RC(fh_am_reply_short(ft, H_OK_REP, a, 1), FH_ERR_INVALID_ARG);
}

static void handle_errors(void) {
  const int which_bad[] = {0, 4, 8, -1, 0x100, INT_MIN};
  for (size_t i = 0; i < sizeof which_bad / sizeof *which_bad; i++) {
    CHECK_RC(fh_wait_nbi(ctx, which_bad[i]), FH_ERR_INVALID_ARG);
    CHECK_RC(fh_test_nbi(ctx, which_bad[i]), FH_ERR_INVALID_ARG);
  }
  CHECK_RC(fh_wait(ctx, 12345), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_test(ctx, 12345), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_wait(ctx, ~(fh_handle_t)0), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_test(ctx, (fh_handle_t)1 << 40), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_wait_all(ctx, NULL, 3), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_test_all(ctx, NULL, 3), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_wait_some(ctx, NULL, 3), FH_ERR_INVALID_ARG);
  CHECK_OK(fh_wait_all(ctx, NULL, 0));
  CHECK_OK(fh_test_all(ctx, NULL, 0));
  CHECK_OK(fh_wait_some(ctx, NULL, 0));
  /* A bad handle among good ones: the good ones still complete, the error is
   * returned, every entry becomes FH_HANDLE_NULL. */
  unsigned char src[2][32];
  memset(src[0], 0x61, 32);
  memset(src[1], 0x62, 32);
  fh_handle_t hs[3], h0, h1;
  CHECK_OK(fh_put_nb(ctx, right, (unsigned char *)heaps[right] + 1024 + 64 * me, src[0], 32, &h0));
  CHECK_OK(fh_put_nb(ctx, right, (unsigned char *)heaps[right] + 1024 + 64 * me + 32, src[1], 32, &h1));
  hs[0] = h0; hs[1] = 12345; hs[2] = h1;
  CHECK_RC(fh_wait_all(ctx, hs, 3), FH_ERR_INVALID_ARG);
  CHECK(hs[0] == FH_HANDLE_NULL && hs[1] == FH_HANDLE_NULL && hs[2] == FH_HANDLE_NULL, "wait_all left entries");
  CHECK_RC(fh_test(ctx, h0), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_test(ctx, h1), FH_ERR_INVALID_ARG);
  unsigned char back[64];
  CHECK_OK(fh_get(ctx, back, right, (unsigned char *)heaps[right] + 1024 + 64 * me, 64));
  CHECK(memcmp(back, src[0], 32) == 0 && memcmp(back + 32, src[1], 32) == 0, "puts around a bad handle lost");
}

static void inside_handlers(void) {
  poll_barrier();
  CHECK_OK(fh_am_request_short(ctx, right, H_INSIDE, NULL, 0));
  double t0 = MPI_Wtime();
  while (!in.ran || !in.rep_ran) {
    CHECK_OK(fh_poll(ctx));
    if (MPI_Wtime() - t0 > 60) FAILF("inside-handler round trip did not finish");
  }
  poll_barrier();
  int left = (me + np - 1) % np;
  CHECK(in.ran == 1 && in.rep_ran == 1, "handlers ran %d / %d times", in.ran, in.rep_ran);
  CHECK(in.source == left, "fh_am_source in handler = %d, expected %d", in.source, left);
  CHECK(in.rank == me && in.size == np && in.maxmed, "fh_rank/fh_size/fh_am_max_medium in a handler");
  CHECK_RC(in.put, FH_ERR_STATE);
  CHECK_RC(in.get, FH_ERR_STATE);
  CHECK_RC(in.put_nb, FH_ERR_STATE);
  CHECK(in.h == 777, "h_out written by a refused fh_put_nb");
  CHECK_RC(in.put_nbi, FH_ERR_STATE);
  CHECK_RC(in.poll, FH_ERR_STATE);
  CHECK_RC(in.req_short, FH_ERR_STATE);
  CHECK_RC(in.req_medium, FH_ERR_STATE);
  CHECK_RC(in.req_long, FH_ERR_STATE);
  CHECK_RC(in.wait_nbi, FH_ERR_STATE);
  CHECK_RC(in.unreg, FH_ERR_STATE);
  CHECK_RC(in.invalidate, FH_ERR_STATE);
  CHECK_RC(in.reply_bad_index, FH_ERR_INVALID_ARG);
  CHECK_RC(in.reply_too_many_args, FH_ERR_INVALID_ARG);
  CHECK_RC(in.reply_medium_too_big, FH_ERR_INVALID_ARG);
  CHECK_RC(in.reply_long_null_dst, FH_ERR_INVALID_ARG);
  CHECK_RC(in.reply_first, FH_OK);
  CHECK_RC(in.reply_second, FH_ERR_STATE);
  CHECK_RC(in.reply_second_medium, FH_ERR_STATE);
  CHECK_RC(in.rep_reply_short, FH_ERR_STATE);
  CHECK_RC(in.rep_reply_medium, FH_ERR_STATE);
  CHECK_RC(in.rep_reply_long, FH_ERR_STATE);
  CHECK_RC(in.rep_put, FH_ERR_STATE);
  CHECK_RC(in.rep_poll, FH_ERR_STATE);
  /* The registration the handler tried to remove is still there. */
  CHECK_RC(fh_mem_register(ctx, user, USER_LEN), FH_ERR_INVALID_ARG);
}

static void still_works(void) {
  unsigned char src[4096], dst[4096];
  for (int i = 0; i < 4096; i++) src[i] = (unsigned char)(me * 7 + i);
  poll_barrier();
  CHECK_OK(fh_put(ctx, right, heaps[right], src, sizeof src));
  CHECK_OK(fh_put(ctx, right, users[right], src, sizeof src));
  poll_barrier();
  int left = (me + np - 1) % np;
  for (int i = 0; i < 4096; i++) {
    CHECK(heap[i] == (unsigned char)(left * 7 + i), "final put to heap byte %d", i);
    CHECK(user[i] == (unsigned char)(left * 7 + i), "final put to registered memory byte %d", i);
  }
  CHECK_OK(fh_get(ctx, dst, right, heaps[right], sizeof dst));
  CHECK(memcmp(dst, src, sizeof dst) == 0, "final get from heap");
  CHECK_OK(fh_get(ctx, dst, right, users[right], sizeof dst));
  CHECK(memcmp(dst, src, sizeof dst) == 0, "final get from registered memory");
  uint64_t a = 0xabc;
  CHECK_OK(fh_am_request_short(ctx, right, H_OK, &a, 1));
  double t0 = MPI_Wtime();
  while (ok_replies < 1) {
    CHECK_OK(fh_poll(ctx));
    if (MPI_Wtime() - t0 > 60) FAILF("final AM round trip");
  }
  poll_barrier();
  /* fh_free of things that are not live allocations: refused, no effect. */
  fh_free(ctx, NULL);
  fh_free(ctx, user);
  fh_free(ctx, heap + 8);
  void *x = fh_malloc(ctx, 100);
  CHECK(x != NULL, "fh_malloc(100)");
  fh_free(ctx, x);
  fh_free(ctx, x); /* double free: refused */
  char msg[256];
  last_error(msg, sizeof msg);
  CHECK(msg[0] != 0, "double fh_free left no message");
}

static void after_finalize(void) {
  char buf[16] = {0};
  fh_handle_t h = 777, hs[1] = {0};
  uint64_t a = 1;
  CHECK_RC(fh_rank(ctx), FH_ERR_STATE);
  CHECK_RC(fh_size(ctx), FH_ERR_STATE);
  CHECK_RC(fh_poll(ctx), FH_ERR_STATE);
  CHECK_RC(config_print_quiet(ctx), FH_ERR_STATE);
  CHECK(fh_malloc(ctx, 64) == NULL, "fh_malloc after finalize");
  fh_free(ctx, heap);
  CHECK_RC(fh_mem_register(ctx, buf, sizeof buf), FH_ERR_STATE);
  CHECK_RC(fh_mem_unregister(ctx, user, USER_LEN), FH_ERR_STATE);
  CHECK_RC(fh_mem_invalidate(ctx, user, USER_LEN), FH_ERR_STATE);
  CHECK_RC(fh_put(ctx, right, heaps[right], buf, 8), FH_ERR_STATE);
  CHECK_RC(fh_get(ctx, buf, right, heaps[right], 8), FH_ERR_STATE);
  CHECK_RC(fh_put_nb(ctx, right, heaps[right], buf, 8, &h), FH_ERR_STATE);
  CHECK_RC(fh_get_nb(ctx, buf, right, heaps[right], 8, &h), FH_ERR_STATE);
  CHECK(h == 777, "h_out written after finalize");
  CHECK_RC(fh_put_nbi(ctx, right, heaps[right], buf, 8), FH_ERR_STATE);
  CHECK_RC(fh_get_nbi(ctx, buf, right, heaps[right], 8), FH_ERR_STATE);
  CHECK_RC(fh_test(ctx, FH_HANDLE_NULL), FH_ERR_STATE);
  CHECK_RC(fh_wait(ctx, FH_HANDLE_NULL), FH_ERR_STATE);
  CHECK_RC(fh_wait_all(ctx, hs, 1), FH_ERR_STATE);
  CHECK_RC(fh_test_all(ctx, hs, 1), FH_ERR_STATE);
  CHECK_RC(fh_wait_some(ctx, hs, 1), FH_ERR_STATE);
  CHECK_RC(fh_wait_nbi(ctx, FH_NBI_ALL), FH_ERR_STATE);
  CHECK_RC(fh_test_nbi(ctx, FH_NBI_ALL), FH_ERR_STATE);
  CHECK_RC(fh_am_register(ctx, H_OK, h_ok, NULL), FH_ERR_STATE);
  CHECK_RC(fh_am_request_short(ctx, right, H_OK, &a, 1), FH_ERR_STATE);
  CHECK_RC(fh_am_request_medium(ctx, right, H_OK, buf, 8, &a, 1), FH_ERR_STATE);
  CHECK_RC(fh_am_request_long(ctx, right, H_OK, buf, 8, heaps[right], &a, 1), FH_ERR_STATE);
  CHECK(fh_am_max_medium(ctx) == 0, "fh_am_max_medium after finalize");
  CHECK(fh_am_max_long(ctx) == 0, "fh_am_max_long after finalize");
  CHECK_RC(fh_finalize(ctx), FH_ERR_STATE);
  char msg[256];
  last_error(msg, sizeof msg);
  CHECK(strstr(msg, "finalize") != NULL, "message after a call on a finalized ctx: \"%s\"", msg);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &fh_test_rank);
  strerror_and_last_error();
  init_errors();

  fh_config_t cfg;
  fh_config_init(&cfg);
  cfg.am_max_long = 1 << 20; /* small, so a too-large long request is cheap to build */
  CHECK_OK(fh_init(MPI_COMM_WORLD, &cfg, &ctx));
  me = fh_rank(ctx);
  np = fh_size(ctx);
  CHECK(np <= 256, "at most 256 ranks");
  right = (me + 1) % np;
  CHECK(fh_am_max_long(ctx) == (size_t)1 << 20, "cfg.am_max_long ignored: %zu", fh_am_max_long(ctx));

  heap = fh_malloc(ctx, 2 << 20);
  CHECK(heap != NULL, "fh_malloc");
  user = aligned_alloc(4096, USER_LEN);
  CHECK_OK(fh_mem_register(ctx, user, USER_LEN));
  unreg = aligned_alloc(4096, USER_LEN);
  memset(unreg, 0x3c, USER_LEN);
  exchange_ptrs(heap, heaps, MPI_COMM_WORLD);
  exchange_ptrs(user, users, MPI_COMM_WORLD);
  exchange_ptrs(unreg, unregs, MPI_COMM_WORLD);
  /* An address range that is not mapped at all (firehose reaches any mapped
   * address; only unmapped ones are refused). */
  void *hole = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(hole != MAP_FAILED, "mmap");
  CHECK(munmap(hole, 2 * 4096) == 0, "munmap");
  exchange_ptrs(hole, holes, MPI_COMM_WORLD);
  CHECK_OK(fh_am_register(ctx, H_OK, h_ok, NULL));
  CHECK_OK(fh_am_register(ctx, H_OK_REP, h_ok_rep, NULL));
  CHECK_OK(fh_am_register(ctx, H_INSIDE, h_inside, NULL));
  CHECK_OK(fh_am_register(ctx, H_INSIDE_REP, h_inside_rep, NULL));
  CHECK_OK(fh_am_register(ctx, H_UNREGISTERED - 1, h_never, NULL)); /* a neighbour of the missing one */
  MPI_Barrier(MPI_COMM_WORLD);

  null_ctx();
  bad_ranks();
  null_buffers_and_sizes();
  access_errors();
  registration_errors();
  am_errors();
  handle_errors();
  inside_handlers();
  still_works();

  poll_barrier();
  CHECK_OK(fh_mem_unregister(ctx, user, USER_LEN));
  CHECK_OK(fh_finalize(ctx));
  after_finalize();
  /* MPI itself is fine. */
  int x = 1, sum = 0;
  MPI_Allreduce(&x, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  CHECK(sum == np, "MPI_Allreduce after everything");
  TEST_PASS("errors");
  free(user);
  free(unreg);
  MPI_Finalize();
  return 0;
}
