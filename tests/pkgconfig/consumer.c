/* consumer.c -- a program built against an installed firehose using only
 * `pkg-config --cflags --libs firehose` (scripts/test-pkgconfig.sh builds it twice:
 * against libfirehose.so and statically against libfirehose.a). A ring put/get on
 * fh_malloc memory and one short active-message round trip; prints PASS. */
#include <mpi.h>
#include <firehose.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int me = -1;

#define FAIL(...)                                                              \
  do {                                                                         \
    char m_[512];                                                              \
    fh_last_error(m_, sizeof m_);                                              \
    fprintf(stderr, "[rank %d] consumer FAIL (line %d): ", me, __LINE__);      \
    fprintf(stderr, __VA_ARGS__);                                              \
    fprintf(stderr, " [last error: %s]\n", m_);                                \
    fflush(stderr);                                                            \
    MPI_Abort(MPI_COMM_WORLD, 1);                                              \
  } while (0)
#define CALL(call)                                                             \
  do {                                                                         \
    int rc_ = (call);                                                          \
    if (rc_ != FH_OK) FAIL("%s returned %s", #call, fh_strerror(rc_));         \
  } while (0)

enum { H_REQ = FH_AM_INDEX_USER_MIN, H_REP };
static volatile int handled, replied;
static volatile uint64_t answer;

static void on_req(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  (void)buf; (void)nbytes; (void)user;
  uint64_t a = nargs == 2 ? args[0] + args[1] : 0;
  handled++;
  if (fh_am_reply_short(tok, H_REP, &a, 1) != FH_OK) FAIL("fh_am_reply_short");
}
static void on_rep(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  (void)tok; (void)buf; (void)nbytes; (void)user;
  answer = nargs == 1 ? args[0] : 0;
  replied++;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  fh_ctx_t *ctx;
  CALL(fh_init(MPI_COMM_WORLD, NULL, &ctx));
  int n = fh_size(ctx), right = (me + 1) % n, left = (me + n - 1) % n;
  if (fh_version() >> 16 != FH_VERSION_MAJOR) FAIL("library major %u != header major %d", fh_version() >> 16, FH_VERSION_MAJOR);

  enum { W = 256 };
  uint64_t *heap = fh_malloc(ctx, W * sizeof(uint64_t));
  if (!heap) FAIL("fh_malloc");
  memset(heap, 0, W * sizeof(uint64_t));
  uint64_t mine = (uint64_t)(uintptr_t)heap, *all = malloc(sizeof(uint64_t) * (size_t)n);
  MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
  uint64_t src[W], back[W];
  for (int i = 0; i < W; i++) src[i] = (uint64_t)me * 100000 + (uint64_t)i;
  CALL(fh_put(ctx, right, (void *)(uintptr_t)all[right], src, sizeof src));
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < W; i++)
    if (heap[i] != (uint64_t)left * 100000 + (uint64_t)i) FAIL("word %d from rank %d wrong", i, left);
  CALL(fh_get(ctx, back, right, (void *)(uintptr_t)all[right], sizeof back));
  if (memcmp(back, src, sizeof src) != 0) FAIL("fh_get data differs");

  CALL(fh_am_register(ctx, H_REQ, on_req, NULL));
  CALL(fh_am_register(ctx, H_REP, on_rep, NULL));
  MPI_Barrier(MPI_COMM_WORLD);
  uint64_t args[2] = {40, (uint64_t)me};
  CALL(fh_am_request_short(ctx, right, H_REQ, args, 2));
  while (!replied || !handled) CALL(fh_poll(ctx));
  if (answer != 40 + (uint64_t)me) FAIL("AM reply %llu", (unsigned long long)answer);

  fh_free(ctx, heap);
  CALL(fh_finalize(ctx));
  free(all);
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 0) printf("PASS pkgconfig consumer (%d ranks, firehose %s)\n", n, FH_VERSION_STRING);
  MPI_Finalize();
  return 0;
}
