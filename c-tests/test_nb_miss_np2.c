/* Non-blocking means non-blocking (seed 002): a put_nb / get_nb / put_nbi that misses
 * in firehose returns before the target answered its move, fh_test says
 * FH_NOT_READY until it has, and fh_wait / fh_wait_nbi complete it with the right
 * data. Rank 1 computes for 1.5 s without calling MPI or the library while rank 0
 * starts transfers into rank 1's plain memory; FH_SHM=0 makes every access go through
 * firehose (a node peer would otherwise be reached with the kernel's single copy). */
#include "common.h"

#define N 4096

int main(int argc, char **argv) {
  setenv("FH_SHM", "0", 1);
  setenv("FH_CMA", "0", 1);
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  fh_test_rank = rank;
#ifdef MPICH_VERSION
  /* MPICH without MPICH_ASYNC_PROGRESS completes one-sided operations (here the read
   * of the peer's registration table that precedes a firehose move) only inside the
   * target's MPI calls: the call waits inside MPI for the computing peer, where the
   * library can neither return early nor diagnose (README, "Progress and MPI
   * interoperability"). Nothing to check on that MPI. */
  if (rank == 0) printf("SKIP test_nb_miss: MPICH completes one-sided operations only inside the target's MPI calls\n");
  MPI_Finalize();
  return 0;
#endif
  fh_ctx_t *ctx;
  CHECK_OK(fh_init(MPI_COMM_WORLD, NULL, &ctx));
  CHECK(n == 2, "runs on 2 ranks");
  /* Three separate 1 MiB-aligned areas (one region unit each), never touched by rank 0
   * before: each first access is a miss. */
  char *mem = aligned_alloc(1 << 20, 4 << 20);
  CHECK(mem != NULL, "aligned_alloc");
  for (size_t i = 0; i < (4u << 20); i++) mem[i] = (char)(i * 7 + 1);
  void *all[2];
  exchange_ptrs(mem, all, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    double t0 = fh_test_now();
    volatile double x = 0;
    while (fh_test_now() - t0 < 1.5) x += 1;
  } else {
    char *r = all[1];
    static char out[N], in[N];
    for (int i = 0; i < N; i++) out[i] = (char)(0x5A ^ i);
    fh_handle_t hp, hg;
    double t0 = fh_test_now();
    CHECK_OK(fh_put_nb(ctx, 1, r, out, N, &hp));
    CHECK_OK(fh_get_nb(ctx, in, 1, r + (1 << 20), N, &hg));
    CHECK_OK(fh_put_nbi(ctx, 1, r + (2 << 20), out, N));
    double issued = fh_test_now() - t0;
    int tp = fh_test(ctx, hp), tg = fh_test(ctx, hg), tn = fh_test_nbi(ctx, FH_NBI_ALL);
    printf("nb_miss: 3 transfers issued in %.3f ms; test: put %d get %d nbi %d\n", issued * 1e3, tp, tg, tn);
    CHECK(issued < 0.5, "non-blocking calls waited %.2f s for the computing target", issued);
    CHECK(tp == FH_NOT_READY && tg == FH_NOT_READY && tn == FH_NOT_READY,
          "fh_test must say FH_NOT_READY while the move is unanswered (put %d get %d nbi %d)", tp, tg, tn);
    CHECK_OK(fh_wait(ctx, hp));
    CHECK_OK(fh_wait(ctx, hg));
    CHECK_OK(fh_wait_nbi(ctx, FH_NBI_ALL));
    double done = fh_test_now() - t0;
    CHECK(done > 1.0, "completed after %.2f s, before the target could have answered", done);
    for (int i = 0; i < N; i++)
      CHECK(in[i] == (char)((size_t)((1 << 20) + i) * 7 + 1), "get byte %d = %d", i, in[i]);
    /* A miss on memory the target refuses is reported by the completion call. */
    int rc = fh_put_nb(ctx, 1, (void *)(uintptr_t)0xffff888000000000ULL, out, 8, &hp);
    if (rc == FH_OK) rc = fh_wait(ctx, hp);
    CHECK_RC(rc, FH_ERR_ACCESS);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    for (int i = 0; i < N; i++) {
      CHECK(mem[i] == (char)(0x5A ^ i), "put byte %d", i);
      CHECK(mem[(2 << 20) + i] == (char)(0x5A ^ i), "put_nbi byte %d", i);
    }
  }
  CHECK_OK(fh_finalize(ctx));
  TEST_PASS("test_nb_miss");
  MPI_Finalize();
  return 0;
}
