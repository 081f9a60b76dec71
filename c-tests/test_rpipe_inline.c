/* rpipe messages around the sizes where the library changes how it carries them, as a
 * stranger writes it from the header: plain MPI_Init, MPI_Barrier, no fh_barrier.
 *
 * Pairs (0-1, 2-3, ...; an odd last rank sits out) open one full-duplex pipe in push
 * mode and one in pull mode, 16 KiB wide. In each of 60 rounds both ends write one
 * message of every size in SIZES (0 to 1000 bytes: around 48, 64 and 112 and past
 * them), then read the peer's, holding every message of the round until all are read
 * and checked byte for byte, then free them in a shuffled order. The pipe's notice
 * ring has 256 slots, so it wraps 4 times while messages are held. (At 4 KiB a round
 * (2944 bytes of extents) does not fit beside the previous one, which the peer frees
 * only after writing its own next round: both writers wait in rpipe_rmalloc, and the
 * library reports the stall after FH_STALL_WARN seconds.)
 * Run: mpirun -np 2|4|8 test_rpipe_inline */
#include "common.h"

static const size_t SIZES[] = {0, 1, 7, 8, 47, 48, 49, 63, 64, 65, 95, 111, 112, 113, 127, 128, 129, 200, 1000};
#define NSIZES (sizeof SIZES / sizeof SIZES[0])
#define ROUNDS 60

static int me, np;

static unsigned char byte_of(uint64_t key, size_t i) { return (unsigned char)(mix64(key * 1009 + i) >> 23); }

static uint64_t key_of(int writer, int mode, int round, size_t k) {
  return ((uint64_t)writer << 40) ^ ((uint64_t)mode << 36) ^ ((uint64_t)round << 12) ^ k;
}

static void round_trip(rpipe_t *p, int peer, int mode, int round, uint64_t *rng) {
  for (size_t k = 0; k < NSIZES; k++) {
    rpipe_addr_t a;
    int rc = rpipe_rmalloc(p, SIZES[k], &a);
    CHECK(rc == FH_OK, "mode %d round %d: rpipe_rmalloc(%zu) returned %d (%s)", mode, round, SIZES[k], rc,
          fh_strerror(rc));
    unsigned char *m = rpipe_rmem(p, a);
    CHECK(m != NULL || SIZES[k] == 0, "rpipe_rmem of a fresh %zu-byte allocation is NULL", SIZES[k]);
    uint64_t key = key_of(me, mode, round, k);
    for (size_t i = 0; i < SIZES[k]; i++) m[i] = byte_of(key, i);
    CHECK_OK(rpipe_rwrite(p, a));
  }
  rpipe_addr_t held[NSIZES];
  for (size_t k = 0; k < NSIZES; k++) {
    size_t len;
    CHECK_OK(rpipe_rread(p, &held[k], &len));
    CHECK(len == SIZES[k], "mode %d round %d: message %zu has %zu bytes, expected %zu", mode, round, k, len,
          SIZES[k]);
    const unsigned char *m = rpipe_rmem(p, held[k]);
    CHECK(m != NULL || len == 0, "rpipe_rmem of a held %zu-byte message is NULL", len);
    uint64_t key = key_of(peer, mode, round, k);
    for (size_t i = 0; i < len; i++)
      CHECK(m[i] == byte_of(key, i), "mode %d round %d: %zu-byte message, byte %zu is %u, expected %u", mode,
            round, len, i, m[i], byte_of(key, i));
  }
  /* Every message still reads right after all of the round arrived. */
  for (size_t k = 0; k < NSIZES; k++) {
    const unsigned char *m = rpipe_rmem(p, held[k]);
    uint64_t key = key_of(peer, mode, round, k);
    for (size_t i = 0; i < SIZES[k]; i++)
      CHECK(m[i] == byte_of(key, i), "mode %d round %d: held %zu-byte message changed at byte %zu", mode, round,
            SIZES[k], i);
  }
  for (size_t k = NSIZES - 1; k > 0; k--) {
    size_t j = (size_t)(rng_next(rng) % (k + 1));
    rpipe_addr_t t = held[k];
    held[k] = held[j];
    held[j] = t;
  }
  for (size_t k = 0; k < NSIZES; k++) CHECK_OK(rpipe_rfree(p, held[k]));
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  fh_test_rank = me;
  alarm(120);
  fh_ctx_t *ctx;
  CHECK_OK(fh_init(MPI_COMM_WORLD, NULL, &ctx));
  int peer = me ^ 1;
  uint64_t rng = 0x9e3779b97f4a7c15ULL * (uint64_t)(me + 1);
  if (peer < np) {
    rpipe_t *push, *pull;
    CHECK_OK(rpipe_open(ctx, peer, RPIPE_BOTH, 16384, RPIPE_FULL_DUPLEX, RPIPE_NEXT_FIT, &push));
    CHECK_OK(rpipe_open(ctx, peer, RPIPE_BOTH, 16384, RPIPE_FULL_DUPLEX | RPIPE_PULL, RPIPE_NEXT_FIT, &pull));
    for (int r = 0; r < ROUNDS; r++) {
      round_trip(push, peer, 0, r, &rng);
      round_trip(pull, peer, 1, r, &rng);
      if (r % 10 == 9) MPI_Barrier(MPI_COMM_WORLD);
    }
    CHECK_OK(rpipe_close(push));
    CHECK_OK(rpipe_close(pull));
  } else {
    for (int r = 0; r < ROUNDS; r++)
      if (r % 10 == 9) MPI_Barrier(MPI_COMM_WORLD);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  alarm(0);
  CHECK_OK(fh_finalize(ctx));
  if (me == 0) printf("test_rpipe_inline: ok (%d ranks, %zu sizes x %d rounds x 2 modes per pair)\n", np, NSIZES, ROUNDS);
  MPI_Finalize();
  return 0;
}
