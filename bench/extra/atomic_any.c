/* Remote fetch&add from rank 0 to a word of rank 1 in plain malloc'd memory (firehose
 * pins it there) and to one in fh_malloc memory, alternating blocks; 2 ranks.
 * Build: mpicc -O2 -Iinclude bench/extra/atomic_any.c -Ltarget/openmpi/release -lfirehose
 * Run: mpirun -np 2 ./a.out (docs/PERFORMANCE.md, sixth sitting). */
#include <mpi.h>
#include <firehose.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int me; MPI_Comm_rank(MPI_COMM_WORLD, &me);
  fh_ctx_t *ctx; if (fh_init(MPI_COMM_WORLD, NULL, &ctx)) return 1;
  uint64_t *any = aligned_alloc(64, 4096); any[0] = 0;
  uint64_t *heap = fh_malloc(ctx, 64); heap[0] = 0;
  uint64_t pa[2] = {(uint64_t)any, (uint64_t)heap}, ra[2];
  MPI_Sendrecv(pa, 2, MPI_UINT64_T, 1 - me, 0, ra, 2, MPI_UINT64_T, 1 - me, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  int n = 20000; double t[2] = {0, 0};
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 0) {
    uint64_t old;
    for (int r = 0; r < 20; r++)
      for (int k = 0; k < 2; k++) {
        double t0 = MPI_Wtime();
        for (int i = 0; i < n / 20; i++) fh_atomic_fetch_add_u64(ctx, 1, (uint64_t *)ra[k], 1, &old);
        t[k] += MPI_Wtime() - t0;
      }
    printf("fetch_add: any memory %.3f us, heap %.3f us\n", t[0] / n * 1e6, t[1] / n * 1e6);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 1 && any[0] != (uint64_t)n) printf("bad %lu\n", (unsigned long)any[0]);
  fh_finalize(ctx); MPI_Finalize(); return 0;
}
