/* Broadcasts back to back, as an application loop issues them: thousands of
 * fh_broadcast calls from rotating roots, sizes on both sides of the 4 KiB the node
 * path carries, written from the header alone (MPI_Init, MPI_Barrier).
 *  a. 4000 broadcasts; the root refills its buffer with the next call's data as soon
 *     as its call returns (the library must have copied it); one rank sleeps now and
 *     then, so the others' roots run far ahead of it; every byte is checked.
 *  b. the same with an fh_allreduce every 37 calls and an MPI_Barrier every 500:
 *     reductions and broadcasts share the node slots' call numbers.
 *  c. one root, 1000 calls of 8 bytes while every other rank sleeps 20 ms first: the
 *     root returns from all of them without waiting for more than the slots allow,
 *     and the late ranks still read every value in order.
 * Run: mpirun -np N test_bcast_burst (CI: 2, 4, 8; also FH_SHM=0, FH_WAIT_SLEEP=1). */
#include "common.h"

static fh_ctx_t *ctx;
static int me, np;

static const size_t sizes[] = {1, 8, 24, 64, 1000, 4096, 4097, 9000, 8, 512};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static unsigned char pattern(int call, size_t i) { return (unsigned char)mix64((uint64_t)call * 131071u + i); }

static void burst(int calls, int with_reductions, uint64_t *rng) {
  unsigned char *buf = malloc(9000);
  CHECK(buf != NULL, "malloc");
  for (int c = 0; c < calls; c++) {
    size_t n = sizes[(size_t)c % NSIZES];
    int root = (c * 7 + c / NSIZES) % np;
    if (me == root) {
      for (size_t i = 0; i < n; i++) buf[i] = pattern(c, i);
    } else {
      memset(buf, 0xee, n);
    }
    if (me == np - 1 && rng_next(rng) % 400 == 0) usleep(2000);
    CHECK_OK(fh_broadcast(ctx, root, buf, n));
    /* The root overwrites its buffer at once: what the others read must not change. */
    if (me == root) memset(buf, 0x55, n);
    else
      for (size_t i = 0; i < n; i++)
        CHECK(buf[i] == pattern(c, i), "call %d: %zu B from root %d: byte %zu is %#x, expected %#x", c, n, root, i,
              buf[i], pattern(c, i));
    if (with_reductions && c % 37 == 36) {
      int64_t x = me + c, sum = 0;
      CHECK_OK(fh_allreduce(ctx, &x, &sum, 1, FH_INT64, FH_SUM));
      CHECK(sum == (int64_t)np * (np - 1) / 2 + (int64_t)np * c, "call %d: allreduce gave %lld", c, (long long)sum);
    }
    if (with_reductions && c % 500 == 499) MPI_Barrier(MPI_COMM_WORLD);
  }
  free(buf);
}

static void late_readers(void) {
  enum { CALLS = 1000 };
  uint64_t v;
  if (me != 0) usleep(20000);
  double t0 = fh_test_now();
  for (int c = 0; c < CALLS; c++) {
    v = me == 0 ? mix64((uint64_t)c) : 0;
    CHECK_OK(fh_broadcast(ctx, 0, &v, sizeof v));
    CHECK(v == mix64((uint64_t)c), "late call %d: got %#llx", c, (unsigned long long)v);
  }
  double t = fh_test_now() - t0;
  if (me == 0) printf("c. root: %d broadcasts of 8 B in %.1f ms while the others slept 20 ms first\n", CALLS, t * 1e3);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  ctx = fh_test_init(&me, &np);
  uint64_t rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)me;
  burst(4000, 0, &rng);
  MPI_Barrier(MPI_COMM_WORLD);
  burst(4000, 1, &rng);
  MPI_Barrier(MPI_COMM_WORLD);
  late_readers();
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK_OK(fh_finalize(ctx));
  if (me == 0) printf("test_bcast_burst: ok (%d ranks)\n", np);
  MPI_Finalize();
  return 0;
}
