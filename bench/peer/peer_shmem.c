/* The peer comparison, OpenSHMEM side (Open MPI's liboshmem; build with oshcc, run
 * with oshrun). Operations as in peer_fh.c. Its shmem_finalize crashes on this
 * machine (docs/design: platform.md), so the program flushes and exits after a last
 * barrier without it. */
#include "peer.h"
#include <shmem.h>
#include <stdint.h>
#include <unistd.h>

static long psync[2][SHMEM_REDUCE_SYNC_SIZE];
static long pwrk[2][SHMEM_REDUCE_MIN_WRKDATA_SIZE];
static long bsync[2][SHMEM_BCAST_SYNC_SIZE];

int main(void) {
  shmem_init();
  int me = shmem_my_pe(), np = shmem_n_pes();
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE; i++) psync[k][i] = SHMEM_SYNC_VALUE;
    for (int i = 0; i < SHMEM_BCAST_SYNC_SIZE; i++) bsync[k][i] = SHMEM_SYNC_VALUE;
  }
  long *src = shmem_malloc(8), *dst = shmem_malloc(8), *ctr = shmem_malloc(8), *lock = shmem_malloc(8);
  *src = me + 1;
  *ctr = 0;
  *lock = 0;
  shmem_barrier_all();
  int right = (me + 1) % np, k = 0;
  PEER_TIME("barrier", me, shmem_barrier_all(), shmem_barrier_all());
  PEER_TIME_N("broadcast_8B", me, shmem_barrier_all(), REPS_BCAST,
            (shmem_broadcast64(dst, src, 1, 0, 0, 0, np, bsync[k]), k ^= 1));
  PEER_TIME("sum_8B", me, shmem_barrier_all(),
            (shmem_long_sum_to_all(dst, src, 1, 0, 0, np, pwrk[k], psync[k]), k ^= 1));
  if (*dst != (long)np * (np + 1) / 2) fprintf(stderr, "shmem sum wrong: %ld\n", *dst);
  PEER_TIME("put_8B_quiet", me, shmem_barrier_all(), (shmem_putmem(dst, src, 8, right), shmem_quiet()));
  PEER_TIME("fetch_add_on_0", me, shmem_barrier_all(), (void)shmem_long_atomic_fetch_add(ctr, 1, 0));
  PEER_TIME("lock_contended", me, shmem_barrier_all(), (shmem_set_lock(lock), shmem_clear_lock(lock)));
  shmem_barrier_all();
  fflush(stdout);
  _exit(0);
}
