/* The peer comparison, firehose side: the operations of peer_shmem.c through
 * firehose.h (barrier, 8 B broadcast and sum, 8 B put to the next rank completed,
 * fetch-add on rank 0 from all, the MCS lock under contention from all). */
#include "peer.h"
#include <firehose.h>
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>

/* Stop the job on a failed call (usable inside expressions). */
static void ok_(int rc, const char *what) {
  if (rc != FH_OK) {
    fprintf(stderr, "%s: %s\n", what, fh_strerror(rc));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}
#define OK(call) ok_((call), #call)

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  fh_ctx_t *c;
  OK(fh_init_world(NULL, &c));
  int me = fh_rank(c), np = fh_size(c), right = (me + 1) % np;
  int64_t src = me + 1, dst = 0;
  uint64_t *ctr = fh_malloc(c, 8), *all_dst = fh_malloc(c, 8), old;
  *ctr = 0;
  uint64_t addr[64];
  uint64_t mine[2] = {(uint64_t)(uintptr_t)ctr, (uint64_t)(uintptr_t)all_dst};
  uint64_t both[128];
  MPI_Allgather(mine, 2, MPI_UINT64_T, both, 2, MPI_UINT64_T, MPI_COMM_WORLD);
  for (int r = 0; r < np && r < 64; r++) addr[r] = both[2 * r];
  void *right_dst = (void *)(uintptr_t)both[2 * right + 1];
  fh_lock_t *lock;
  OK(fh_lock_create(c, 0, &lock));
  OK(fh_barrier(c));
  PEER_TIME("barrier", me, OK(fh_barrier(c)), OK(fh_barrier(c)));
  PEER_TIME_N("broadcast_8B", me, OK(fh_barrier(c)), REPS_BCAST, OK(fh_broadcast(c, 0, &src, 8)));
  src = me + 1;
  PEER_TIME("sum_8B", me, OK(fh_barrier(c)), OK(fh_allreduce(c, &src, &dst, 1, FH_INT64, FH_SUM)));
  if (dst != (int64_t)np * (np + 1) / 2) fprintf(stderr, "fh sum wrong: %lld\n", (long long)dst);
  PEER_TIME("put_8B_quiet", me, OK(fh_barrier(c)), OK(fh_put(c, right, right_dst, &src, 8)));
  PEER_TIME("fetch_add_on_0", me, OK(fh_barrier(c)),
            OK(fh_atomic_fetch_add_u64(c, 0, (uint64_t *)(uintptr_t)addr[0], 1, &old)));
  PEER_TIME("lock_contended", me, OK(fh_barrier(c)), (OK(fh_lock_acquire(lock)), OK(fh_lock_release(lock))));
  OK(fh_barrier(c));
  fflush(stdout);
  OK(fh_lock_destroy(lock));
  OK(fh_finalize(c));
  MPI_Finalize();
  return 0;
}
