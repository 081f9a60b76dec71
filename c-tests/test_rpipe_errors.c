/* rpipe: bad input gives the documented error with a message, never a crash or a
 * hang, and the pipe (or the pair) keeps working afterwards.
 *
 * Ranks pair up (0-1, 2-3, ...; an odd last rank only runs the local checks); in
 * each pair the even rank writes. Every failing call is checked for its status and
 * for a fresh, non-empty fh_last_error message (a marker error with a unique text is
 * raised before each call, so a stale message cannot pass). FH_TEST_VERBOSE=1 prints
 * every message. Phases:
 *
 *  1. local argument errors, no handshake: NULL ctx, NULL pipe_out, peer == self,
 *     peer out of range (FH_ERR_BAD_RANK), NULL and garbage pipe handles for every
 *     call (rpipe_rmem gives NULL); then the pair's first open pairs as usual.
 *  2. handshake failures, both ends fail: widths below 64 or above the maximum,
 *     disagreeing widths, policies, pull flags, two writers, RPIPE_BOTH without
 *     RPIPE_FULL_DUPLEX, a writer end on a full-duplex pipe, a width the library
 *     heap cannot hold (FH_ERR_NO_MEMORY), bad role/mode/policy values on both ends;
 *     after each one a good open pairs and carries a message.
 *  3. half-duplex misuse: NULL out-params (nothing allocated or consumed), messages
 *     larger than the heap, rwrite of addresses not from rmalloc, rwrite twice, rmem
 *     after rwrite and after free, addresses inside an allocation or message, writer rfree of a written message, double cancel,
 *     rmalloc on a reader-only end (FH_ERR_STATE), rread on a writer-only end
 *     (FH_ERR_STATE), rwrite of a received message, double rfree; then one more good
 *     message each way checks the pipe still works.
 *  7b. inside an AM handler: the calls that never block work, rpipe_rread is refused.
 *  3b. addresses of another pipe to the same peer (same offsets): refused by every call.
 *  4. full-duplex misuse: rwrite of a received message, cancel of a received message,
 *     and the two directions' addresses stay apart.
 *  5. use after close: every call gives FH_ERR_STATE (rmem NULL), close twice; a
 *     stale handle stays dead after its slot is reused by a new pipe.
 *  6. a width that is not a multiple of 64: a message of exactly width_bytes (the
 *     largest message, per firehose.h) fits and arrives intact.
 *  7. bad role / mode / policy values on ONE end only: both ends must fail (the
 *     handshake compares), the peer must not hang, and the pair opens again.
 *  8. a pipe left open at fh_finalize: afterwards its calls give FH_ERR_STATE, and
 *     rpipe_open on the finalized context too.
 *
 * A watchdog (alarm) names the phase if one hangs. Run: mpirun -np 2|4|8 test_rpipe_errors */
#include "common.h"
#include <limits.h>
#include <unistd.h>

static fh_ctx_t *ctx;
static int me, np, peer, paired, even;
static int verbose;

/* ---------------- phases (watchdog: common.h) ---------------- */
static void begin(const char *name) {
  begin_phase(name, 30);
  if (me == 0 && verbose) printf("--- %s\n", name);
}

