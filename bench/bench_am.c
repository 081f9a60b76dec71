/* bench_am.c -- firehose active messages against MPI two-sided messaging.
 * Run on exactly 2 ranks.
 *
 * 1. Short AM round trip: rank 0 sends fh_am_request_short (1 argument) to rank 1,
 *    whose handler answers with fh_am_reply_short; rank 0 polls with fh_poll until
 *    the reply handler ran. Baseline: an 8-byte MPI_Send/MPI_Recv ping-pong.
 *    Batches of round trips of each kind alternate; every round trip is timed and
 *    the medians are compared.
 * 2. Medium AM throughput: rank 0 streams M fh_am_request_medium of a payload size
 *    to rank 1 (credit flow control applies); the handler of the last one replies
 *    and the stream ends when rank 0 has that reply. Baseline: rank 1 pre-posts M
 *    matching MPI_Irecv, rank 0 streams M MPI_Isend (+ MPI_Waitall) and waits for a
 *    0-byte reply. Streams alternate; medians over repetitions.
 *
 * Usage: bench_am <outdir>   (writes <outdir>/bench_am.csv) */
#include "bench.h"

enum { H_PING = 128, H_PONG, H_SINK, H_DONE };
enum { TAG_PING = 10, TAG_STREAM = 11, TAG_DONE = 12 };

static fh_ctx_t *ctx;
static volatile uint64_t pings_handled, pongs, sunk, dones;
static uint64_t pings_expected;
static volatile uint64_t sink_bytes;

static void on_ping(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  (void)buf; (void)nbytes; (void)user;
  pings_handled++;
  int rc = fh_am_reply_short(tok, H_PONG, args, nargs);
  if (rc != FH_OK) BENCH_DIE("fh_am_reply_short -> %s", fh_strerror(rc));
}
static void on_pong(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  (void)tok; (void)buf; (void)nbytes; (void)args; (void)nargs; (void)user;
  pongs++;
}
/* Medium sink: count; the message flagged last (args[0] == 1) is answered. */
static void on_sink(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  (void)user;
  sunk++;
  sink_bytes += nbytes;
  if (nbytes > 0 && ((const unsigned char *)buf)[nbytes - 1] != (unsigned char)(nbytes * 13 + 5))
    BENCH_DIE("medium payload of %zu bytes corrupted", nbytes);
  if (nargs == 1 && args[0] == 1) {
    uint64_t n = sunk;
    int rc = fh_am_reply_short(tok, H_DONE, &n, 1);
    if (rc != FH_OK) BENCH_DIE("fh_am_reply_short -> %s", fh_strerror(rc));
  }
}
static void on_done(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  (void)tok; (void)buf; (void)nbytes; (void)args; (void)nargs; (void)user;
  dones++;
}

