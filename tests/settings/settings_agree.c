/* One run of the per-rank settings test (scripts/test-settings.sh): the script gives
 * even and odd ranks different values of one FH_* setting. Each rank prints one
 * verdict line: "INIT_FAILED <message>" if fh_init refused, or "WORKS" after a
 * workout that uses every part a setting could break (firehose puts and gets into
 * plain memory, heap puts, AMs of every size class, a barrier, a broadcast, an
 * allreduce). With "--scopes", prints fh_config_print(NULL) instead. */
#include "common.h"
#include <unistd.h>

#define BIG (100 * 1024)

static int got;
static void on_req(fh_token_t *t, void *buf, size_t n, const uint64_t *a, size_t na, void *u) {
  (void)buf; (void)u; (void)na;
  fh_am_reply_short(t, 201, a, 1);
  (void)n;
}
static void on_rep(fh_token_t *t, void *buf, size_t n, const uint64_t *a, size_t na, void *u) {
  (void)t; (void)buf; (void)n; (void)na; (void)u;
  got += (int)a[0];
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  fh_test_rank = rank;
  if (argc > 1 && strcmp(argv[1], "--scopes") == 0) {
    if (rank == 0) fh_config_print(NULL);
    MPI_Finalize();
    return 0;
  }
  fh_ctx_t *ctx;
  int rc = fh_init(MPI_COMM_WORLD, NULL, &ctx);
  if (rc != FH_OK) {
    char msg[512];
    fh_last_error(msg, sizeof msg);
    printf("rank %d: INIT_FAILED (%d) %s\n", rank, rc, msg);
    fflush(stdout);
    MPI_Finalize();
    return 0;
  }
  int peer = (rank + 1) % n, from = (rank + n - 1) % n;
  /* Firehose: plain memory of the next rank, two sizes. */
  char *plain = malloc(BIG), *src = malloc(BIG), *back = malloc(BIG);
  memset(plain, 0, BIG);
  for (int i = 0; i < BIG; i++) src[i] = (char)(i * 7 + rank);
  void **all = malloc(sizeof(void *) * (size_t)n);
  exchange_ptrs(plain, all, MPI_COMM_WORLD);
  CHECK_OK(fh_put(ctx, peer, all[peer], src, BIG));
  CHECK_OK(fh_get(ctx, back, peer, all[peer], BIG));
  CHECK(memcmp(src, back, BIG) == 0, "firehose put/get round trip");
  CHECK_OK(fh_put(ctx, peer, (char *)all[peer] + 5, src, 8));
  /* Heap. */
  uint64_t *h = fh_malloc(ctx, 4096);
  CHECK(h != NULL, "fh_malloc");
  exchange_ptrs(h, all, MPI_COMM_WORLD);
  uint64_t v = 1000 + (uint64_t)rank;
  CHECK_OK(fh_put(ctx, peer, all[peer], &v, 8));
  /* AMs: short, medium (the largest every rank can take), long into the heap. */
  CHECK_OK(fh_am_register(ctx, 200, on_req, NULL));
  CHECK_OK(fh_am_register(ctx, 201, on_rep, NULL));
  MPI_Barrier(MPI_COMM_WORLD);
  uint64_t one = 1;
  size_t med = fh_am_max_medium(ctx);
  char *mbuf = calloc(1, med);
  CHECK_OK(fh_am_request_short(ctx, peer, 200, &one, 1));
  CHECK_OK(fh_am_request_medium(ctx, peer, 200, mbuf, med, &one, 1));
  CHECK_OK(fh_am_request_long(ctx, peer, 200, mbuf, 512, (char *)all[peer] + 512, &one, 1));
  double t0 = fh_test_now();
  while (got < 3) {
    CHECK_OK(fh_poll(ctx));
    CHECK(fh_test_now() - t0 < 30, "AM replies: %d of 3", got);
  }
  CHECK_OK(fh_barrier(ctx));
  CHECK(h[0] == 1000 + (uint64_t)from, "heap word %lu", (unsigned long)h[0]);
  /* Collectives. */
  uint64_t b = rank == 0 ? 42 : 0, s = 1, sum = 0;
  CHECK_OK(fh_broadcast(ctx, 0, &b, 8));
  CHECK(b == 42, "broadcast");
  CHECK_OK(fh_allreduce(ctx, &s, &sum, 1, FH_UINT64, FH_SUM));
  CHECK(sum == (uint64_t)n, "allreduce %lu", (unsigned long)sum);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK_OK(fh_finalize(ctx));
  printf("rank %d: WORKS\n", rank);
  fflush(stdout);
  MPI_Finalize();
  return 0;
}
