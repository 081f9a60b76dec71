/* rpipe as a stranger writes it from the header: closes in whatever order the
 * program finds natural.
 *
 * Plain MPI_Init, MPI_Barrier between phases, no fh_barrier.
 *  a. pairs (0-1, 2-3, ...; an odd last rank sits out): each rank opens its
 *     outgoing pipe and its incoming one (the lower rank opens "out" first, so the
 *     k-th opens pair), they ping-pong 2000 messages of 0..300 bytes, each checked
 *     byte for byte, and then BOTH close their outgoing pipe first. A close that
 *     waited for the peer's matching close would deadlock here.
 *  b. every rank opens a full-duplex pipe to every other rank (increasing peer
 *     order), sends one message to each and reads one from each, then closes them
 *     in an order of its own (a rank-seeded shuffle).
 *  c. 12 cycles of the pairs of (a) with two 9 MiB pipes (about 18 MiB of the 32 MiB
 *     library heap per rank per cycle; two cycles do not fit): the odd rank of each
 *     pair closes late by a random few ms. A closed pipe's memory must come back
 *     (or the second cycle fails with FH_ERR_NO_MEMORY), and an open that finds the
 *     heap still held by the last cycle's pipes waits for the peer's close.
 * Run: mpirun -np 2|4|8 test_rpipe_close_order */
#include "common.h"

static fh_ctx_t *ctx;
static int me, np;
static uint64_t rng;

static unsigned char byte_of(uint64_t key, size_t i) { return (unsigned char)(mix64(key * 977 + i) >> 17); }

static void send_one(rpipe_t *p, uint64_t key, size_t n) {
  rpipe_addr_t a;
  CHECK_OK(rpipe_rmalloc(p, n, &a));
  unsigned char *m = rpipe_rmem(p, a);
  CHECK(m != NULL || n == 0, "rpipe_rmem of a fresh %zu-byte allocation is NULL", n);
  for (size_t i = 0; i < n; i++) m[i] = byte_of(key, i);
  CHECK_OK(rpipe_rwrite(p, a));
}

static void recv_one(rpipe_t *p, uint64_t key, size_t n, const char *what) {
  rpipe_addr_t a;
  size_t len;
  CHECK_OK(rpipe_rread(p, &a, &len));
  CHECK(len == n, "%s: message of %zu bytes, expected %zu", what, len, n);
  const unsigned char *m = rpipe_rmem(p, a);
  for (size_t i = 0; i < n; i++)
    CHECK(m[i] == byte_of(key, i), "%s: byte %zu is %u, expected %u", what, i, m[i], byte_of(key, i));
  CHECK_OK(rpipe_rfree(p, a));
}

/* The pair phase: out and in pipes of `width`, `msgs` round trips, both close out
 * first; `late`: the odd rank sleeps a random 0..4 ms before closing. */
static void pair_round(int peer, size_t width, int msgs, int late, uint64_t salt) {
  rpipe_t *out, *in;
  if (me < peer) {
    CHECK_OK(rpipe_open(ctx, peer, RPIPE_WRITER, width, RPIPE_HALF_DUPLEX, RPIPE_NEXT_FIT, &out));
    CHECK_OK(rpipe_open(ctx, peer, RPIPE_READER, width, RPIPE_HALF_DUPLEX, RPIPE_NEXT_FIT, &in));
  } else {
    CHECK_OK(rpipe_open(ctx, peer, RPIPE_READER, width, RPIPE_HALF_DUPLEX, RPIPE_NEXT_FIT, &in));
    CHECK_OK(rpipe_open(ctx, peer, RPIPE_WRITER, width, RPIPE_HALF_DUPLEX, RPIPE_NEXT_FIT, &out));
  }
  for (int i = 0; i < msgs; i++) {
    uint64_t k = salt * 100000 + (uint64_t)i;
    size_t n = (size_t)(mix64(k) % 301);
    if (me < peer) {
      send_one(out, k ^ (uint64_t)me << 40, n);
      recv_one(in, k ^ (uint64_t)peer << 40, n, "ping-pong (answer)");
    } else {
      recv_one(in, k ^ (uint64_t)peer << 40, n, "ping-pong (request)");
      send_one(out, k ^ (uint64_t)me << 40, n);
    }
  }
  if (late && (me & 1)) usleep((useconds_t)(rng_next(&rng) % 4000));
  CHECK_OK(rpipe_close(out)); /* both ranks: the outgoing pipe first */
  CHECK_OK(rpipe_close(in));
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  ctx = fh_test_init(&me, &np);
  rng = 0x1234567ULL + (uint64_t)me;
  int peer = me ^ 1;
  int paired = peer < np;
  alarm(120);

  /* a */
  if (paired) pair_round(peer, 1 << 16, 2000, 0, 1);
  MPI_Barrier(MPI_COMM_WORLD);

  /* b */
  rpipe_t **p = calloc((size_t)np, sizeof *p);
  for (int q = 0; q < np; q++)
    if (q != me) CHECK_OK(rpipe_open(ctx, q, RPIPE_BOTH, 4096, RPIPE_FULL_DUPLEX, RPIPE_FIRST_FIT, &p[q]));
  for (int q = 0; q < np; q++)
    if (q != me) send_one(p[q], (uint64_t)(me * 64 + q), (size_t)(me * 7 + q) % 200);
  for (int q = 0; q < np; q++)
    if (q != me) recv_one(p[q], (uint64_t)(q * 64 + me), (size_t)(q * 7 + me) % 200, "all-to-all");
  int *order = malloc(sizeof(int) * (size_t)np);
  for (int i = 0; i < np; i++) order[i] = i;
  for (int i = np - 1; i > 0; i--) {
    int j = (int)(rng_next(&rng) % (uint64_t)(i + 1));
    int t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  for (int i = 0; i < np; i++)
    if (order[i] != me) CHECK_OK(rpipe_close(p[order[i]]));
  free(order);
  free(p);
  MPI_Barrier(MPI_COMM_WORLD);

  /* c */
  if (paired)
    for (int c = 0; c < 12; c++) pair_round(peer, (size_t)9 << 20, 20, 1, 2 + (uint64_t)c);
  MPI_Barrier(MPI_COMM_WORLD);

  alarm(0);
  CHECK_OK(fh_finalize(ctx));
  if (me == 0) printf("test_rpipe_close_order: ok (%d ranks)\n", np);
  MPI_Finalize();
  return 0;
}