int main(int argc, char **argv) {
  int level = bench_mpi_init(&argc, &argv);
  int nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &bench_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  const char *outdir = argc > 1 ? argv[1] : ".";
  if (nranks != 2) {
    if (bench_rank == 0) fprintf(stderr, "bench_am: run on exactly 2 ranks (got %d)\n", nranks);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  FHB(fh_init(MPI_COMM_WORLD, NULL, &ctx));
  FHB(fh_am_register(ctx, H_PING, on_ping, NULL));
  FHB(fh_am_register(ctx, H_PONG, on_pong, NULL));
  FHB(fh_am_register(ctx, H_SINK, on_sink, NULL));
  FHB(fh_am_register(ctx, H_DONE, on_done, NULL));
  bench_poll_barrier(ctx);
  const int me = bench_rank, peer = 1 - me;
  FILE *csv = me == 0 ? bench_csv_open(outdir, "bench_am") : NULL;
  double crossing = bench_line_crossing_ns();
  if (me == 0)
    printf("== bench_am: MPI thread level %s; a cache line crosses between the two ranks in %.0f ns\n",
           bench_thread_name(level), crossing);
  char sz[32];

  /* ------------------------------------------------ 1. short round trip */
  const int RTT_ITERS = 50000, RB = 100;
  samples_t sf, sm;
  samples_init(&sf, RTT_ITERS);
  samples_init(&sm, RTT_ITERS);
  bench_progress("AM short round trip vs MPI_Send/MPI_Recv: %d round trips each", RTT_ITERS);
  uint64_t x = 0, mbuf = 0;
  for (int warm = 1; warm >= 0; warm--) {
    int iters = warm ? 1000 : RTT_ITERS;
    samples_reset(&sf);
    samples_reset(&sm);
    for (int done = 0, round = 0; done < iters; done += RB, round++) {
      for (int k = 0; k < 2; k++) {
        int fh_side = (k + round) % 2 == 0;
        for (int j = 0; j < RB; j++) {
          if (me == 0) {
            double t0 = bench_now();
            if (fh_side) {
              uint64_t want = pongs + 1;
              x++;
              FHB(fh_am_request_short(ctx, 1, H_PING, &x, 1));
              while (pongs < want) FHB(fh_poll(ctx));
            } else {
              MPIB(MPI_Send(&x, 8, MPI_BYTE, 1, TAG_PING, MPI_COMM_WORLD));
              MPIB(MPI_Recv(&mbuf, 8, MPI_BYTE, 1, TAG_PING, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            }
            samples_add(fh_side ? &sf : &sm, bench_now() - t0);
          } else {
            if (fh_side) {
              /* Count cumulatively: one fh_poll may run two ping handlers (the next
               * ping can arrive while this rank is still delivering), so waiting for
               * "one more than now" would wait for a ping of a later block. */
              uint64_t want = ++pings_expected;
              while (pings_handled < want) FHB(fh_poll(ctx));
            } else {
              MPIB(MPI_Recv(&mbuf, 8, MPI_BYTE, 0, TAG_PING, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
              MPIB(MPI_Send(&mbuf, 8, MPI_BYTE, 0, TAG_PING, MPI_COMM_WORLD));
            }
          }
        }
      }
    }
  }
  if (me == 0) {
    bench_row_t r = {"am_short_rtt", "MPI_Send+MPI_Recv ping-pong (8 B)", 8, 0, 0, samples_mean(&sf) * 1e6,
                     samples_mean(&sm) * 1e6, sf.n};
    r.fh_us = samples_median(&sf) * 1e6;
    r.base_us = samples_median(&sm) * 1e6;
    bench_csv_row(csv, &r);
    printf("== bench_am: short AM round trip (request_short -> handler reply_short -> fh_poll sees reply)\n"
           "   vs 8-byte MPI_Send/MPI_Recv ping-pong; median of %d round trips each (mean in brackets)\n",
           RTT_ITERS);
    printf("   fh AM %.2f us (%.2f)   MPI %.2f us (%.2f)   ratio fh/MPI %.2f\n\n", r.fh_us, r.fh_mean_us, r.base_us,
           r.base_mean_us, r.fh_us / r.base_us);
    fflush(stdout);
  }
  samples_free(&sf);
  samples_free(&sm);
  bench_poll_barrier(ctx);

  /* ------------------------------------------------ 2. medium throughput */
  size_t maxm = fh_am_max_medium(ctx);
  size_t sizes[16];
  int nsizes = 0;
  for (size_t n = 64; n < maxm && nsizes < 15; n *= 4) sizes[nsizes++] = n;
  sizes[nsizes++] = maxm;
  const size_t STREAM_BYTES = (size_t)32 << 20;
  unsigned char *payload = malloc(maxm);
  unsigned char *rbuf = malloc(STREAM_BYTES + maxm);
  MPI_Request *reqs = malloc(sizeof(MPI_Request) * 4096);
  /* A real status array (MPICH's MPI_STATUSES_IGNORE trips GCC's access checks). */
  MPI_Status *stats = malloc(sizeof(MPI_Status) * 4096);
  if (!payload || !rbuf || !reqs || !stats) BENCH_DIE("out of memory");
  samples_init(&sf, 64);
  samples_init(&sm, 64);
  if (me == 0) {
    printf("== bench_am: medium AM stream (M x fh_am_request_medium, last handler replies) vs M x MPI_Isend\n"
           "   into pre-posted MPI_Irecv + 0-byte reply; median over repetitions; ratio = time fh / time MPI\n");
    printf("%8s %6s %10s %10s %7s %11s %11s %9s %9s\n", "payload", "M", "fh us/msg", "MPI us/msg", "ratio", "fh msg/s",
           "MPI msg/s", "fh MB/s", "MPI MB/s");
  }
  for (int k = 0; k < nsizes; k++) {
    size_t n = sizes[k];
    int M = (int)(STREAM_BYTES / n);
    if (M > 4096) M = 4096;
    if (M > 2000) M = 2000;
    int reps = n >= 16384 ? 21 : 41;
    bench_progress("medium stream of %d x %s: %d repetitions each", M, bench_size_str(n, sz, sizeof sz), reps);
    for (size_t i = 0; i < n; i++) payload[i] = (unsigned char)(n * 13 + 5);
    samples_reset(&sf);
    samples_reset(&sm);
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up of both */
      for (int kk = 0; kk < 2; kk++) {
        int fh_side = (kk + r + 1) % 2 == 0;
        double t = 0;
        if (fh_side) {
          uint64_t start_sunk = sunk, want_done = dones + 1;
          bench_poll_barrier(ctx);
          if (me == 0) {
            double t0 = bench_now();
            for (int i = 0; i < M; i++) {
              uint64_t last = i == M - 1;
              FHB(fh_am_request_medium(ctx, peer, H_SINK, payload, n, &last, 1));
            }
            while (dones < want_done) FHB(fh_poll(ctx));
            t = bench_now() - t0;
          } else {
            while (sunk < start_sunk + (uint64_t)M) FHB(fh_poll(ctx));
          }
        } else {
          if (me == 1)
            for (int i = 0; i < M; i++)
              MPIB(MPI_Irecv(rbuf + (size_t)i * n, (int)n, MPI_BYTE, 0, TAG_STREAM, MPI_COMM_WORLD, &reqs[i]));
          bench_poll_barrier(ctx);
          if (me == 0) {
            double t0 = bench_now();
            for (int i = 0; i < M; i++)
              MPIB(MPI_Isend(payload, (int)n, MPI_BYTE, 1, TAG_STREAM, MPI_COMM_WORLD, &reqs[i]));
            MPIB(MPI_Waitall(M, reqs, stats));
            MPIB(MPI_Recv(NULL, 0, MPI_BYTE, 1, TAG_DONE, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            t = bench_now() - t0;
          } else {
            MPIB(MPI_Waitall(M, reqs, stats));
            if (rbuf[(size_t)(M - 1) * n + n - 1] != (unsigned char)(n * 13 + 5)) BENCH_DIE("MPI stream data wrong");
            MPIB(MPI_Send(NULL, 0, MPI_BYTE, 0, TAG_DONE, MPI_COMM_WORLD));
          }
        }
        if (me == 0 && r >= 0) samples_add(fh_side ? &sf : &sm, t);
      }
    }
    if (me == 0) {
      bench_row_t row = {"am_medium_stream", "MPI_Isend stream into pre-posted MPI_Irecv", n, 0, 0,
                         samples_mean(&sf) * 1e6 / M, samples_mean(&sm) * 1e6 / M, sf.n};
      row.fh_us = samples_median(&sf) * 1e6 / M;
      row.base_us = samples_median(&sm) * 1e6 / M;
      bench_csv_row(csv, &row);
      printf("%8s %6d %10.3f %10.3f %7.2f %11.0f %11.0f %9.1f %9.1f\n", bench_size_str(n, sz, sizeof sz), M, row.fh_us,
             row.base_us, row.fh_us / row.base_us, 1e6 / row.fh_us, 1e6 / row.base_us, bench_mbps(n, row.fh_us),
             bench_mbps(n, row.base_us));
      fflush(stdout);
    }
  }
  if (me == 1 && sink_bytes == 0) BENCH_DIE("no medium payload arrived");
  samples_free(&sf);
  samples_free(&sm);
  free(payload);
  free(rbuf);
  free(reqs);
  free(stats);
  if (csv) fclose(csv);
  FHB(fh_finalize(ctx));
  if (me == 0) printf("bench_am: done (CSV in %s/bench_am.csv)\n", outdir);
  MPI_Finalize();
  return 0;
}
