/* rpipe in a ring, as a stranger writes it from the header: each rank writes to
 * its right neighbour and reads from its left. Opens pair in call order, so even
 * ranks open right first and odd ranks left first (the header's rule). The writer
 * uses rpipe_try_rmalloc and drains its own reader while its pipe is full. Each
 * rank closes its writing end as soon as it has written everything, before it has
 * read everything: with a close that waited for the peer's close, the ring of
 * waits would hang the job. 5000 messages of 8..207 bytes per pipe, each checked
 * (sequence, length, every byte). Argument "pull" uses RPIPE_PULL; a second
 * argument picks the policy. Run: mpirun -np 2|4|8 test_rpipe_ring */
#include "common.h"

#define NMSG 5000

static int me;
static long nread;

static size_t msg_len(uint64_t seq, int src) { return 8 + (size_t)(mix64(seq * 64 + (uint64_t)src) % 200); }

/* Take what has arrived (one message when `block`). */
static void drain(rpipe_t *rd, int left, int block) {
  for (;;) {
    if (nread == NMSG) return; /* the writer closed: the next read would be FH_ERR_STATE */
    rpipe_addr_t a;
    size_t len;
    int rc = block ? rpipe_rread(rd, &a, &len) : rpipe_try_rread(rd, &a, &len);
    if (rc == FH_NOT_READY) return;
    CHECK_OK(rc);
    const unsigned char *m = rpipe_rmem(rd, a);
    CHECK(m != NULL, "rpipe_rmem of message %ld is NULL", nread);
    uint64_t seq;
    memcpy(&seq, m, 8);
    CHECK(seq == (uint64_t)nread, "message %ld carries sequence %llu", nread, (unsigned long long)seq);
    CHECK(len == msg_len(seq, left), "message %ld: %zu bytes, expected %zu", nread, len, msg_len(seq, left));
    for (size_t i = 8; i < len; i++)
      CHECK(m[i] == (unsigned char)(seq + i + (uint64_t)left), "message %ld: byte %zu", nread, i);
    CHECK_OK(rpipe_rfree(rd, a));
    nread++;
    if (block) return;
  }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int n;
  fh_ctx_t *ctx = fh_test_init(&me, &n);
  int mode = (argc > 1 && !strcmp(argv[1], "pull")) ? RPIPE_PULL : 0;
  int policy = argc > 2 ? atoi(argv[2]) : RPIPE_NEXT_FIT;
  size_t width = 16 << 10;
  int right = (me + 1) % n, left = (me + n - 1) % n;
  alarm(120);
  if (n == 1) {
    if (me == 0) printf("SKIP test_rpipe_ring: needs 2 ranks\n");
    CHECK_OK(fh_finalize(ctx));
    MPI_Finalize();
    return 0;
  }
  rpipe_t *wr, *rd;
  if (me % 2 == 0) {
    CHECK_OK(rpipe_open(ctx, right, RPIPE_WRITER, width, RPIPE_HALF_DUPLEX | mode, policy, &wr));
    CHECK_OK(rpipe_open(ctx, left, RPIPE_READER, width, RPIPE_HALF_DUPLEX | mode, policy, &rd));
  } else {
    CHECK_OK(rpipe_open(ctx, left, RPIPE_READER, width, RPIPE_HALF_DUPLEX | mode, policy, &rd));
    CHECK_OK(rpipe_open(ctx, right, RPIPE_WRITER, width, RPIPE_HALF_DUPLEX | mode, policy, &wr));
  }
  for (uint64_t seq = 0; seq < NMSG; seq++) {
    size_t len = msg_len(seq, me);
    rpipe_addr_t a;
    int rc;
    while ((rc = rpipe_try_rmalloc(wr, len, &a)) == FH_NOT_READY) drain(rd, left, 0);
    CHECK_OK(rc);
    unsigned char *m = rpipe_rmem(wr, a);
    CHECK(m != NULL, "rpipe_rmem of a fresh allocation is NULL");
    memcpy(m, &seq, 8);
    for (size_t i = 8; i < len; i++) m[i] = (unsigned char)(seq + i + (uint64_t)me);
    CHECK_OK(rpipe_rwrite(wr, a));
    drain(rd, left, 0);
  }
  CHECK_OK(rpipe_close(wr)); /* before reading the rest */
  while (nread < NMSG) drain(rd, left, 1);
  CHECK_OK(rpipe_close(rd));
  MPI_Barrier(MPI_COMM_WORLD);
  alarm(0);
  CHECK_OK(fh_finalize(ctx));
  if (me == 0) printf("test_rpipe_ring: ok (%d ranks, mode %d, policy %d)\n", n, mode, policy);
  MPI_Finalize();
  return 0;
}
