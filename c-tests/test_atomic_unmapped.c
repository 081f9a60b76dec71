/* A remote atomic on memory its owner unmapped after others had used it (freed
 * without fh_mem_invalidate), as a stranger's program does: rank 0 maps a page,
 * every other rank adds to a word in it (firehose pins it at rank 0), rank 0 unmaps
 * it, and the others add again. The second atomic must be refused with
 * FH_ERR_ACCESS and rank 0 must keep serving (it once took a SIGSEGV inside its MPI
 * progress, 10 launches in 10). Then an allreduce shows every rank alive. Where the
 * kernel copy does not reach rank 0 (FH_CMA=0, or FH_SHM=0, which treats it as on
 * another node) the refusal cannot be made yet, so the test checks only its first
 * half there. */
#include <sys/mman.h>
#include "common.h"

int main(int argc, char **argv) {
  int me, np;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  fh_test_rank = me;
  fh_ctx_t *ctx;
  CHECK_OK(fh_init(MPI_COMM_WORLD, NULL, &ctx));
  const char *cma = getenv("FH_CMA"), *shm = getenv("FH_SHM");
  int unmapped_checked = !(cma && strcmp(cma, "0") == 0) && !(shm && strcmp(shm, "0") == 0);
  size_t len = 1 << 20;
  uint64_t at = 0;
  if (me == 0) {
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED, "mmap");
    memset(p, 0, len);
    at = (uint64_t)(uintptr_t)p;
  }
  MPI_Bcast(&at, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  uint64_t *word = (uint64_t *)(uintptr_t)at;
  if (me != 0) CHECK_OK(fh_atomic_add_u64(ctx, 0, word, 1));
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 0) {
    CHECK(*word == (uint64_t)(np - 1), "the word holds %llu after %d adds", (unsigned long long)*word,
          np - 1);
    CHECK(munmap(word, len) == 0, "munmap");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (me != 0 && unmapped_checked) {
    uint64_t old = 0;
    CHECK_RC(fh_atomic_fetch_add_u64(ctx, 0, word, 1, &old), FH_ERR_ACCESS);
    char msg[512];
    fh_last_error(msg, sizeof msg);
    CHECK(strstr(msg, "no longer mapped") != NULL, "the refusal does not say why: %s", msg);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  int64_t x = me + 1, sum = 0;
  CHECK_OK(fh_allreduce(ctx, &x, &sum, 1, FH_INT64, FH_SUM));
  CHECK(sum == (int64_t)np * (np + 1) / 2, "allreduce after the refused atomics: %lld", (long long)sum);
  CHECK_OK(fh_finalize(ctx));
  if (me == 0) printf("PASS test_atomic_unmapped (%d ranks%s)\n", np, unmapped_checked ? "" : ", off the kernel copy: first half");
  MPI_Finalize();
  return 0;
}
