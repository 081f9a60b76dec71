/* FH_PROGRESS=thread in a program that calls plain MPI_Init (as most do): MPI gives
 * less than MPI_THREAD_MULTIPLE, so there can be no progress thread. The library
 * must say so on stderr at fh_init (rank 0; every rank with FH_VERBOSE=1), not
 * only in fh_config_print, and then work by polling. */
#include "common.h"

int main(int argc, char **argv) {
  setenv("FH_PROGRESS", "thread", 1);
  MPI_Init(&argc, &argv);
  int provided, rank;
  MPI_Query_thread(&provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  fh_test_rank = rank;
  fh_test_capture_t cap;
  fh_test_capture_begin(&cap, 2);
  fh_ctx_t *ctx;
  int rc = fh_init(MPI_COMM_WORLD, NULL, &ctx);
  char *err = fh_test_capture_end(&cap);
  CHECK_OK(rc);
  if (provided == MPI_THREAD_MULTIPLE) {
    if (rank == 0) printf("SKIP test_progress_refused: plain MPI_Init gave MPI_THREAD_MULTIPLE\n");
  } else {
    int said = strstr(err, "FH_PROGRESS=thread needs MPI_THREAD_MULTIPLE") != NULL;
    CHECK(said == (rank == 0), "rank %d: the refused progress thread is %s on stderr: '%s'", rank,
          said ? "reported" : "not reported", err);
    int rc2;
    char *cfg = fh_test_config_text(ctx, &rc2);
    CHECK_OK(rc2);
    CHECK(strstr(cfg, "progress thread: DISABLED") != NULL, "fh_config_print: %s", cfg);
    free(cfg);
  }
  free(err);
  /* And the job works by polling: a put to the neighbour's heap, checked. */
  int n = fh_size(ctx);
  uint64_t *buf = fh_malloc(ctx, 64);
  CHECK(buf != NULL, "fh_malloc");
  buf[0] = 0;
  void **all = malloc(sizeof(void *) * (size_t)n);
  exchange_ptrs(buf, all, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  uint64_t v = 1000 + (uint64_t)rank;
  CHECK_OK(fh_put(ctx, (rank + 1) % n, all[(rank + 1) % n], &v, sizeof v));
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(buf[0] == 1000 + (uint64_t)((rank + n - 1) % n), "put landed: %llu", (unsigned long long)buf[0]);
  MPI_Barrier(MPI_COMM_WORLD);
  free(all);
  fh_free(ctx, buf);
  CHECK_OK(fh_finalize(ctx));
  if (rank == 0) printf("PASS test_progress_refused\n");
  MPI_Finalize();
  return 0;
}
