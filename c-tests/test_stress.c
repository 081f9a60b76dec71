/* Stress: a random mix of blocking / nb / nbi puts and gets and medium AMs from every
 * rank to every rank, on heap and registered memory, then an exact check.
 * Each rank owns a column of every target's arrays (so writes never race) and keeps
 * a shadow of what it last wrote there; gets are checked against the shadow as they
 * complete, AM payload sums are checked in the handler and totals at the end.
 * FH_STRESS_OPS sets the operations per rank (default 20000; 10^6 total: 125000 at
 * 8 ranks). */
#include "common.h"

#define SLOTS 64 /* per (target, owner) column */
#define H_ADD 150
#define H_ACK 151

static uint64_t am_sum_in, am_count_in, acks;
static void h_add(fh_token_t *t, void *buf, size_t n, const uint64_t *a, size_t na, void *u) {
  (void)u;
  uint64_t s = 0;
  for (size_t i = 0; i < n; i++) s += ((unsigned char *)buf)[i];
  if (na != 1 || s != a[0]) { fprintf(stderr, "AM payload checksum mismatch\n"); abort(); }
  am_sum_in += s;
  am_count_in++;
  fh_am_reply_short(t, H_ACK, NULL, 0);
}
static void h_ack(fh_token_t *t, void *b, size_t n, const uint64_t *a, size_t na, void *u) {
  (void)t; (void)b; (void)n; (void)a; (void)na; (void)u;
  acks++;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int me, np;
  fh_ctx_t *ctx = fh_test_init(&me, &np);
  long ops = getenv("FH_STRESS_OPS") ? atol(getenv("FH_STRESS_OPS")) : 20000;
  CHECK_OK(fh_am_register(ctx, H_ADD, h_add, NULL));
  CHECK_OK(fh_am_register(ctx, H_ACK, h_ack, NULL));

  size_t cells = (size_t)np * SLOTS; /* one column per owner */
  uint64_t *heap = fh_malloc(ctx, cells * 8);
  uint64_t *user = calloc(cells, 8);
  CHECK(heap && user, "allocation");
  memset(heap, 0, cells * 8);
  CHECK_OK(fh_mem_register(ctx, user, cells * 8));
  void **heaps = malloc(sizeof(void *) * (size_t)np), **users = malloc(sizeof(void *) * (size_t)np);
  exchange_ptrs(heap, heaps, MPI_COMM_WORLD);
  exchange_ptrs(user, users, MPI_COMM_WORLD);
  /* shadow[g][t][s]: what this rank last wrote into column `me` of target t. */
  uint64_t *shadow = calloc(2 * cells, 8);
  CHECK_OK(fh_barrier(ctx));

  uint64_t seed = 0x9e3779b97f4a7c15ULL ^ (uint64_t)me * 1000003;
  enum { MAXH = 64, MAXNBI = 256 };
  fh_handle_t hs[MAXH];
  uint64_t srcv[MAXH], getv[MAXH], *gsh[MAXH];
  uint64_t nbi_src[MAXNBI];
  unsigned char *busy = calloc(2 * cells, 1); /* cell has an incomplete nb/nbi op */
  int nh = 0, nbi = 0;
  uint64_t am_sent = 0, am_sum_out = 0;
  long n_put = 0, n_get = 0, n_am = 0, n_sync = 0;
#define SYNC_ALL()                                                                  \
  do {                                                                              \
    CHECK_OK(fh_wait_all(ctx, hs, (size_t)nh));                                     \
    for (int i_ = 0; i_ < nh; i_++)                                                 \
      if (gsh[i_]) CHECK(getv[i_] == *gsh[i_], "nb get returned %llx, expected %llx", \
                         (unsigned long long)getv[i_], (unsigned long long)*gsh[i_]); \
    CHECK_OK(fh_wait_nbi(ctx, FH_NBI_ALL));                                         \
    nh = 0; nbi = 0; n_sync++;                                                      \
    memset(busy, 0, 2 * cells);                                                     \
  } while (0)
  for (long k = 0; k < ops; k++) {
    uint64_t r = rng_next(&seed);
    int t = (int)(r % (uint64_t)np);
    int g = (int)((r >> 8) & 1);
    int s = (int)((r >> 9) % SLOTS);
    size_t cell = (size_t)me * SLOTS + (size_t)s;
    size_t sidx = (size_t)g * cells + (size_t)t * SLOTS + (size_t)s;
    uint64_t *remote = (uint64_t *)(g ? users[t] : heaps[t]) + cell;
    uint64_t *sh = &shadow[sidx];
    uint64_t v = rng_next(&seed) | 1;
    int kind = (int)((r >> 20) % 8);
    /* Operations on one cell are ordered by completing earlier ones first. */
    if (kind != 7 && (busy[sidx] || nh == MAXH || nbi == MAXNBI)) SYNC_ALL();
    switch (kind) {
    case 0: case 1: /* blocking put */
      CHECK_OK(fh_put(ctx, t, remote, &v, 8));
      *sh = v; n_put++;
      break;
    case 2: { /* blocking get, checked now */
      uint64_t x = 0;
      CHECK_OK(fh_get(ctx, &x, t, remote, 8));
      CHECK(x == *sh, "get from rank %d slot %d: %llx, expected %llx", t, s, (unsigned long long)x,
            (unsigned long long)*sh);
      n_get++;
      break;
    }
    case 3: case 4: /* nb put */
      srcv[nh] = v; gsh[nh] = NULL;
      CHECK_OK(fh_put_nb(ctx, t, remote, &srcv[nh], 8, &hs[nh]));
      nh++; busy[sidx] = 1; *sh = v; n_put++;
      break;
    case 5: /* nb get, checked when it completes */
      gsh[nh] = sh;
      CHECK_OK(fh_get_nb(ctx, &getv[nh], t, remote, 8, &hs[nh]));
      nh++; busy[sidx] = 1; n_get++;
      break;
    case 6: /* nbi put */
      nbi_src[nbi] = v;
      CHECK_OK(fh_put_nbi(ctx, t, remote, &nbi_src[nbi], 8));
      nbi++; busy[sidx] = 1; *sh = v; n_put++;
      break;
    case 7: { /* medium AM with a checksum */
      unsigned char p[200];
      size_t n = (size_t)(r >> 32) % sizeof p;
      uint64_t sum = 0;
      for (size_t i = 0; i < n; i++) { p[i] = (unsigned char)(rng_next(&seed)); sum += p[i]; }
      CHECK_OK(fh_am_request_medium(ctx, t, H_ADD, p, n, &sum, 1));
      am_sent++; am_sum_out += sum; n_am++;
      break;
    }
    }
    if (k % 50000 == 49999 && me == 0) { printf("  %ld / %ld ops per rank\n", k + 1, ops); fflush(stdout); }
  }
  SYNC_ALL();
  while (acks < am_sent) CHECK_OK(fh_poll(ctx));
  CHECK_OK(fh_barrier(ctx));

  /* Every column of every target holds exactly what its owner last wrote. */
  for (int g = 0; g < 2; g++)
    for (int t = 0; t < np; t++) {
      uint64_t col[SLOTS];
      uint64_t *remote = (uint64_t *)(g ? users[t] : heaps[t]) + (size_t)me * SLOTS;
      CHECK_OK(fh_get(ctx, col, t, remote, sizeof col));
      for (int s = 0; s < SLOTS; s++)
        CHECK(col[s] == shadow[(size_t)g * cells + (size_t)t * SLOTS + (size_t)s],
              "final: rank %d %s slot %d holds %llx", t, g ? "user" : "heap", s, (unsigned long long)col[s]);
    }
  /* AM totals across the job. */
  uint64_t mine[4] = {am_sent, am_sum_out, am_count_in, am_sum_in}, tot[4];
  MPI_Allreduce(mine, tot, 4, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  CHECK(tot[0] == tot[2] && tot[1] == tot[3], "AMs: sent %llu (sum %llu), handled %llu (sum %llu)",
        (unsigned long long)tot[0], (unsigned long long)tot[1], (unsigned long long)tot[2], (unsigned long long)tot[3]);
  long all[3] = {n_put, n_get, n_am}, alltot[3];
  MPI_Allreduce(all, alltot, 3, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (me == 0)
    printf("stress: %ld ops on %d ranks (%ld puts, %ld gets, %ld AMs; rank 0 synced %ld times), all checked\n",
           alltot[0] + alltot[1] + alltot[2], np, alltot[0], alltot[1], alltot[2], n_sync);
  CHECK_OK(fh_barrier(ctx));
  CHECK_OK(fh_mem_unregister(ctx, user, cells * 8));
  CHECK_OK(fh_finalize(ctx));
  TEST_PASS("stress");
  free(user); free(shadow); free(heaps); free(users); free(busy);
  MPI_Finalize();
  return 0;
}