/* ---------------- fresh-error checks ---------------- */
/* Raise an error with a unique message (a never-issued handle names itself). */
static unsigned marker_n;
static char marker_msg[512];
static void marker(void) {
  void *r = rpipe_rmem((rpipe_t *)(uintptr_t)(0x70000000u + ++marker_n), 1);
  if (r != NULL) FAILF("rpipe_rmem of a never-issued handle gave %p, not NULL", r);
  fh_last_error(marker_msg, sizeof marker_msg);
  if (marker_msg[0] == '\0') FAILF("rpipe_rmem of a never-issued handle left no error message");
}
static void fresh_message(const char *call, int line) {
  char m[512];
  size_t n = fh_last_error(m, sizeof m);
  if (n == 0 || m[0] == '\0') FAILF("line %d: %s failed but fh_last_error is empty", line, call);
  if (strcmp(m, marker_msg) == 0) FAILF("line %d: %s failed but did not set fh_last_error (still '%s')", line, call, m);
  if (verbose) printf("[rank %d] %-58.58s -> %s\n", me, call, m);
}
/* The call returns `want` (an error) with a fresh message. */
#define EXPECT(call, want)                                                                                     \
  do {                                                                                                         \
    marker();                                                                                                  \
    int rc_ = (call);                                                                                          \
    if (rc_ != (want))                                                                                         \
      FAILF("%s returned %d (%s), expected %d (%s)", #call, rc_, fh_strerror(rc_), (int)(want),              \
            fh_strerror(want));                                                                                \
    fresh_message(#call, __LINE__);                                                                            \
  } while (0)
/* rpipe_rmem gives NULL with a fresh message. */
#define EXPECT_NULL(call)                                                                                      \
  do {                                                                                                         \
    marker();                                                                                                  \
    void *r_ = (call);                                                                                         \
    if (r_ != NULL) FAILF("%s returned %p, expected NULL", #call, r_);                                         \
    fresh_message(#call, __LINE__);                                                                            \
  } while (0)

static rpipe_stats_t stats_of(rpipe_t *p) {
  rpipe_stats_t st;
  memset(&st, 0, sizeof st);
  CHECK_OK(rpipe_stats(p, &st));
  return st;
}

static void fill(unsigned char *m, size_t n, unsigned tag) {
  for (size_t i = 0; i < n; i++) m[i] = (unsigned char)(tag * 31 + i * 7 + (i >> 8));
}
static void check_bytes(const unsigned char *m, size_t n, unsigned tag, const char *what) {
  CHECK(m != NULL, "%s: rmem is NULL", what);
  for (size_t i = 0; i < n; i++)
    if (m[i] != (unsigned char)(tag * 31 + i * 7 + (i >> 8)))
      FAILF("%s: byte %zu is 0x%02x, expected 0x%02x", what, i, m[i], (unsigned char)(tag * 31 + i * 7 + (i >> 8)));
}

/* Write one `n`-byte message tagged `tag` (writer) or read and check it (reader). */
static void one_message(rpipe_t *p, int writing, size_t n, unsigned tag, const char *what) {
  rpipe_addr_t a;
  if (writing) {
    CHECK_OK(rpipe_rmalloc(p, n, &a));
    unsigned char *m = rpipe_rmem(p, a);
    CHECK(m != NULL, "%s: rmem of a fresh allocation is NULL", what);
    fill(m, n, tag);
    CHECK_OK(rpipe_rwrite(p, a));
  } else {
    size_t len;
    CHECK_OK(rpipe_rread(p, &a, &len));
    CHECK(len == n, "%s: message has %zu bytes, expected %zu", what, len, n);
    check_bytes(rpipe_rmem(p, a), n, tag, what);
    CHECK_OK(rpipe_rfree(p, a));
  }
}

/* A good half-duplex open between the pair (the even rank writes), one message, close:
 * the pair's open counting is still in step after whatever failed before. */
static unsigned good_tag = 1;
static void good_open(const char *after) {
  rpipe_t *p;
  char what[160];
  snprintf(what, sizeof what, "good pipe after %s", after);
  int rc = rpipe_open(ctx, peer, even ? RPIPE_WRITER : RPIPE_READER, 4096, RPIPE_HALF_DUPLEX, RPIPE_NEXT_FIT, &p);
  if (rc != FH_OK) FAILF("%s: rpipe_open returned %d (%s)", what, rc, fh_strerror(rc));
  one_message(p, even, 300, good_tag++, what);
  CHECK_OK(rpipe_close(p));
}

/* Both ends call rpipe_open with their own arguments; each must get `want`. */
static void both_fail(const char *what, int role, size_t width, int mode, int policy, int want) {
  rpipe_t *p = (rpipe_t *)(uintptr_t)0xdead;
  marker();
  int rc = rpipe_open(ctx, peer, role, width, mode, policy, &p);
  if (rc != want)
    FAILF("%s: rpipe_open(role %d, width %zu, mode %d, policy %d) returned %d (%s), expected %d (%s)", what, role,
          width, mode, policy, rc, fh_strerror(rc), want, fh_strerror(want));
  CHECK(p == (rpipe_t *)(uintptr_t)0xdead, "%s: a failed rpipe_open wrote pipe_out", what);
  fresh_message(what, __LINE__);
  good_open(what);
}

/* ---------------- 1. local argument errors ---------------- */
static void local_errors(void) {
  rpipe_t *p;
  rpipe_addr_t a;
  size_t len;
  rpipe_stats_t st;
  int other = (me + 1) % np;
  EXPECT(rpipe_open(NULL, other, RPIPE_WRITER, 4096, RPIPE_HALF_DUPLEX, RPIPE_NEXT_FIT, &p), FH_ERR_INVALID_ARG);
  EXPECT(rpipe_open(ctx, me, RPIPE_WRITER, 4096, RPIPE_HALF_DUPLEX, RPIPE_NEXT_FIT, &p), FH_ERR_INVALID_ARG);
  EXPECT(rpipe_open(ctx, me, RPIPE_BOTH, 4096, RPIPE_FULL_DUPLEX, RPIPE_NEXT_FIT, &p), FH_ERR_INVALID_ARG);
  EXPECT(rpipe_open(ctx, -1, RPIPE_WRITER, 4096, RPIPE_HALF_DUPLEX, RPIPE_NEXT_FIT, &p), FH_ERR_BAD_RANK);
  EXPECT(rpipe_open(ctx, np, RPIPE_WRITER, 4096, RPIPE_HALF_DUPLEX, RPIPE_NEXT_FIT, &p), FH_ERR_BAD_RANK);
  EXPECT(rpipe_open(ctx, INT_MAX, RPIPE_READER, 4096, RPIPE_HALF_DUPLEX, RPIPE_NEXT_FIT, &p), FH_ERR_BAD_RANK);
  EXPECT(rpipe_open(ctx, INT_MIN, RPIPE_READER, 4096, RPIPE_HALF_DUPLEX, RPIPE_NEXT_FIT, &p), FH_ERR_BAD_RANK);
  /* NULL pipe_out is caught before the handshake: the peer does not take part. */
  EXPECT(rpipe_open(ctx, other, RPIPE_WRITER, 4096, RPIPE_HALF_DUPLEX, RPIPE_NEXT_FIT, NULL), FH_ERR_INVALID_ARG);

  /* NULL and never-issued handles. */
  rpipe_t *bad[2] = {NULL, (rpipe_t *)(uintptr_t)0x12345};
  for (int i = 0; i < 2; i++) {
    rpipe_t *q = bad[i];
    EXPECT(rpipe_rmalloc(q, 8, &a), FH_ERR_INVALID_ARG);
    EXPECT(rpipe_try_rmalloc(q, 8, &a), FH_ERR_INVALID_ARG);
    EXPECT_NULL(rpipe_rmem(q, 1));
    EXPECT(rpipe_rwrite(q, 1), FH_ERR_INVALID_ARG);
    EXPECT(rpipe_rread(q, &a, &len), FH_ERR_INVALID_ARG);
    EXPECT(rpipe_try_rread(q, &a, &len), FH_ERR_INVALID_ARG);
    EXPECT(rpipe_rfree(q, 1), FH_ERR_INVALID_ARG);
    EXPECT(rpipe_stats(q, &st), FH_ERR_INVALID_ARG);
    EXPECT(rpipe_close(q), FH_ERR_INVALID_ARG);
  }
  /* A handle-sized garbage value (a real pointer to something else). */
  rpipe_t *junk = (rpipe_t *)(void *)&st;
  marker();
  int rc = rpipe_close(junk);
  CHECK(rc == FH_ERR_INVALID_ARG || rc == FH_ERR_STATE, "rpipe_close(a stack address) returned %d (%s)", rc,
        fh_strerror(rc));
  fresh_message("rpipe_close(a stack address)", __LINE__);
  EXPECT_NULL(rpipe_rmem(junk, 64));
}

/* ---------------- 3. half-duplex misuse ---------------- */
static void half_duplex_misuse(void) {
  const size_t W = 4096;
  rpipe_t *p;
  rpipe_addr_t a, b;
  size_t len;
  rpipe_stats_t st;
  CHECK_OK(rpipe_open(ctx, peer, even ? RPIPE_WRITER : RPIPE_READER, W, RPIPE_HALF_DUPLEX, RPIPE_FIRST_FIT, &p));
  if (even) { /* writer */
    EXPECT(rpipe_rmalloc(p, 8, NULL), FH_ERR_INVALID_ARG);
    EXPECT(rpipe_try_rmalloc(p, 8, NULL), FH_ERR_INVALID_ARG);
    EXPECT(rpipe_rmalloc(p, W + 1, &a), FH_ERR_INVALID_ARG);
    EXPECT(rpipe_try_rmalloc(p, W + 1, &a), FH_ERR_INVALID_ARG);
    EXPECT(rpipe_rmalloc(p, SIZE_MAX, &a), FH_ERR_INVALID_ARG);
    EXPECT(rpipe_try_rmalloc(p, (size_t)1 << 40, &a), FH_ERR_INVALID_ARG);
    st = stats_of(p);
    CHECK(st.heap_allocations == 0 && st.heap_free_bytes == W, "failed rmallocs allocated: %llu allocations, %llu free",
          (unsigned long long)st.heap_allocations, (unsigned long long)st.heap_free_bytes);
    EXPECT(rpipe_rread(p, &a, &len), FH_ERR_STATE);
    EXPECT(rpipe_try_rread(p, &a, &len), FH_ERR_STATE);
    EXPECT(rpipe_rwrite(p, 12345), FH_ERR_INVALID_ARG);
    EXPECT(rpipe_rwrite(p, 0), FH_ERR_INVALID_ARG);
    EXPECT(rpipe_rfree(p, 12345), FH_ERR_INVALID_ARG);
    EXPECT(rpipe_rfree(p, 0), FH_ERR_INVALID_ARG);
    EXPECT_NULL(rpipe_rmem(p, 12345));
    EXPECT(rpipe_stats(p, NULL), FH_ERR_INVALID_ARG);

    CHECK_OK(rpipe_rmalloc(p, 100, &a));
    /* An address inside the allocation, not its start, is not from rmalloc. */
    EXPECT(rpipe_rwrite(p, a + 64), FH_ERR_INVALID_ARG);
    EXPECT_NULL(rpipe_rmem(p, a + 64));
    EXPECT(rpipe_rfree(p, a + 64), FH_ERR_INVALID_ARG);
    for (rpipe_addr_t k = 1; k < 64; k += 31) { /* inside the allocation's first line */
      EXPECT(rpipe_rwrite(p, a + k), FH_ERR_INVALID_ARG);
      EXPECT(rpipe_rfree(p, a + k), FH_ERR_INVALID_ARG);
      EXPECT_NULL(rpipe_rmem(p, a + k));
    }
    unsigned char *m = rpipe_rmem(p, a);
    CHECK(m != NULL, "rmem of a fresh allocation is NULL");
    fill(m, 100, 1);
    CHECK_OK(rpipe_rwrite(p, a));
    EXPECT(rpipe_rwrite(p, a), FH_ERR_INVALID_ARG); /* twice */
    EXPECT_NULL(rpipe_rmem(p, a));                  /* after rwrite */
    EXPECT(rpipe_rfree(p, a), FH_ERR_INVALID_ARG);  /* written: the reader frees it */

    CHECK_OK(rpipe_rmalloc(p, 50, &b));
    CHECK_OK(rpipe_rfree(p, b)); /* cancel */
    EXPECT(rpipe_rfree(p, b), FH_ERR_INVALID_ARG);
    EXPECT_NULL(rpipe_rmem(p, b));
    EXPECT(rpipe_rwrite(p, b), FH_ERR_INVALID_ARG);
    st = stats_of(p);
    CHECK(st.messages_written == 1 && st.heap_allocations == 1, "after misuse: written %llu allocations %llu",
          (unsigned long long)st.messages_written, (unsigned long long)st.heap_allocations);
    one_message(p, 1, 200, 2, "half duplex, after the writer's errors");
  } else { /* reader */
    EXPECT(rpipe_rmalloc(p, 8, &a), FH_ERR_STATE);
    EXPECT(rpipe_try_rmalloc(p, 8, &a), FH_ERR_STATE);
    EXPECT(rpipe_rmalloc(p, W + 1, &a), FH_ERR_INVALID_ARG); /* never fits, whatever the end */
    EXPECT(rpipe_rread(p, NULL, &len), FH_ERR_INVALID_ARG);
    EXPECT(rpipe_rread(p, &a, NULL), FH_ERR_INVALID_ARG);
    EXPECT(rpipe_try_rread(p, NULL, &len), FH_ERR_INVALID_ARG);
    EXPECT(rpipe_try_rread(p, &a, NULL), FH_ERR_INVALID_ARG);
    EXPECT(rpipe_rfree(p, 12345), FH_ERR_INVALID_ARG);
    EXPECT_NULL(rpipe_rmem(p, 12345));
    /* Message 1 was not consumed by the failed reads. */
    CHECK_OK(rpipe_rread(p, &a, &len));
    CHECK(len == 100, "first message has %zu bytes, expected 100 (a failed rread consumed one?)", len);
    check_bytes(rpipe_rmem(p, a), 100, 1, "half duplex, message 1");
    EXPECT(rpipe_rwrite(p, a), FH_ERR_INVALID_ARG); /* a received message */
    EXPECT(rpipe_rfree(p, a + 64), FH_ERR_INVALID_ARG);
    for (rpipe_addr_t k = 1; k < 64; k += 31) { /* inside the message's first line */
      EXPECT(rpipe_rfree(p, a + k), FH_ERR_INVALID_ARG);
      EXPECT_NULL(rpipe_rmem(p, a + k));
    }
    check_bytes(rpipe_rmem(p, a), 100, 1, "half duplex, message 1 after the failed calls");
    CHECK_OK(rpipe_rfree(p, a));
    EXPECT(rpipe_rfree(p, a), FH_ERR_INVALID_ARG); /* double free */
    EXPECT_NULL(rpipe_rmem(p, a));                 /* after free */
    st = stats_of(p);
    CHECK(st.heap_free_bytes == 0 && st.heap_largest_free == 0 && st.heap_allocations == 0 &&
              st.messages_written == 0 && st.messages_read == 1 && st.max_message == W,
          "reader-only stats: free %llu largest %llu allocations %llu written %llu read %llu max %llu",
          (unsigned long long)st.heap_free_bytes, (unsigned long long)st.heap_largest_free,
          (unsigned long long)st.heap_allocations, (unsigned long long)st.messages_written,
          (unsigned long long)st.messages_read, (unsigned long long)st.max_message);
    one_message(p, 0, 200, 2, "half duplex, after the writer's errors");
  }
  CHECK_OK(rpipe_close(p));
}

/* ---------------- 3b. another pipe's addresses ---------------- */
/* Two pipes to the same peer, same roles and widths: the first allocation and the
 * first message of each sit at offset 0 of its heap, so only the address's pipe
 * identity tells them apart. */
static void other_pipes_addresses(void) {
  rpipe_t *p, *q;
  rpipe_addr_t a, b;
  size_t len;
  int role = even ? RPIPE_WRITER : RPIPE_READER;
  CHECK_OK(rpipe_open(ctx, peer, role, 4096, RPIPE_HALF_DUPLEX, RPIPE_NEXT_FIT, &p));
  CHECK_OK(rpipe_open(ctx, peer, role, 4096, RPIPE_HALF_DUPLEX, RPIPE_NEXT_FIT, &q));
  if (even) {
    CHECK_OK(rpipe_rmalloc(p, 40, &a));
    CHECK_OK(rpipe_rmalloc(q, 40, &b));
    CHECK(a != b, "two pipes gave the same address %#llx", (unsigned long long)a);
    EXPECT_NULL(rpipe_rmem(p, b));
    EXPECT(rpipe_rwrite(p, b), FH_ERR_INVALID_ARG);
    EXPECT(rpipe_rfree(p, b), FH_ERR_INVALID_ARG);
    EXPECT(rpipe_rwrite(q, a), FH_ERR_INVALID_ARG);
    fill(rpipe_rmem(p, a), 40, 31);
    fill(rpipe_rmem(q, b), 40, 32);
    CHECK_OK(rpipe_rwrite(p, a));
    CHECK_OK(rpipe_rwrite(q, b));
  } else {
    CHECK_OK(rpipe_rread(p, &a, &len));
    CHECK_OK(rpipe_rread(q, &b, &len));
    EXPECT_NULL(rpipe_rmem(p, b));
    EXPECT(rpipe_rfree(p, b), FH_ERR_INVALID_ARG);
    EXPECT(rpipe_rfree(q, a), FH_ERR_INVALID_ARG);
    check_bytes(rpipe_rmem(p, a), 40, 31, "first pipe's message after the other's address");
    check_bytes(rpipe_rmem(q, b), 40, 32, "second pipe's message");
    CHECK_OK(rpipe_rfree(p, a));
    CHECK_OK(rpipe_rfree(q, b));
  }
  CHECK_OK(rpipe_close(p));
  CHECK_OK(rpipe_close(q));
}

/* ---------------- 7b. calls from an AM handler ---------------- */
/* The header allows the calls that never block inside a handler (try_rread,
 * try_rmalloc, rmem, rfree, stats) and refuses the blocking ones with
 * FH_ERR_STATE. The writer sends one message, then an AM; the reader's handler
 * takes the message, checks it and frees it, all inside the handler. */
static rpipe_t *hpipe;
static volatile int hran;
enum { H_PIPE = 140 };
static void pipe_handler(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs,
                         void *user) {
  (void)tok; (void)buf; (void)nbytes; (void)args; (void)nargs; (void)user;
  rpipe_addr_t a;
  size_t len;
  rpipe_stats_t st;
  HCHECK(rpipe_rread(hpipe, &a, &len) == FH_ERR_STATE, "blocking rpipe_rread in a handler was not refused");
  HCHECK(rpipe_try_rread(hpipe, &a, &len) == FH_OK, "rpipe_try_rread in a handler: no message");
  const unsigned char *m = rpipe_rmem(hpipe, a);
  HCHECK(m != NULL && len == 24, "rpipe_rmem in a handler: %p, %zu bytes", (const void *)m, len);
  for (size_t i = 0; m && i < len; i++) HCHECK(m[i] == (unsigned char)(77 + i), "byte %zu is %u", i, m[i]);
  HCHECK(rpipe_rfree(hpipe, a) == FH_OK, "rpipe_rfree in a handler");
  HCHECK(rpipe_stats(hpipe, &st) == FH_OK && st.messages_read == 1, "rpipe_stats in a handler");
  hran = 1;
}

static void calls_from_handler(void) {
  CHECK_OK(fh_am_register(ctx, H_PIPE, pipe_handler, NULL));
  CHECK_OK(rpipe_open(ctx, peer, even ? RPIPE_WRITER : RPIPE_READER, 4096, RPIPE_HALF_DUPLEX, RPIPE_NEXT_FIT,
                      &hpipe));
  /* The writer's open may return first: its AM must not reach a handler that has no
   * pipe yet, so the reader says when its open returned. */
  int ready = 1;
  if (even) {
    MPI_Recv(&ready, 1, MPI_INT, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    rpipe_addr_t a;
    CHECK_OK(rpipe_rmalloc(hpipe, 24, &a));
    unsigned char *m = rpipe_rmem(hpipe, a);
    for (int i = 0; i < 24; i++) m[i] = (unsigned char)(77 + i);
    CHECK_OK(rpipe_rwrite(hpipe, a));
    CHECK_OK(fh_am_request_short(ctx, peer, H_PIPE, NULL, 0));
  } else {
    MPI_Send(&ready, 1, MPI_INT, peer, 7, MPI_COMM_WORLD);
    while (!hran) CHECK_OK(fh_poll(ctx));
    CHECK_HANDLERS();
  }
  CHECK_OK(rpipe_close(hpipe));
}

/* ---------------- 4. full-duplex misuse ---------------- */
static void full_duplex_misuse(void) {
  rpipe_t *p;
  rpipe_addr_t mine, got;
  size_t len;
  CHECK_OK(rpipe_open(ctx, peer, RPIPE_BOTH, 4096, RPIPE_FULL_DUPLEX | RPIPE_PULL, RPIPE_WORST_FIT, &p));
  one_message(p, 1, 64, 10 + (unsigned)even, "full duplex, first write");
  CHECK_OK(rpipe_rread(p, &got, &len));
  CHECK(len == 64, "full duplex: %zu bytes", len);
  CHECK_OK(rpipe_rmalloc(p, 64, &mine)); /* an allocation in the peer's heap, unwritten */
  CHECK(mine != got, "full duplex: an allocation and a received message share address %#llx",
        (unsigned long long)mine);
  unsigned char *mm = rpipe_rmem(p, mine), *gm = rpipe_rmem(p, got);
  CHECK(mm != NULL && gm != NULL && mm != gm, "full duplex: rmem %p (allocation) and %p (message)", (void *)mm,
        (void *)gm);
  EXPECT(rpipe_rwrite(p, got), FH_ERR_INVALID_ARG); /* a received message is not ours to send */
  check_bytes(rpipe_rmem(p, got), 64, 10 + (unsigned)!even, "full duplex, message after a failed rwrite");
  CHECK_OK(rpipe_rfree(p, mine)); /* cancel ours: the message we hold stays */
  check_bytes(rpipe_rmem(p, got), 64, 10 + (unsigned)!even, "full duplex, message after a cancel");
  EXPECT_NULL(rpipe_rmem(p, mine));
  CHECK_OK(rpipe_rfree(p, got));
  EXPECT(rpipe_rfree(p, got), FH_ERR_INVALID_ARG);
  EXPECT(rpipe_rfree(p, mine), FH_ERR_INVALID_ARG);
  one_message(p, 1, 3000, 20 + (unsigned)even, "full duplex, after the errors");
  one_message(p, 0, 3000, 20 + (unsigned)!even, "full duplex, after the errors");
  CHECK_OK(rpipe_close(p));
}

/* ---------------- 5. use after close ---------------- */
static void dead_handle(rpipe_t *p, rpipe_addr_t old) {
  rpipe_addr_t a;
  size_t len;
  rpipe_stats_t st;
  EXPECT(rpipe_rmalloc(p, 8, &a), FH_ERR_STATE);
  EXPECT(rpipe_try_rmalloc(p, 8, &a), FH_ERR_STATE);
  EXPECT(rpipe_rwrite(p, old), FH_ERR_STATE);
  EXPECT(rpipe_rread(p, &a, &len), FH_ERR_STATE);
  EXPECT(rpipe_try_rread(p, &a, &len), FH_ERR_STATE);
  EXPECT(rpipe_rfree(p, old), FH_ERR_STATE);
  EXPECT(rpipe_stats(p, &st), FH_ERR_STATE);
  EXPECT_NULL(rpipe_rmem(p, old));
  EXPECT(rpipe_close(p), FH_ERR_STATE);
}

static void use_after_close(void) {
  rpipe_t *p, *q;
  rpipe_addr_t a;
  CHECK_OK(rpipe_open(ctx, peer, even ? RPIPE_WRITER : RPIPE_READER, 4096, RPIPE_HALF_DUPLEX, RPIPE_BEST_FIT, &p));
  a = 12345;
  if (even) {
    /* The reader closes at once: once its close has arrived, nothing more may be
     * allocated (FH_ERR_STATE); before, the allocation succeeds. */
    int rc = rpipe_rmalloc(p, 10, &a);
    CHECK(rc == FH_OK || rc == FH_ERR_STATE, "rmalloc as the reader closes: %s", fh_strerror(rc));
    if (rc != FH_OK) a = 12345;
  }
  CHECK_OK(rpipe_close(p));
  dead_handle(p, a);
  /* A new pipe (likely in the same table slot): the old handle stays dead. */
  CHECK_OK(rpipe_open(ctx, peer, RPIPE_BOTH, 8192, RPIPE_FULL_DUPLEX, RPIPE_NEXT_FIT, &q));
  dead_handle(p, a);
  one_message(q, 1, 500, 30 + (unsigned)even, "new pipe after a close");
  one_message(q, 0, 500, 30 + (unsigned)!even, "new pipe after a close");
  dead_handle(p, a);
  CHECK_OK(rpipe_close(q));
  dead_handle(q, a);
}

/* ---------------- 6. width not a multiple of 64 ---------------- */
static void odd_width(void) {
  const size_t W = 1000;
  rpipe_t *p;
  rpipe_addr_t a;
  CHECK_OK(rpipe_open(ctx, peer, even ? RPIPE_WRITER : RPIPE_READER, W, RPIPE_HALF_DUPLEX, RPIPE_NEXT_FIT, &p));
  rpipe_stats_t st = stats_of(p);
  if (even) {
    int rc = rpipe_rmalloc(p, W, &a);
    if (rc != FH_OK)
      FAILF("width_bytes %zu (max_message %llu): rpipe_rmalloc(%zu) returned %d (%s); firehose.h says width_bytes "
            "is the largest message",
            W, (unsigned long long)st.max_message, W, rc, fh_strerror(rc));
    fill(rpipe_rmem(p, a), W, 40);
    CHECK_OK(rpipe_rwrite(p, a));
    EXPECT(rpipe_rmalloc(p, W + 1, &a), FH_ERR_INVALID_ARG);
  } else {
    rpipe_addr_t b;
    size_t len;
    CHECK_OK(rpipe_rread(p, &b, &len));
    CHECK(len == W, "odd width: %zu bytes, expected %zu", len, W);
    check_bytes(rpipe_rmem(p, b), W, 40, "odd width: full-width message");
    CHECK_OK(rpipe_rfree(p, b));
  }
  CHECK(st.max_message == W, "width_bytes %zu but max_message %llu", W, (unsigned long long)st.max_message);
  CHECK_OK(rpipe_close(p));
}

/* ---------------- 8. a pipe left open at finalize ---------------- */
static void after_finalize(rpipe_t *p) {
  rpipe_addr_t a;
  size_t len;
  rpipe_t *q;
  EXPECT(rpipe_rmalloc(p, 8, &a), FH_ERR_STATE);
  EXPECT(rpipe_try_rmalloc(p, 8, &a), FH_ERR_STATE);
  EXPECT(rpipe_rwrite(p, 1), FH_ERR_STATE);
  EXPECT(rpipe_rread(p, &a, &len), FH_ERR_STATE);
  EXPECT(rpipe_try_rread(p, &a, &len), FH_ERR_STATE);
  EXPECT(rpipe_rfree(p, 1), FH_ERR_STATE);
  EXPECT_NULL(rpipe_rmem(p, 1));
  EXPECT(rpipe_open(ctx, peer, RPIPE_BOTH, 4096, RPIPE_FULL_DUPLEX, RPIPE_NEXT_FIT, &q), FH_ERR_STATE);
  int rc = rpipe_close(p); /* gives the handle back; nothing to wait for */
  CHECK(rc == FH_OK || rc == FH_ERR_STATE, "rpipe_close after fh_finalize returned %d (%s)", rc, fh_strerror(rc));
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  ctx = fh_test_init(&me, &np);
  verbose = getenv("FH_TEST_VERBOSE") != NULL;
  watchdog_init(ctx, 0);
  CHECK(np >= 2, "needs at least 2 ranks");
  peer = me ^ 1;
  paired = peer < np;
  even = me % 2 == 0;

  begin("1. local argument errors");
  local_errors();
  if (paired) good_open("local errors");
  end_phase();

  begin("2. handshake failures on both ends");
  if (paired) {
    int wr = even ? RPIPE_WRITER : RPIPE_READER;
    const int H = RPIPE_HALF_DUPLEX, NF = RPIPE_NEXT_FIT, INV = FH_ERR_INVALID_ARG;
    both_fail("width 32", wr, 32, H, NF, INV);
    both_fail("width 0", wr, 0, H, NF, INV);
    both_fail("width 63", wr, 63, H, NF, INV);
    both_fail("width 2^41 (above the maximum)", wr, (size_t)1 << 41, H, NF, INV);
    both_fail("widths disagree", wr, even ? 4096 : 8192, H, NF, INV);
    both_fail("policies disagree", wr, 4096, H, even ? RPIPE_FIRST_FIT : RPIPE_BEST_FIT, INV);
    both_fail("pull on one end only", wr, 4096, even ? RPIPE_PULL : H, NF, INV);
    both_fail("two writers", RPIPE_WRITER, 4096, H, NF, INV);
    both_fail("two readers", RPIPE_READER, 4096, H, NF, INV);
    both_fail("RPIPE_BOTH, half duplex", RPIPE_BOTH, 4096, H, NF, INV);
    both_fail("writer vs both, full duplex", even ? RPIPE_WRITER : RPIPE_BOTH, 4096, RPIPE_FULL_DUPLEX, NF, INV);
    both_fail("full duplex on one end only", even ? RPIPE_BOTH : RPIPE_READER, 4096,
              even ? RPIPE_FULL_DUPLEX : H, NF, INV);
    both_fail("width 1 GiB (library heap too small)", wr, (size_t)1 << 30, H, NF, FH_ERR_NO_MEMORY);
    /* Bad values on both ends: each end fails on its own, and the pair stays in step. */
    both_fail("role 0 on both ends", 0, 4096, H, NF, INV);
    both_fail("mode 4 on both ends", wr, 4096, 4, NF, INV);
    both_fail("policy 9 on both ends", wr, 4096, H, 9, INV);
  }
  end_phase();

  begin("3. half-duplex misuse");
  if (paired) half_duplex_misuse();
  end_phase();

  begin("3b. another pipe's addresses");
  if (paired) other_pipes_addresses();
  end_phase();

  begin("4. full-duplex misuse");
  if (paired) full_duplex_misuse();
  end_phase();

  begin("5. use after close");
  if (paired) use_after_close();
  end_phase();

  begin("6. width not a multiple of 64");
  if (paired) odd_width();
  end_phase();

  begin("7. bad role/mode/policy on one end: both fail");
  if (paired) {
    int wr = even ? RPIPE_WRITER : RPIPE_READER;
    const int H = RPIPE_HALF_DUPLEX, NF = RPIPE_NEXT_FIT, INV = FH_ERR_INVALID_ARG;
    both_fail("role 7 on the even end", even ? 7 : RPIPE_READER, 4096, H, NF, INV);
    both_fail("role -1 on the odd end", even ? RPIPE_WRITER : -1, 4096, H, NF, INV);
    both_fail("mode 4 on the even end", wr, 4096, even ? 4 : H, NF, INV);
    both_fail("mode -1 on the odd end", wr, 4096, even ? H : -1, NF, INV);
    both_fail("policy 4 on the even end", wr, 4096, H, even ? 4 : NF, INV);
    both_fail("policy -1 on the odd end", wr, 4096, H, even ? NF : -1, INV);
  }
  end_phase();

  begin("7b. calls from an AM handler");
  if (paired) calls_from_handler();
  end_phase();

  begin("8. a pipe left open at fh_finalize");
  rpipe_t *left = NULL;
  if (paired) CHECK_OK(rpipe_open(ctx, peer, RPIPE_BOTH, 4096, RPIPE_FULL_DUPLEX, RPIPE_NEXT_FIT, &left));
  CHECK_OK(fh_finalize(ctx));
  if (paired) after_finalize(left);
  alarm(0);
  TEST_PASS("rpipe_errors");
  MPI_Finalize();
  return 0;
}
