/* fh_local_addr as a stranger uses it from the header (like shmem_ptr): ask for a
 * local address of the right neighbour's fh_malloc'd buffer; where there is one,
 * write the data and then a flag straight through it (release), and the neighbour
 * waits on its own flag (acquire) with no library or MPI call in between; where
 * there is none, fall back to fh_put. Checked:
 *  - this rank's own addresses come back unchanged;
 *  - on one node every peer's heap block and heap segment (a block larger than the
 *    whole FH_HEAP_SIZE) is reachable, with FH_SHM=0 none is; the address aliases
 *    the peer's memory both ways (stores seen by fh_get, fh_put seen by loads);
 *  - ranges the peer's fh_malloc memory does not hold (its stack, a range past its
 *    heap) give FH_OK and NULL;
 *  - errors: NULL local_out, a bad rank, a NULL address; *local_out is NULL after.
 * Run: mpirun -np N test_local_addr (CI: 2, 4, 8; FH_SHM=0; FH_SHM_MAX_RANKS=2;
 * FH_HEAP_SIZE=4M). */
#include "common.h"
#include <sched.h>

#define LEN 4096
#define ROUNDS 200

static fh_ctx_t *ctx;
static int me, np;

/* Rank `to`'s block `theirs` (LEN bytes, a flag word after them): local, or NULL. */
static unsigned char *reach(int to, unsigned char *theirs) {
  void *p = (void *)1;
  CHECK_OK(fh_local_addr(ctx, to, theirs, LEN + 8, &p));
  return p;
}

/* ROUNDS rounds of LEN bytes to the right neighbour's block, each announced by the
 * round number in the flag word after the data; the left neighbour's arrive here. */
static void ring(unsigned char **blocks, const char *what) {
  int right = (me + 1) % np, left = (me + np - 1) % np;
  unsigned char *mine = blocks[me], *dst = reach(right, blocks[right]);
  uint64_t *flag = (uint64_t *)(mine + LEN);
  unsigned char data[LEN];
  for (uint64_t r = 1; r <= ROUNDS; r++) {
    for (int i = 0; i < LEN; i++) data[i] = (unsigned char)(me * 31 + r * 7 + (uint64_t)i);
    if (dst) {
      memcpy(dst, data, LEN);
      __atomic_store_n((uint64_t *)(dst + LEN), r, __ATOMIC_RELEASE);
    } else {
      CHECK_OK(fh_put(ctx, right, blocks[right], data, LEN));
      CHECK_OK(fh_put(ctx, right, blocks[right] + LEN, &r, 8));
    }
    while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) < r) {
      /* The left neighbour's puts may need our progress (MPI RMA from another node,
       * or from another mapping with FH_CMA=0), whether or not we reach the right
       * neighbour directly. */
      fh_poll(ctx);
      sched_yield();
    }
    for (int i = 0; i < LEN; i++) {
      unsigned char want = (unsigned char)(left * 31 + r * 7 + (uint64_t)i);
      CHECK(mine[i] == want, "%s round %llu byte %d: %u, want %u", what, (unsigned long long)r, i,
            mine[i], want);
    }
    /* the next round overwrites: everyone has checked this one */
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  CHECK_OK(fh_init_world(NULL, &ctx));
  me = fh_rank(ctx), np = fh_size(ctx);
  fh_test_rank = me;
  const char *shm = getenv("FH_SHM"), *cut = getenv("FH_SHM_MAX_RANKS"), *hs = getenv("FH_HEAP_SIZE");
  int shared = !(shm && !strcmp(shm, "0")), one_node = shared && !cut;
  size_t heap = hs && strchr(hs, 'M') ? (size_t)atoi(hs) << 20 : (size_t)32 << 20;

  unsigned char *small = fh_malloc(ctx, LEN + 64), *big = fh_malloc(ctx, heap + heap / 2);
  CHECK(small && big, "fh_malloc");
  memset(small, 0, LEN + 64);
  unsigned char *seg = big + heap / 2; /* past the first region's size: a segment */
  memset(seg, 0, LEN + 64);
  unsigned char **smalls = malloc(sizeof *smalls * (size_t)np), **segs = malloc(sizeof *segs * (size_t)np);
  exchange_ptrs(small, (void **)smalls, MPI_COMM_WORLD);
  exchange_ptrs(seg, (void **)segs, MPI_COMM_WORLD);
  int on_stack = 0;
  void **stacks = malloc(sizeof *stacks * (size_t)np);
  exchange_ptrs(&on_stack, stacks, MPI_COMM_WORLD);

  /* who is reachable */
  for (int r = 0; r < np; r++) {
    unsigned char *a = reach(r, smalls[r]), *b = reach(r, segs[r]);
    if (r == me) {
      CHECK(a == small && b == seg, "own addresses: %p %p for %p %p", (void *)a, (void *)b,
            (void *)small, (void *)seg);
      continue;
    }
    CHECK(!a == !b, "rank %d: heap block %p but segment %p", r, (void *)a, (void *)b);
    if (one_node) CHECK(a, "rank %d's heap block is not reachable on one node", r);
    if (!shared) CHECK(!a, "rank %d's heap block is reachable with FH_SHM=0", r);
    void *p = (void *)1;
    CHECK_OK(fh_local_addr(ctx, r, stacks[r], 4, &p));
    CHECK(p == NULL, "rank %d's stack gave %p", r, p);
    p = (void *)1;
    CHECK_OK(fh_local_addr(ctx, r, smalls[r], heap * 4, &p));
    CHECK(p == NULL, "a range past rank %d's heap gave %p", r, p);
  }

  /* aliasing both ways with the right neighbour, then the flag rings */
  int right = (me + 1) % np;
  unsigned char *rs = reach(right, smalls[right]);
  if (rs && right != me) {
    uint64_t v = 0x5eed0000ULL + (uint64_t)me, got = 0;
    memcpy(rs + 8, &v, 8);
    CHECK_OK(fh_get(ctx, &got, right, smalls[right] + 8, 8));
    CHECK(got == v, "fh_get after a store through the address: %llx", (unsigned long long)got);
    v++;
    CHECK_OK(fh_put(ctx, right, smalls[right] + 16, &v, 8));
    CHECK(!memcmp(rs + 16, &v, 8), "a load through the address after fh_put");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  memset(small, 0, LEN + 64);
  memset(seg, 0, LEN + 64);
  MPI_Barrier(MPI_COMM_WORLD);
  ring(smalls, "heap block");
  ring(segs, "heap segment");

  /* errors */
  void *p = (void *)1;
  CHECK_RC(fh_local_addr(ctx, right, smalls[right], 8, NULL), FH_ERR_INVALID_ARG);
  CHECK_RC(fh_local_addr(ctx, np, smalls[right], 8, &p), FH_ERR_BAD_RANK);
  CHECK(p == NULL, "*local_out after FH_ERR_BAD_RANK: %p", p);
  p = (void *)1;
  CHECK_RC(fh_local_addr(ctx, right, NULL, 8, &p), FH_ERR_INVALID_ARG);
  CHECK(p == NULL, "*local_out after FH_ERR_INVALID_ARG: %p", p);

  MPI_Barrier(MPI_COMM_WORLD);
  fh_free(ctx, small);
  fh_free(ctx, big);
  CHECK_OK(fh_finalize(ctx));
  if (me == 0) printf("test_local_addr: %d ranks, peers %s: PASS\n", np, one_node ? "reachable" : shared ? "cut into nodes" : "unreachable");
  free(smalls);
  free(segs);
  free(stacks);
  MPI_Finalize();
  return 0;
}
