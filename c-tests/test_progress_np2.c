/* FH_PROGRESS=thread: rank 1 computes without calling the library (or MPI) while
 * rank 0 needs it — an access query for rank 1's registered memory and AM round
 * trips. Only the progress thread can serve them; the test fails (timeout) without. */
#include <time.h>
#include <unistd.h>
#include "common.h"

static volatile int pings;
static void on_ping(fh_token_t *t, void *b, size_t n, const uint64_t *a, size_t na, void *u) {
  (void)b; (void)n; (void)u; (void)na;
  pings++;
  uint64_t v = a[0] + 1;
  fh_am_reply_short(t, 131, &v, 1);
}
static volatile uint64_t pong;
static void on_pong(fh_token_t *t, void *b, size_t n, const uint64_t *a, size_t na, void *u) {
  (void)t; (void)b; (void)n; (void)u; (void)na;
  pong = a[0];
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  setenv("FH_PROGRESS", "thread", 1);
  fh_ctx_t *ctx;
  CHECK_OK(fh_init(MPI_COMM_WORLD, NULL, &ctx));
  fh_test_rank = fh_rank(ctx);
  if (provided < MPI_THREAD_MULTIPLE) {
    if (fh_test_rank == 0) printf("SKIP progress thread: MPI provides no MPI_THREAD_MULTIPLE\n");
    fh_finalize(ctx);
    MPI_Finalize();
    return 0;
  }
  CHECK_OK(fh_am_register(ctx, 130, on_ping, NULL));
  CHECK_OK(fh_am_register(ctx, 131, on_pong, NULL));
  static uint64_t target[1024];
  CHECK_OK(fh_mem_register(ctx, target, sizeof target));
  void *addrs[2];
  exchange_ptrs(target, addrs, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  if (fh_test_rank == 1) {
    /* Busy for 3 s (or until rank 0's data shows up), never calling the library. */
    double t0 = now();
    while (now() - t0 < 3.0 && ((volatile uint64_t *)target)[1023] != 77) { }
    CHECK(((volatile uint64_t *)target)[1023] == 77, "rank 0's put never arrived while rank 1 computed");
    CHECK(pings == 10, "handled %d pings on the progress thread", pings);
  } else {
    double t0 = now();
    uint64_t vals[1024];
    for (int i = 0; i < 1024; i++) vals[i] = (uint64_t)i;
    vals[1023] = 77;
    for (uint64_t k = 0; k < 10; k++) {
      pong = 0;
      CHECK_OK(fh_am_request_short(ctx, 1, 130, &k, 1));
      while (pong != k + 1) CHECK_OK(fh_poll(ctx));
    }
    /* First access to rank 1's registered memory needs rank 1 to answer a query. */
    CHECK_OK(fh_put(ctx, 1, addrs[1], vals, sizeof vals));
    double dt = now() - t0;
    CHECK(dt < 2.5, "took %.2f s: the target's progress thread did not serve us", dt);
    printf("progress thread served 10 AM round trips and an access query in %.3f s\n", dt);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK_OK(fh_finalize(ctx));
  TEST_PASS("progress thread");
  MPI_Finalize();
  return 0;
}
