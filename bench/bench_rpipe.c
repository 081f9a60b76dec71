/* bench_rpipe.c -- rpipe (issue 5, seed 003) against the MPI ways of doing the same.
 *
 * Usage: bench_rpipe <mode> [outdir]          (outdir default "."; modes below)
 * Run (Open MPI; scripts/run-bench.sh does this, see its rpipe section):
 *   mpirun -np 2 bench_rpipe lat out
 *   mpirun -np 2 bench_rpipe policy out
 *   mpirun -np 2|4|8 bench_rpipe random out
 *   mpirun -np 2 bench_rpipe calls out
 * Every result is a time measured in the same launch as its baselines, reported with
 * the ratio rpipe / baseline (> 1: rpipe is slower). Nothing here asserts a timing;
 * what is checked (aborting on failure) is the data: every message's length, first
 * and last byte (and order, where the transport promises it).
 *
 *  lat     2 ranks. Ping-pong latency = half the round trip, median of many round
 *          trips, per message size (8 B, 64 B, 512 B, 4 KiB, 64 KiB, 1 MiB).
 *          Variants, interleaved in batches of RB round trips (rotating which goes
 *          first) after a warm-up of each:
 *           push   rpipe: the sender rpipe_rmalloc's a FRESH allocation for every
 *                  message (nothing is reused: that is the point), writes its first
 *                  and last byte through rpipe_rmem and rpipe_rwrite's it over pipe A
 *                  (0 -> 1, half duplex, next fit, width 4 MiB); the receiver
 *                  rpipe_rread's (blocking), checks the two bytes, rpipe_rfree's, and
 *                  answers the same way over pipe B (1 -> 0).
 *           pull   the same on two pipes opened with RPIPE_PULL (rwrite posts only
 *                  the notice, rread fetches the bytes by RDMA get).
 *           pushT  diagnostic: push, but the receiver spins on rpipe_try_rread instead
 *                  of the blocking rpipe_rread (which polls AMs and yields the CPU
 *                  between looks at its notice ring).
 *           2PUT   (a) MPI_Put of the data into the peer's MPI_Win_create window
 *                  (the window kind the library's heap uses), MPI_Win_flush, MPI_Put
 *                  of an 8-byte flag (incrementing sequence number), MPI_Win_flush,
 *                  all in one MPI_Win_lock_all epoch; the receiver polls the flag in
 *                  its own window memory (atomic load + MPI_Win_sync), then checks
 *                  the data and answers the same way.
 *           2PUTr  2PUT with source and target offsets advancing through 4 MiB as
 *                  rpipe's next fit places fresh allocations (same memory traffic as
 *                  push: cache-cold buffers for large messages).
 *           2PUTa  informational: 2PUT on an MPI_Win_allocate window (on one node
 *                  Open MPI gives that to osc/sm, plain shared memory; the library's
 *                  heap is an MPI_Win_create window, which goes through osc/rdma).
 *           S/R    (b) MPI_Send / MPI_Recv ping-pong (the receiver's buffer is fixed).
 *           lock   (c) what runtimes do today: per message MPI_Win_lock(EXCLUSIVE,
 *                  peer) + MPI_Put + MPI_Win_unlock, then the event: MPI_Win_lock(
 *                  SHARED, peer) + MPI_Accumulate(+1, MPI_SUM, an int64 counter) +
 *                  MPI_Win_unlock (each in its own lock/unlock, no lock_all epoch);
 *                  the receiver polls the counter with a local atomic load +
 *                  MPI_Win_sync on its own MPI_Win_create window, outside any epoch
 *                  (allowed by Open MPI; if MPI_Win_sync refuses, the program says so
 *                  and polls with a plain acquire load + full fence instead).
 *          Sender and receiver both touch exactly the first and last byte in every
 *          variant. Target (docs/PERFORMANCE.md): push <= 1.0 x 2PUT at every size,
 *          and faster than Send/Recv up to 4 KiB.
 *          BENCH_RPIPE_LAT_ITERS (default 10000) round trips per variant for small
 *          sizes (fewer for large ones, at least 300); BENCH_RPIPE_LAT_SIZES (e.g. "8 64K")
 *          measures a subset of the sizes. CSV: bench_rpipe_lat.csv.
 *
 *  policy  2 ranks, the four allocation policies on ONE randomized trace: rank 0
 *          writes, rank 1 reads, one half-duplex push pipe per run, for each width
 *          in BENCH_RPIPE_POLICY_WIDTH (default "256K 128K": at 256 KiB the heap
 *          fragments but the writer never runs out of room; at 128 KiB it does, and
 *          how often depends on the policy). The trace (seed
 *          BENCH_RPIPE_SEED, default 3 for seed 003) has BENCH_RPIPE_POLICY_MSGS
 *          (default 20000) messages of log-uniform size 64 B .. 16 KiB, and for each
 *          a hold time: the reader keeps message i until it has read message
 *          i + hold_i (90 %: 0..8 messages, 10 %: 0..256), so frees come out of order
 *          and long-held messages pin holes in the heap. Each run opens a fresh pipe
 *          (same starting state for every policy). The writer uses
 *          rpipe_try_rmalloc; when the heap has no room for the next message even
 *          after its free sync, it tells the reader with an MPI message ("stuck")
 *          and waits for the answer: once the reader has read everything written so
 *          far, it frees its earliest-due message ahead of schedule (a "forced
 *          free") unless it freed something since the last answer, and answers (the
 *          writer retries). Without that a full heap would deadlock the trace
 *          (rmalloc waiting for a free the reader only makes after the next read).
 *          Time per message = (max over both ranks of start barrier -> last
 *          message read and freed) / messages; BENCH_RPIPE_POLICY_REPS (default 5)
 *          rounds, each running every policy once (rotating the order), medians.
 *          Then one more run per policy, not timed, in which the writer samples
 *          rpipe_stats after every rmalloc: mean and max heap_fragmentation (the
 *          writer's view of the reader's heap). rmalloc_waits and free_syncs are the
 *          writer's rpipe_stats of the timed runs (medians). Seed 003 found next fit
 *          fastest and 1 - 3.5x slowdowns for best/worst fit.
 *          CSV: bench_rpipe_policy.csv (bench.h columns, baseline = next fit),
 *          bench_rpipe_policy_detail.csv.
 *
 *  random  Any number of ranks >= 2. Every rank opens a full-duplex pipe (width
 *          64 KiB, push, next fit) to every other rank, in increasing order of peer
 *          rank on every rank (rpipe_open blocks until the peer's open arrives; with
 *          this order the lowest rank still opening always finds its next peer
 *          opening towards it too, so there is no wait cycle), and closes them in
 *          the same order. Each rank then sends BENCH_RPIPE_RANDOM_MSGS (default
 *          20000) messages of uniformly random size 8 B .. 1 KiB to uniformly random
 *          peers (seeded per rank): before every send it drains all its pipes
 *          (rpipe_try_rread until FH_NOT_READY on each, check, rpipe_rfree), then
 *          rpipe_try_rmalloc + rwrite (if the heap towards that peer is full it just
 *          goes round the loop again); when a pass over the loop found nothing to do
 *          it calls sched_yield. It stops when it has sent all its messages and
 *          received all those addressed to it (counts exchanged beforehand with
 *          MPI_Alltoall). Baseline, same trace, same loop: MPI_Isend (64 send
 *          buffers in rotation, MPI_Test before reuse) and MPI_Iprobe(ANY_SOURCE) +
 *          MPI_Recv. Time = max over ranks of start barrier -> done; reported: us
 *          per message (time / messages per rank), messages/s per rank, aggregate
 *          messages/s. BENCH_RPIPE_RANDOM_REPS (default 3) alternating repetitions
 *          of each, medians. CSV: bench_rpipe_random_np<N>.csv.
 *
 *  calls   2 ranks. The software each side runs per message, without any wait: rank 0
 *          sends a batch of BENCH_RPIPE_CALLS_BATCH (default 500) 8 B messages
 *          (rpipe_rmalloc + two bytes through rpipe_rmem + rpipe_rwrite; then, as
 *          baseline, MPI_Send of 8 B, eager, into rank 1's unexpected queue) while
 *          rank 1 waits in a barrier; then rank 1 takes the batch (rpipe_rread +
 *          rpipe_rmem + check + rpipe_rfree; baseline MPI_Recv + check) while rank 0
 *          waits. ns per message, median over BENCH_RPIPE_CALLS_ROUNDS (default 400)
 *          batches of each, interleaved. CSV: bench_rpipe_calls.csv.
 *
 * Library heap: lat needs about 16.5 MiB of FH_HEAP_SIZE per rank (four pipes of
 * width 4 MiB, each costing its width on both ends, plus rings and bitmaps), under
 * the 32M default; in lat mode the program sets FH_HEAP_SIZE=48M for headroom if it is
 * unset (before MPI_Init, so before fh_init reads it).
 * MPI thread level: MPI_Init (BENCH_MPI_THREAD=multiple: MPI_THREAD_MULTIPLE). */
#include "bench.h"
#include <math.h>
#include <sched.h>

enum { TAG_SR = 21, TAG_STUCK = 22, TAG_ACK = 23, TAG_RND = 24 };

static fh_ctx_t *ctx;
static int me, nranks;

static long env_long(const char *name, long dflt) {
  const char *s = getenv(name);
  if (!s || !*s) return dflt;
  char *end;
  long v = strtol(s, &end, 10);
  if (*end == 'K' || *end == 'k') v <<= 10;
  else if (*end == 'M' || *end == 'm') v <<= 20;
  if (v <= 0) BENCH_DIE("%s=%s: want a positive number", name, s);
  return v;
}

/* splitmix64: a small, well-mixed generator; the same seed gives the same trace on
 * every rank and every launch. */
static uint64_t rnd_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
static double rnd_unit(uint64_t *s) { return (double)(rnd_next(s) >> 11) * 0x1.0p-53; }

/* What the first and last byte of message m hold. */
static inline unsigned char pat_first(uint64_t m) { return (unsigned char)(m * 7 + 1); }
static inline unsigned char pat_last(uint64_t m) { return (unsigned char)(m * 13 + 5); }

static void check_bytes(const volatile unsigned char *c, size_t n, uint64_t m, const char *what) {
  if (c[0] != pat_first(m) || c[n - 1] != pat_last(m))
    BENCH_DIE("%s: message %llu of %zu bytes has first/last byte %u/%u, expected %u/%u", what,
              (unsigned long long)m, n, c[0], c[n - 1], pat_first(m), pat_last(m));
}

static void open_pipe(int peer, int role, size_t width, int mode, int policy, rpipe_t **p) {
  int rc = rpipe_open(ctx, peer, role, width, mode, policy, p);
  if (rc != FH_OK)
    BENCH_DIE("rpipe_open(peer %d, role %d, width %zu, mode %d, policy %d) -> %s", peer, role, width, mode, policy,
              fh_strerror(rc));
}

/* =================================================================== lat */
#define LAT_WIDTH ((size_t)4 << 20)
#define LAT_MAX ((size_t)1 << 20)
#define DATA_OFF 64 /* data after the 8-byte flag/counter, a cache line apart */
#define RB 50       /* round trips per batch */

enum { V_PUSH, V_PULL, V_PUSHT, V_2PUT, V_2PUTR, V_2PUTA, V_SR, V_LOCK, NV };
static const char *vname[NV] = {"push", "pull", "pushT", "2PUT", "2PUTr", "2PUTa", "S/R", "lock"};

static rpipe_t *out_p[2], *in_p[2]; /* [0] push, [1] pull */
static MPI_Win win2, win2r, win2a, winl;
static unsigned char *base2, *base2r, *base2a, *basel, *src, *srcr, *rbuf;
/* 2PUTr: where the next message goes in each direction (next-fit-like placement). */
static size_t rot_out, rot_in;

static size_t rot_next(size_t *next, size_t n) {
  size_t ext = (n + 63) / 64 * 64;
  if (*next + ext > LAT_WIDTH) *next = 0;
  size_t off = *next;
  *next += ext;
  return off;
}
static int64_t seq_out[NV], seq_in[NV], flag_val;
static const int64_t one = 1;
static int winl_sync_ok = 1;

static void send_msg(int v, int peer, size_t n, uint64_t m) {
  if (v == V_PUSH || v == V_PULL || v == V_PUSHT) {
    rpipe_t *p = out_p[v == V_PULL];
    rpipe_addr_t a;
    FHB(rpipe_rmalloc(p, n, &a));
    unsigned char *c = rpipe_rmem(p, a);
    if (!c) BENCH_DIE("rpipe_rmem of a fresh allocation returned NULL");
    c[0] = pat_first(m);
    c[n - 1] = pat_last(m);
    FHB(rpipe_rwrite(p, a));
    return;
  }
  if (v == V_2PUTR) {
    size_t off = rot_next(&rot_out, n);
    srcr[off] = pat_first(m);
    srcr[off + n - 1] = pat_last(m);
    MPIB(MPI_Put(srcr + off, (int)n, MPI_BYTE, peer, DATA_OFF + (MPI_Aint)off, (int)n, MPI_BYTE, win2r));
    MPIB(MPI_Win_flush(peer, win2r));
    flag_val = ++seq_out[v];
    MPIB(MPI_Put(&flag_val, 1, MPI_INT64_T, peer, 0, 1, MPI_INT64_T, win2r));
    MPIB(MPI_Win_flush(peer, win2r));
    return;
  }
  src[0] = pat_first(m);
  src[n - 1] = pat_last(m);
  switch (v) {
  case V_2PUT:
  case V_2PUTA: {
    MPI_Win w = v == V_2PUT ? win2 : win2a;
    MPIB(MPI_Put(src, (int)n, MPI_BYTE, peer, DATA_OFF, (int)n, MPI_BYTE, w));
    MPIB(MPI_Win_flush(peer, w));
    flag_val = ++seq_out[v];
    MPIB(MPI_Put(&flag_val, 1, MPI_INT64_T, peer, 0, 1, MPI_INT64_T, w));
    MPIB(MPI_Win_flush(peer, w));
    break;
  }
  case V_SR:
    MPIB(MPI_Send(src, (int)n, MPI_BYTE, peer, TAG_SR, MPI_COMM_WORLD));
    break;
  case V_LOCK:
    MPIB(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, peer, 0, winl));
    MPIB(MPI_Put(src, (int)n, MPI_BYTE, peer, DATA_OFF, (int)n, MPI_BYTE, winl));
    MPIB(MPI_Win_unlock(peer, winl));
    MPIB(MPI_Win_lock(MPI_LOCK_SHARED, peer, 0, winl));
    MPIB(MPI_Accumulate(&one, 1, MPI_INT64_T, peer, 0, 1, MPI_INT64_T, MPI_SUM, winl));
    MPIB(MPI_Win_unlock(peer, winl));
    break;
  }
}

static void lock_poll_sync(void) {
  if (winl_sync_ok) {
    if (MPI_Win_sync(winl) == MPI_SUCCESS) return;
    winl_sync_ok = 0;
    if (me == 0)
      fprintf(stderr, "bench_rpipe: MPI_Win_sync outside an epoch refused: the lock variant polls with an "
                      "acquire load + fence instead\n");
  }
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

static void recv_msg(int v, int peer, size_t n, uint64_t m) {
  switch (v) {
  case V_PUSH:
  case V_PULL: {
    rpipe_t *p = in_p[v == V_PULL];
    rpipe_addr_t a;
    size_t len;
    FHB(rpipe_rread(p, &a, &len));
    if (len != n) BENCH_DIE("rpipe_rread: %zu bytes, expected %zu", len, n);
    const unsigned char *c = rpipe_rmem(p, a);
    if (!c) BENCH_DIE("rpipe_rmem of a message just read returned NULL");
    check_bytes(c, n, m, vname[v]);
    FHB(rpipe_rfree(p, a));
    break;
  }
  case V_PUSHT: {
    rpipe_addr_t a;
    size_t len;
    int rc;
    while ((rc = rpipe_try_rread(in_p[0], &a, &len)) == FH_NOT_READY) {
    }
    if (rc != FH_OK) BENCH_DIE("rpipe_try_rread -> %s", fh_strerror(rc));
    if (len != n) BENCH_DIE("rpipe_try_rread: %zu bytes, expected %zu", len, n);
    const unsigned char *c = rpipe_rmem(in_p[0], a);
    if (!c) BENCH_DIE("rpipe_rmem of a message just read returned NULL");
    check_bytes(c, n, m, vname[v]);
    FHB(rpipe_rfree(in_p[0], a));
    break;
  }
  case V_2PUTR: {
    int64_t want = ++seq_in[v];
    size_t off = rot_next(&rot_in, n);
    while (__atomic_load_n((int64_t *)base2r, __ATOMIC_ACQUIRE) < want) MPIB(MPI_Win_sync(win2r));
    check_bytes(base2r + DATA_OFF + off, n, m, vname[v]);
    break;
  }
  case V_2PUT:
  case V_2PUTA: {
    unsigned char *b = v == V_2PUT ? base2 : base2a;
    MPI_Win w = v == V_2PUT ? win2 : win2a;
    int64_t want = ++seq_in[v];
    while (__atomic_load_n((int64_t *)b, __ATOMIC_ACQUIRE) < want) MPIB(MPI_Win_sync(w));
    check_bytes(b + DATA_OFF, n, m, vname[v]);
    break;
  }
  case V_SR:
    MPIB(MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, TAG_SR, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    check_bytes(rbuf, n, m, vname[v]);
    break;
  case V_LOCK: {
    int64_t want = ++seq_in[v];
    while (__atomic_load_n((int64_t *)basel, __ATOMIC_ACQUIRE) < want) lock_poll_sync();
    check_bytes(basel + DATA_OFF, n, m, vname[v]);
    break;
  }
  }
}

static void *xalloc(size_t n) {
  void *p = aligned_alloc(4096, n);
  if (!p) BENCH_DIE("out of memory (%zu bytes)", n);
  memset(p, 0, n);
  return p;
}

static int run_lat(const char *outdir, int level) {
  if (nranks != 2) {
    if (me == 0) fprintf(stderr, "bench_rpipe lat: run on exactly 2 ranks (got %d)\n", nranks);
    return 2;
  }
  const int peer = 1 - me;
  /* Pipes: push A (0->1), push B (1->0), pull A, pull B; both ranks in this order. */
  for (int pull = 0; pull < 2; pull++) {
    int mode = RPIPE_HALF_DUPLEX | (pull ? RPIPE_PULL : 0);
    if (me == 0) {
      open_pipe(peer, RPIPE_WRITER, LAT_WIDTH, mode, RPIPE_NEXT_FIT, &out_p[pull]);
      open_pipe(peer, RPIPE_READER, LAT_WIDTH, mode, RPIPE_NEXT_FIT, &in_p[pull]);
    } else {
      open_pipe(peer, RPIPE_READER, LAT_WIDTH, mode, RPIPE_NEXT_FIT, &in_p[pull]);
      open_pipe(peer, RPIPE_WRITER, LAT_WIDTH, mode, RPIPE_NEXT_FIT, &out_p[pull]);
    }
  }
  const size_t wbytes = LAT_MAX + DATA_OFF;
  base2 = xalloc(wbytes);
  basel = xalloc(wbytes);
  base2r = xalloc(LAT_WIDTH + DATA_OFF);
  srcr = xalloc(LAT_WIDTH);
  MPIB(MPI_Win_create(base2, (MPI_Aint)wbytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win2));
  MPIB(MPI_Win_create(base2r, (MPI_Aint)(LAT_WIDTH + DATA_OFF), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win2r));
  MPIB(MPI_Win_create(basel, (MPI_Aint)wbytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &winl));
  MPIB(MPI_Win_allocate((MPI_Aint)wbytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base2a, &win2a));
  memset(base2a, 0, wbytes);
  MPIB(MPI_Win_set_errhandler(winl, MPI_ERRORS_RETURN));
  src = xalloc(LAT_MAX);
  rbuf = xalloc(LAT_MAX);
  bench_poll_barrier(ctx);
  MPIB(MPI_Win_lock_all(MPI_MODE_NOCHECK, win2));
  MPIB(MPI_Win_lock_all(MPI_MODE_NOCHECK, win2r));
  MPIB(MPI_Win_lock_all(MPI_MODE_NOCHECK, win2a));

  FILE *csv = me == 0 ? bench_csv_open(outdir, "bench_rpipe_lat") : NULL;
  size_t sizes[16] = {8, 64, 512, 4096, 65536, LAT_MAX};
  int nsizes = 6;
  const char *only = getenv("BENCH_RPIPE_LAT_SIZES"); /* e.g. "8 1M": a subset (bytes, K/M suffix) */
  if (only && *only) {
    nsizes = 0;
    for (const char *c = only; *c && nsizes < 16;) {
      char *end;
      long v = strtol(c, &end, 10);
      if (end == c) break;
      if (*end == 'K' || *end == 'k') v <<= 10, end++;
      else if (*end == 'M' || *end == 'm') v <<= 20, end++;
      if (v < 8 || (size_t)v > LAT_MAX) BENCH_DIE("BENCH_RPIPE_LAT_SIZES: %ld is not in 8..1M", v);
      sizes[nsizes++] = (size_t)v;
      c = end;
      while (*c == ' ' || *c == ',') c++;
    }
  }
  const int small_iters = (int)env_long("BENCH_RPIPE_LAT_ITERS", 10000);
  samples_t s[NV];
  for (int v = 0; v < NV; v++) samples_init(&s[v], small_iters + RB);
  char sz[32];
  uint64_t m = 0;
  double med[sizeof sizes / sizeof *sizes][NV];
  double crossing = bench_line_crossing_ns();
  if (me == 0) {
    printf("== bench_rpipe lat: a cache line crosses between ranks 0 and 1 in %.0f ns\n", crossing);
    printf("== bench_rpipe lat: MPI thread level %s; ping-pong between ranks 0 and 1, half round trip in us\n"
           "   (median over round trips; batches of %d of each variant interleaved, rotating the order).\n"
           "   push/pull = rpipe, a fresh rmalloc per message (width 4 MiB, next fit), receiver in blocking rread;\n"
           "   pushT = push with the receiver spinning on rpipe_try_rread instead (diagnostic);\n"
           "   2PUT = MPI_Put data + flush + MPI_Put flag + flush, receiver polls the flag (MPI_Win_create window,\n"
           "   lock_all; one buffer); 2PUTr = 2PUT with source and target offsets advancing through 4 MiB like\n"
           "   rpipe's next fit (same memory traffic as push); 2PUTa = 2PUT on MPI_Win_allocate (osc/sm on one\n"
           "   node); S/R = MPI_Send/MPI_Recv; lock = per message lock(EXCL)+MPI_Put+unlock, then\n"
           "   lock(SHARED)+MPI_Accumulate(+1)+unlock, receiver polls the counter (local load + MPI_Win_sync)\n",
           bench_thread_name(level), RB);
    printf("%7s", "size");
    for (int v = 0; v < NV; v++) printf(" %8s", vname[v]);
    printf("\n");
  }
  for (int k = 0; k < nsizes; k++) {
    size_t n = sizes[k];
    int iters = bench_iters(n, small_iters, 300);
    iters = (iters + RB - 1) / RB * RB;
    bench_progress("lat %s: %d round trips per variant", bench_size_str(n, sz, sizeof sz), iters);
    for (int v = 0; v < NV; v++) samples_reset(&s[v]);
    for (int warm = 1; warm >= 0; warm--) {
      int todo = warm ? RB : iters;
      for (int done = 0, round = 0; done < todo; done += RB, round++) {
        for (int q = 0; q < NV; q++) {
          int v = (q + round + k) % NV;
          for (int j = 0; j < RB; j++, m++) {
            if (me == 0) {
              double t0 = bench_now();
              send_msg(v, peer, n, m);
              recv_msg(v, peer, n, m);
              double t = bench_now() - t0;
              if (!warm) samples_add(&s[v], t / 2);
            } else {
              recv_msg(v, peer, n, m);
              send_msg(v, peer, n, m);
            }
          }
        }
      }
    }
    if (me == 0) {
      double mean[NV];
      for (int v = 0; v < NV; v++) {
        mean[v] = samples_mean(&s[v]) * 1e6;
        med[k][v] = samples_median(&s[v]) * 1e6;
      }
      printf("%7s", bench_size_str(n, sz, sizeof sz));
      for (int v = 0; v < NV; v++) printf(" %8.3f", med[k][v]);
      printf("\n");
      fflush(stdout);
      static const struct {
        const char *name;
        int fh, base;
        const char *desc;
      } rows[] = {
          {"rpipe_push_vs_2put", V_PUSH, V_2PUT, "2 x MPI_Put+MPI_Win_flush (data, flag), MPI_Win_create window, lock_all"},
          {"rpipe_push_vs_2put_rot", V_PUSH, V_2PUTR, "2PUT with offsets advancing through 4 MiB (next-fit-like)"},
          {"rpipe_push_vs_2put_alloc", V_PUSH, V_2PUTA, "2 x MPI_Put+MPI_Win_flush, MPI_Win_allocate window"},
          {"rpipe_push_vs_sendrecv", V_PUSH, V_SR, "MPI_Send/MPI_Recv ping-pong"},
          {"rpipe_push_vs_lockacc", V_PUSH, V_LOCK,
           "lock(EXCL)+MPI_Put+unlock, lock(SHARED)+MPI_Accumulate+unlock, poll load+MPI_Win_sync"},
          {"rpipe_pull_vs_2put", V_PULL, V_2PUT, "2 x MPI_Put+MPI_Win_flush (data, flag), MPI_Win_create window, lock_all"},
          {"rpipe_pull_vs_sendrecv", V_PULL, V_SR, "MPI_Send/MPI_Recv ping-pong"},
          {"rpipe_pull_vs_lockacc", V_PULL, V_LOCK,
           "lock(EXCL)+MPI_Put+unlock, lock(SHARED)+MPI_Accumulate+unlock, poll load+MPI_Win_sync"},
          {"rpipe_pusht_vs_2put", V_PUSHT, V_2PUT, "push with try_rread spin vs 2PUT (diagnostic)"},
      };
      for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
        bench_row_t row = {rows[r].name, rows[r].desc, n, med[k][rows[r].fh], med[k][rows[r].base],
                           mean[rows[r].fh], mean[rows[r].base], s[rows[r].fh].n};
        bench_csv_row(csv, &row);
      }
    }
  }
  if (me == 0) {
    printf("\n== bench_rpipe lat: ratios (rpipe / baseline, medians; target push/2PUT <= 1.0, push/S-R < 1 up to 4 KiB)\n");
    printf("%7s %9s %10s %8s %8s | %9s %8s %8s | %10s\n", "size", "push/2PUT", "push/2PUTr", "push/S-R", "push/lock",
           "pull/2PUT", "pull/S-R", "pull/lock", "pushT/2PUT");
    for (int k = 0; k < nsizes; k++) {
      const double *d = med[k];
      printf("%7s %9.2f %10.2f %8.2f %8.2f | %9.2f %8.2f %8.2f | %10.2f\n", bench_size_str(sizes[k], sz, sizeof sz),
             d[V_PUSH] / d[V_2PUT], d[V_PUSH] / d[V_2PUTR], d[V_PUSH] / d[V_SR], d[V_PUSH] / d[V_LOCK],
             d[V_PULL] / d[V_2PUT], d[V_PULL] / d[V_SR], d[V_PULL] / d[V_LOCK], d[V_PUSHT] / d[V_2PUT]);
    }
  }
  if (me == 0) {
    rpipe_stats_t a, b;
    FHB(rpipe_stats(out_p[0], &a));
    FHB(rpipe_stats(out_p[1], &b));
    printf("   rank 0 writer: push pipe %llu messages, %llu free syncs, %llu rmalloc waits; pull pipe %llu messages, "
           "%llu free syncs, %llu rmalloc waits%s\n",
           (unsigned long long)a.messages_written, (unsigned long long)a.free_syncs,
           (unsigned long long)a.rmalloc_waits, (unsigned long long)b.messages_written,
           (unsigned long long)b.free_syncs, (unsigned long long)b.rmalloc_waits,
           winl_sync_ok ? "" : "; lock variant: MPI_Win_sync refused, polled with load + fence");
  }
  MPIB(MPI_Win_unlock_all(win2));
  MPIB(MPI_Win_unlock_all(win2r));
  MPIB(MPI_Win_unlock_all(win2a));
  bench_poll_barrier(ctx);
  MPIB(MPI_Win_free(&win2));
  MPIB(MPI_Win_free(&win2r));
  MPIB(MPI_Win_free(&win2a));
  MPIB(MPI_Win_free(&winl));
  for (int pull = 0; pull < 2; pull++) {
    if (me == 0) {
      FHB(rpipe_close(out_p[pull]));
      FHB(rpipe_close(in_p[pull]));
    } else {
      FHB(rpipe_close(in_p[pull]));
      FHB(rpipe_close(out_p[pull]));
    }
  }
  for (int v = 0; v < NV; v++) samples_free(&s[v]);
  free(base2);
  free(base2r);
  free(srcr);
  free(basel);
  free(src);
  free(rbuf);
  if (csv) fclose(csv);
  return 0;
}

/* ================================================================ policy */
static const int policies[4] = {RPIPE_NEXT_FIT, RPIPE_FIRST_FIT, RPIPE_BEST_FIT, RPIPE_WORST_FIT};
static const char *policy_name[4] = {"next-fit", "first-fit", "best-fit", "worst-fit"};

typedef struct {
  size_t n;
  uint32_t hold;
} tmsg_t;

typedef struct {
  uint64_t due; /* freed once this many messages have been read */
  rpipe_addr_t addr;
} held_t;

/* Min-heap of held messages by due. */
static void held_push(held_t *h, int *nh, held_t x) {
  int i = (*nh)++;
  while (i > 0 && h[(i - 1) / 2].due > x.due) {
    h[i] = h[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h[i] = x;
}
static held_t held_pop(held_t *h, int *nh) {
  held_t top = h[0], x = h[--*nh];
  int i = 0;
  for (;;) {
    int c = 2 * i + 1;
    if (c >= *nh) break;
    if (c + 1 < *nh && h[c + 1].due < h[c].due) c++;
    if (h[c].due >= x.due) break;
    h[i] = h[c];
    i = c;
  }
  if (*nh > 0) h[i] = x;
  return top;
}

typedef struct {
  double seconds;      /* max over both ranks */
  uint64_t waits;      /* writer: rpipe_stats rmalloc_waits */
  uint64_t syncs;      /* writer: free_syncs */
  uint64_t stuck;      /* writer: stuck messages sent */
  uint64_t forced;     /* reader: frees ahead of schedule */
  double frag_mean;    /* writer, sampled runs only */
  double frag_max;
  double free_mean;    /* writer's view: mean free bytes, sampled runs */
} pol_result_t;

static pol_result_t policy_run(int pi, size_t width, const tmsg_t *tr, int N, int sample) {
  const int peer = 1 - me;
  rpipe_t *p;
  open_pipe(peer, me == 0 ? RPIPE_WRITER : RPIPE_READER, width, RPIPE_HALF_DUPLEX, policies[pi], &p);
  pol_result_t r;
  memset(&r, 0, sizeof r);
  double fsum = 0, fmax = 0, freesum = 0;
  bench_poll_barrier(ctx);
  double t0 = bench_now();
  if (me == 0) {
    for (int i = 0; i < N; i++) {
      size_t n = tr[i].n;
      rpipe_addr_t a;
      for (;;) {
        int rc = rpipe_try_rmalloc(p, n, &a);
        if (rc == FH_OK) break;
        if (rc != FH_NOT_READY) BENCH_DIE("rpipe_try_rmalloc(%zu) -> %s", n, fh_strerror(rc));
        int64_t j = i, ack;
        MPIB(MPI_Send(&j, 1, MPI_INT64_T, peer, TAG_STUCK, MPI_COMM_WORLD));
        MPIB(MPI_Recv(&ack, 1, MPI_INT64_T, peer, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        r.stuck++;
      }
      if (sample) {
        rpipe_stats_t st;
        FHB(rpipe_stats(p, &st));
        fsum += st.heap_fragmentation;
        freesum += (double)st.heap_free_bytes;
        if (st.heap_fragmentation > fmax) fmax = st.heap_fragmentation;
      }
      unsigned char *c = rpipe_rmem(p, a);
      if (!c) BENCH_DIE("rpipe_rmem of a fresh allocation returned NULL");
      c[0] = pat_first((uint64_t)i);
      c[n - 1] = pat_last((uint64_t)i);
      FHB(rpipe_rwrite(p, a));
    }
  } else {
    held_t *h = malloc(sizeof(held_t) * (size_t)(N + 1));
    if (!h) BENCH_DIE("out of memory");
    int nh = 0;
    uint64_t reads = 0, freed_since_ack = 0;
    int64_t stuck_at = -1;
    while (reads < (uint64_t)N) {
      rpipe_addr_t a;
      size_t len;
      int rc = rpipe_try_rread(p, &a, &len);
      if (rc == FH_OK) {
        const tmsg_t *t = &tr[reads];
        if (len != t->n) BENCH_DIE("policy %s: message %llu has %zu bytes, expected %zu", policy_name[pi],
                                   (unsigned long long)reads, len, t->n);
        const unsigned char *c = rpipe_rmem(p, a);
        if (!c) BENCH_DIE("rpipe_rmem of a message just read returned NULL");
        check_bytes(c, len, reads, policy_name[pi]);
        held_push(h, &nh, (held_t){reads + 1 + t->hold, a});
        reads++;
        while (nh > 0 && h[0].due <= reads) {
          FHB(rpipe_rfree(p, held_pop(h, &nh).addr));
          freed_since_ack++;
        }
        continue;
      }
      if (rc != FH_NOT_READY) BENCH_DIE("rpipe_try_rread -> %s", fh_strerror(rc));
      if (stuck_at < 0) {
        int flag = 0;
        MPIB(MPI_Iprobe(peer, TAG_STUCK, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE));
        if (!flag) continue;
        MPIB(MPI_Recv(&stuck_at, 1, MPI_INT64_T, peer, TAG_STUCK, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
      }
      /* The writer is stuck before message stuck_at: answer once everything before it
       * is read (until then the scheduled frees may be enough). */
      if ((uint64_t)stuck_at != reads) continue;
      if (freed_since_ack == 0) {
        if (nh == 0)
          BENCH_DIE("policy %s: the writer finds no room for message %llu (%zu bytes) in a %zu-byte heap, but "
                    "the reader holds nothing", policy_name[pi], (unsigned long long)stuck_at, tr[stuck_at].n, width);
        FHB(rpipe_rfree(p, held_pop(h, &nh).addr));
        r.forced++;
      }
      freed_since_ack = 0;
      MPIB(MPI_Send(&stuck_at, 1, MPI_INT64_T, peer, TAG_ACK, MPI_COMM_WORLD));
      stuck_at = -1;
    }
    while (nh > 0) FHB(rpipe_rfree(p, held_pop(h, &nh).addr));
    free(h);
  }
  double mine = bench_now() - t0;
  MPIB(MPI_Allreduce(&mine, &r.seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  if (me == 0) {
    rpipe_stats_t st;
    FHB(rpipe_stats(p, &st));
    r.waits = st.rmalloc_waits;
    r.syncs = st.free_syncs;
    if (st.messages_written != (uint64_t)N) BENCH_DIE("wrote %llu messages, expected %d",
                                                      (unsigned long long)st.messages_written, N);
  }
  uint64_t forced = r.forced;
  MPIB(MPI_Allreduce(&forced, &r.forced, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD));
  if (sample) {
    r.frag_mean = fsum / N;
    r.frag_max = fmax;
    r.free_mean = freesum / N;
  }
  bench_poll_barrier(ctx);
  FHB(rpipe_close(p));
  return r;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}
static uint64_t median_u64(uint64_t *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_u64);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int run_policy(const char *outdir) {
  if (nranks != 2) {
    if (me == 0) fprintf(stderr, "bench_rpipe policy: run on exactly 2 ranks (got %d)\n", nranks);
    return 2;
  }
  const int N = (int)env_long("BENCH_RPIPE_POLICY_MSGS", 20000);
  const int R = (int)env_long("BENCH_RPIPE_POLICY_REPS", 5);
  const uint64_t seed = (uint64_t)env_long("BENCH_RPIPE_SEED", 3);
  if (R > 64) BENCH_DIE("BENCH_RPIPE_POLICY_REPS at most 64");
  /* Pipe widths: a list, e.g. "256K 128K" (bytes, K/M suffix). */
  size_t widths[8];
  int nw = 0;
  const char *wl = getenv("BENCH_RPIPE_POLICY_WIDTH");
  if (!wl || !*wl) wl = "256K 128K";
  for (const char *c = wl; *c && nw < 8;) {
    char *end;
    long v = strtol(c, &end, 10);
    if (end == c) BENCH_DIE("BENCH_RPIPE_POLICY_WIDTH=%s: want sizes like \"256K 128K\"", wl);
    if (*end == 'K' || *end == 'k') v <<= 10, end++;
    else if (*end == 'M' || *end == 'm') v <<= 20, end++;
    if (v < 16384) BENCH_DIE("BENCH_RPIPE_POLICY_WIDTH: %ld cannot hold a 16 KiB message", v);
    widths[nw++] = (size_t)v;
    c = end;
    while (*c == ' ' || *c == ',') c++;
  }
  /* The trace: identical on both ranks. */
  tmsg_t *tr = malloc(sizeof(tmsg_t) * (size_t)N);
  if (!tr) BENCH_DIE("out of memory");
  uint64_t rs = seed;
  double bytes = 0;
  for (int i = 0; i < N; i++) {
    double lo = log(64.0), hi = log(16384.0);
    size_t n = (size_t)llround(exp(lo + rnd_unit(&rs) * (hi - lo)));
    if (n < 64) n = 64;
    if (n > 16384) n = 16384;
    tr[i].n = n;
    tr[i].hold = rnd_unit(&rs) < 0.1 ? (uint32_t)(rnd_next(&rs) % 257) : (uint32_t)(rnd_next(&rs) % 9);
    bytes += (double)n;
  }
  FILE *csv = NULL, *det = NULL;
  if (me == 0) {
    csv = bench_csv_open(outdir, "bench_rpipe_policy");
    char path[4096];
    snprintf(path, sizeof path, "%s/bench_rpipe_policy_detail.csv", outdir);
    det = fopen(path, "w");
    if (!det) BENCH_DIE("cannot open %s", path);
    fprintf(det, "policy,us_per_msg,ratio_to_next_fit,us_min,us_max,frag_mean,frag_max,free_bytes_mean,"
                 "rmalloc_waits,free_syncs,stuck,forced_frees,messages,width,seed\n");
    printf("== bench_rpipe policy: one trace of %d messages (seed %llu), log-uniform 64 B..16 KiB (mean %.0f B),\n"
           "   reader holds message i until message i+hold_i is read (90%%: hold 0..8, 10%%: 0..256); half-duplex\n"
           "   push pipe, a fresh one per run; time per message = median of %d runs (max over both ranks, start\n"
           "   to last free); frag = writer's rpipe_stats heap_fragmentation sampled after every rmalloc\n"
           "   (separate run); waits/syncs = writer's rmalloc_waits/free_syncs (median of the timed runs);\n"
           "   stuck = writer found no room even after a sync; forced = reader freed ahead of schedule to\n"
           "   unblock it (both medians of the timed runs)\n",
           N, (unsigned long long)seed, bytes / N, R);
  }
  for (int w = 0; w < nw; w++) {
    const size_t width = widths[w];
    double t[4][64];
    uint64_t waits[4][64], syncs[4][64], stuck[4][64], forced[4][64];
    for (int rep = 0; rep < R; rep++) {
      for (int q = 0; q < 4; q++) {
        int pi = (q + rep) % 4;
        bench_progress("policy width %zu round %d/%d: %s, %d messages", width, rep + 1, R, policy_name[pi], N);
        pol_result_t r = policy_run(pi, width, tr, N, 0);
        t[pi][rep] = r.seconds;
        waits[pi][rep] = r.waits;
        syncs[pi][rep] = r.syncs;
        stuck[pi][rep] = r.stuck;
        forced[pi][rep] = r.forced;
      }
    }
    pol_result_t sampled[4];
    for (int pi = 0; pi < 4; pi++) {
      bench_progress("policy width %zu, %s: sampling run (rpipe_stats after every rmalloc)", width, policy_name[pi]);
      sampled[pi] = policy_run(pi, width, tr, N, 1);
    }
    if (me != 0) continue;
    double us[4];
    samples_t sm;
    samples_init(&sm, R);
    for (int pi = 0; pi < 4; pi++) {
      samples_reset(&sm);
      for (int rep = 0; rep < R; rep++) samples_add(&sm, t[pi][rep] / N);
      us[pi] = samples_median(&sm) * 1e6;
    }
    printf("\n   width %zu KiB (%.0f mean messages):\n", width >> 10, (double)width / (bytes / N));
    printf("%-10s %9s %7s %15s %9s %8s %11s %8s %8s %7s %7s\n", "policy", "us/msg", "ratio", "us/msg min..max",
           "frag mean", "frag max", "free B mean", "waits", "syncs", "stuck", "forced");
    for (int pi = 0; pi < 4; pi++) {
      double lo = 1e30, hi = 0;
      for (int rep = 0; rep < R; rep++) {
        double x = t[pi][rep] / N * 1e6;
        if (x < lo) lo = x;
        if (x > hi) hi = x;
      }
      uint64_t wt = median_u64(waits[pi], R), sy = median_u64(syncs[pi], R), st = median_u64(stuck[pi], R),
               fo = median_u64(forced[pi], R);
      printf("%-10s %9.3f %7.2f %7.3f..%-7.3f %9.3f %8.3f %11.0f %8llu %8llu %7llu %7llu\n", policy_name[pi], us[pi],
             us[pi] / us[0], lo, hi, sampled[pi].frag_mean, sampled[pi].frag_max, sampled[pi].free_mean,
             (unsigned long long)wt, (unsigned long long)sy, (unsigned long long)st, (unsigned long long)fo);
      fprintf(det, "%s,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.0f,%llu,%llu,%llu,%llu,%d,%zu,%llu\n", policy_name[pi], us[pi],
              us[pi] / us[0], lo, hi, sampled[pi].frag_mean, sampled[pi].frag_max, sampled[pi].free_mean,
              (unsigned long long)wt, (unsigned long long)sy, (unsigned long long)st, (unsigned long long)fo, N, width,
              (unsigned long long)seed);
      char name[64];
      snprintf(name, sizeof name, "policy_%s_w%zuK", policy_name[pi], width >> 10);
      for (char *c = name; *c; c++)
        if (*c == '-') *c = '_';
      bench_row_t row = {name, "the same trace with next fit", (size_t)(bytes / N), us[pi], us[0], us[pi], us[0], R};
      bench_csv_row(csv, &row);
    }
    fflush(stdout);
    samples_free(&sm);
  }
  if (det) fclose(det);
  if (csv) fclose(csv);
  free(tr);
  return 0;
}

/* ================================================================ random */
#define RND_WIDTH ((size_t)64 << 10)
#define RND_MAXMSG 1024
#define RND_POOL 64

typedef struct {
  double seconds;
  uint64_t waits; /* try_rmalloc / send-slot refusals, summed over ranks */
  uint64_t syncs; /* rpipe free syncs, summed over ranks (rpipe only) */
} rnd_result_t;

static rnd_result_t random_rpipe(rpipe_t **pipes, const int *dest, const int *size, int M, int64_t expect) {
  rnd_result_t r = {0, 0, 0};
  uint64_t *seq_to = calloc((size_t)nranks, sizeof(uint64_t)), *seq_from = calloc((size_t)nranks, sizeof(uint64_t));
  if (!seq_to || !seq_from) BENCH_DIE("out of memory");
  rpipe_stats_t st0;
  uint64_t syncs0 = 0;
  for (int q = 0; q < nranks; q++)
    if (q != me) {
      FHB(rpipe_stats(pipes[q], &st0));
      syncs0 += st0.free_syncs;
    }
  bench_poll_barrier(ctx);
  double t0 = bench_now();
  int sent = 0;
  int64_t got = 0;
  uint64_t waits = 0;
  while (sent < M || got < expect) {
    int progress = 0;
    for (int q = 0; q < nranks; q++) {
      if (q == me) continue;
      rpipe_addr_t a;
      size_t len;
      int rc;
      while ((rc = rpipe_try_rread(pipes[q], &a, &len)) == FH_OK) {
        const unsigned char *c = rpipe_rmem(pipes[q], a);
        if (!c) BENCH_DIE("rpipe_rmem of a message just read returned NULL");
        if (len < 8 || len > RND_MAXMSG || c[0] != (unsigned char)q || c[len - 1] != (unsigned char)seq_from[q])
          BENCH_DIE("random rpipe: message %llu from rank %d (%zu bytes) has first/last byte %u/%u, expected %u/%u",
                    (unsigned long long)seq_from[q], q, len, c[0], c[len - 1], q, (unsigned char)seq_from[q]);
        seq_from[q]++;
        FHB(rpipe_rfree(pipes[q], a));
        got++;
        progress = 1;
      }
      if (rc != FH_NOT_READY) BENCH_DIE("rpipe_try_rread(peer %d) -> %s", q, fh_strerror(rc));
    }
    if (sent < M) {
      int q = dest[sent];
      size_t n = (size_t)size[sent];
      rpipe_addr_t a;
      int rc = rpipe_try_rmalloc(pipes[q], n, &a);
      if (rc == FH_OK) {
        unsigned char *c = rpipe_rmem(pipes[q], a);
        if (!c) BENCH_DIE("rpipe_rmem of a fresh allocation returned NULL");
        c[0] = (unsigned char)me;
        c[n - 1] = (unsigned char)seq_to[q]++;
        FHB(rpipe_rwrite(pipes[q], a));
        sent++;
        progress = 1;
      } else if (rc == FH_NOT_READY) {
        waits++;
      } else {
        BENCH_DIE("rpipe_try_rmalloc(peer %d, %zu) -> %s", q, n, fh_strerror(rc));
      }
    }
    if (!progress) sched_yield();
  }
  double mine = bench_now() - t0;
  uint64_t syncs = 0;
  for (int q = 0; q < nranks; q++)
    if (q != me) {
      FHB(rpipe_stats(pipes[q], &st0));
      syncs += st0.free_syncs;
    }
  syncs -= syncs0;
  MPIB(MPI_Allreduce(&mine, &r.seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  MPIB(MPI_Allreduce(&waits, &r.waits, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD));
  MPIB(MPI_Allreduce(&syncs, &r.syncs, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD));
  free(seq_to);
  free(seq_from);
  return r;
}

static rnd_result_t random_mpi(const int *dest, const int *size, int M, int64_t expect) {
  rnd_result_t r = {0, 0, 0};
  uint64_t *seq_to = calloc((size_t)nranks, sizeof(uint64_t)), *seq_from = calloc((size_t)nranks, sizeof(uint64_t));
  unsigned char *sbuf = malloc((size_t)RND_POOL * RND_MAXMSG), *rb = malloc(RND_MAXMSG);
  MPI_Request reqs[RND_POOL];
  if (!seq_to || !seq_from || !sbuf || !rb) BENCH_DIE("out of memory");
  for (int i = 0; i < RND_POOL; i++) reqs[i] = MPI_REQUEST_NULL;
  bench_poll_barrier(ctx);
  double t0 = bench_now();
  int sent = 0;
  int64_t got = 0;
  uint64_t waits = 0;
  while (sent < M || got < expect) {
    int progress = 0;
    for (;;) {
      int flag = 0, cnt;
      MPI_Status st;
      MPIB(MPI_Iprobe(MPI_ANY_SOURCE, TAG_RND, MPI_COMM_WORLD, &flag, &st));
      if (!flag) break;
      int q = st.MPI_SOURCE;
      MPIB(MPI_Get_count(&st, MPI_BYTE, &cnt));
      if (cnt < 8 || cnt > RND_MAXMSG) BENCH_DIE("random MPI: a %d-byte message from rank %d", cnt, q);
      MPIB(MPI_Recv(rb, cnt, MPI_BYTE, q, TAG_RND, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
      if (rb[0] != (unsigned char)q || rb[cnt - 1] != (unsigned char)seq_from[q])
        BENCH_DIE("random MPI: message %llu from rank %d has first/last byte %u/%u, expected %u/%u",
                  (unsigned long long)seq_from[q], q, rb[0], rb[cnt - 1], q, (unsigned char)seq_from[q]);
      seq_from[q]++;
      got++;
      progress = 1;
    }
    if (sent < M) {
      int slot = sent % RND_POOL, ready = 1;
      if (reqs[slot] != MPI_REQUEST_NULL) MPIB(MPI_Test(&reqs[slot], &ready, MPI_STATUS_IGNORE));
      if (ready) {
        int q = dest[sent], n = size[sent];
        unsigned char *c = sbuf + (size_t)slot * RND_MAXMSG;
        c[0] = (unsigned char)me;
        c[n - 1] = (unsigned char)seq_to[q]++;
        MPIB(MPI_Isend(c, n, MPI_BYTE, q, TAG_RND, MPI_COMM_WORLD, &reqs[slot]));
        sent++;
        progress = 1;
      } else {
        waits++;
      }
    }
    if (!progress) sched_yield();
  }
  MPI_Status stats[RND_POOL]; /* a real array: MPICH's MPI_STATUSES_IGNORE trips GCC's access checks */
  MPIB(MPI_Waitall(RND_POOL, reqs, stats));
  double mine = bench_now() - t0;
  MPIB(MPI_Allreduce(&mine, &r.seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  MPIB(MPI_Allreduce(&waits, &r.waits, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD));
  free(seq_to);
  free(seq_from);
  free(sbuf);
  free(rb);
  return r;
}

static int run_random(const char *outdir) {
  if (nranks < 2) {
    fprintf(stderr, "bench_rpipe random: needs at least 2 ranks\n");
    return 2;
  }
  const int M = (int)env_long("BENCH_RPIPE_RANDOM_MSGS", 20000);
  const int R = (int)env_long("BENCH_RPIPE_RANDOM_REPS", 3);
  const uint64_t seed = (uint64_t)env_long("BENCH_RPIPE_SEED", 3);
  /* Pipes to every other rank, opened in increasing peer order on every rank. */
  rpipe_t **pipes = calloc((size_t)nranks, sizeof(rpipe_t *));
  int *dest = malloc(sizeof(int) * (size_t)M), *size = malloc(sizeof(int) * (size_t)M);
  int *cnt_out = calloc((size_t)nranks, sizeof(int)), *cnt_in = calloc((size_t)nranks, sizeof(int));
  if (!pipes || !dest || !size || !cnt_out || !cnt_in) BENCH_DIE("out of memory");
  double topen = bench_now();
  for (int q = 0; q < nranks; q++)
    if (q != me) open_pipe(q, RPIPE_BOTH, RND_WIDTH, RPIPE_FULL_DUPLEX, RPIPE_NEXT_FIT, &pipes[q]);
  topen = bench_now() - topen;
  uint64_t rs = seed * 0x100000001b3ULL + (uint64_t)me + 1;
  double bytes = 0;
  for (int i = 0; i < M; i++) {
    int q = (int)(rnd_next(&rs) % (uint64_t)(nranks - 1));
    if (q >= me) q++;
    dest[i] = q;
    size[i] = 8 + (int)(rnd_next(&rs) % (RND_MAXMSG - 8 + 1));
    cnt_out[q]++;
    bytes += size[i];
  }
  MPIB(MPI_Alltoall(cnt_out, 1, MPI_INT, cnt_in, 1, MPI_INT, MPI_COMM_WORLD));
  int64_t expect = 0;
  for (int q = 0; q < nranks; q++) expect += cnt_in[q];

  samples_t sr, sm;
  samples_init(&sr, R);
  samples_init(&sm, R);
  uint64_t wr = 0, wm = 0, syncs = 0;
  for (int rep = -1; rep < R; rep++) { /* rep -1: warm-up of both */
    for (int k = 0; k < 2; k++) {
      int rp = (k + rep + 1) % 2 == 0;
      bench_progress("random np=%d rep %d/%d: %s, %d messages per rank", nranks, rep + 1, R, rp ? "rpipe" : "MPI", M);
      rnd_result_t r = rp ? random_rpipe(pipes, dest, size, M, expect) : random_mpi(dest, size, M, expect);
      if (rep < 0) continue;
      samples_add(rp ? &sr : &sm, r.seconds);
      if (rp) {
        wr += r.waits;
        syncs += r.syncs;
      } else {
        wm += r.waits;
      }
    }
  }
  double topen_max;
  MPIB(MPI_Reduce(&topen, &topen_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
  if (me == 0) {
    double tr = samples_median(&sr), tm = samples_median(&sm);
    double lo_r = sr.v[0], hi_r = sr.v[sr.n - 1], lo_m = sm.v[0], hi_m = sm.v[sm.n - 1];
    double ur = tr / M * 1e6, um = tm / M * 1e6;
    printf("== bench_rpipe random: %d ranks, full-duplex pipes between every pair (width %zu, push, next fit;\n"
           "   %d opens took %.1f ms on the slowest rank), %d messages per rank of 8 B..1 KiB (mean %.0f B) to random\n"
           "   peers (seed %llu), draining every pipe (try_rread + rfree) before each send; baseline: the same\n"
           "   trace with MPI_Isend + MPI_Iprobe(ANY_SOURCE)/MPI_Recv. Time = max over ranks, median of %d runs\n",
           nranks, RND_WIDTH, nranks - 1, topen_max * 1e3, M, bytes / M, (unsigned long long)seed, R);
    printf("%-6s %9s %17s %13s %15s %14s %9s %9s\n", "", "time ms", "ms min..max", "us/msg/rank", "msgs/s per rank",
           "msgs/s total", "waits/run", "syncs/run");
    printf("%-6s %9.2f %8.2f..%-8.2f %13.3f %15.0f %14.0f %9.0f %9.0f\n", "rpipe", tr * 1e3, lo_r * 1e3, hi_r * 1e3, ur,
           M / tr, (double)M * nranks / tr, (double)wr / R, (double)syncs / R);
    printf("%-6s %9.2f %8.2f..%-8.2f %13.3f %15.0f %14.0f %9.0f %9s\n", "MPI", tm * 1e3, lo_m * 1e3, hi_m * 1e3, um,
           M / tm, (double)M * nranks / tm, (double)wm / R, "-");
    printf("   ratio rpipe/MPI (time per message): %.2f\n", tr / tm);
    fflush(stdout);
    char name[64];
    snprintf(name, sizeof name, "bench_rpipe_random_np%d", nranks);
    FILE *csv = bench_csv_open(outdir, name);
    snprintf(name, sizeof name, "random_np%d", nranks);
    bench_row_t row = {name, "same trace with MPI_Isend + MPI_Iprobe/MPI_Recv (us per message per rank)", RND_MAXMSG,
                       ur, um, samples_mean(&sr) / M * 1e6, samples_mean(&sm) / M * 1e6, sr.n};
    bench_csv_row(csv, &row);
    fclose(csv);
  }
  bench_poll_barrier(ctx);
  for (int q = 0; q < nranks; q++)
    if (q != me) FHB(rpipe_close(pipes[q]));
  samples_free(&sr);
  samples_free(&sm);
  free(pipes);
  free(dest);
  free(size);
  free(cnt_out);
  free(cnt_in);
  return 0;
}

/* ================================================================ calls */

/* One timed batch of `k` messages: writer side on rank 0, then reader side on rank 1
 * (each while the other waits in a barrier). Returns ns per message on this rank's
 * side (0 on the side it did not time). */
static void calls_batch(rpipe_t *p, int k, uint64_t *m, int use_mpi, double *w_ns, double *r_ns) {
  unsigned char buf[8];
  MPIB(MPI_Barrier(MPI_COMM_WORLD));
  if (me == 0) {
    double t0 = MPI_Wtime();
    for (int i = 0; i < k; i++) {
      uint64_t id = m[0] + (uint64_t)i;
      if (use_mpi) {
        buf[0] = pat_first(id);
        buf[7] = pat_last(id);
        MPIB(MPI_Send(buf, 8, MPI_BYTE, 1, TAG_SR, MPI_COMM_WORLD));
      } else {
        rpipe_addr_t a;
        FHB(rpipe_rmalloc(p, 8, &a));
        unsigned char *c = rpipe_rmem(p, a);
        c[0] = pat_first(id);
        c[7] = pat_last(id);
        FHB(rpipe_rwrite(p, a));
      }
    }
    *w_ns = (MPI_Wtime() - t0) / k * 1e9;
  }
  MPIB(MPI_Barrier(MPI_COMM_WORLD));
  if (me == 1) {
    double t0 = MPI_Wtime();
    for (int i = 0; i < k; i++) {
      uint64_t id = m[0] + (uint64_t)i;
      if (use_mpi) {
        MPIB(MPI_Recv(buf, 8, MPI_BYTE, 0, TAG_SR, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        check_bytes(buf, 8, id, "calls MPI_Recv");
      } else {
        rpipe_addr_t a;
        size_t len;
        FHB(rpipe_rread(p, &a, &len));
        if (len != 8) BENCH_DIE("calls: message %llu has %zu bytes", (unsigned long long)id, len);
        check_bytes(rpipe_rmem(p, a), 8, id, "calls rpipe_rread");
        FHB(rpipe_rfree(p, a));
      }
    }
    *r_ns = (MPI_Wtime() - t0) / k * 1e9;
  }
  m[0] += (uint64_t)k;
}

static int run_calls(const char *outdir) {
  if (nranks != 2) {
    if (me == 0) fprintf(stderr, "bench_rpipe calls: run on exactly 2 ranks (got %d)\n", nranks);
    return 2;
  }
  int k = (int)env_long("BENCH_RPIPE_CALLS_BATCH", 500), rounds = (int)env_long("BENCH_RPIPE_CALLS_ROUNDS", 400);
  if (k > 1000) BENCH_DIE("BENCH_RPIPE_CALLS_BATCH=%d: at most 1000 (the pipe's notice slots)", k);
  rpipe_t *p;
  open_pipe(1 - me, me == 0 ? RPIPE_WRITER : RPIPE_READER, 1 << 20, RPIPE_HALF_DUPLEX, RPIPE_NEXT_FIT, &p);
  samples_t s[4]; /* rpipe writer, MPI_Send, rpipe reader, MPI_Recv */
  for (int i = 0; i < 4; i++) samples_init(&s[i], rounds);
  uint64_t mr = 0, mm = 0;
  double w, r;
  for (int i = 0; i < 20; i++) { /* warm-up */
    calls_batch(p, k, &mr, 0, &w, &r);
    calls_batch(p, k, &mm, 1, &w, &r);
  }
  bench_progress("calls: %d batches of %d messages each way", rounds, k);
  for (int i = 0; i < rounds; i++) {
    for (int j = 0; j < 2; j++) {
      int use_mpi = (i + j) % 2; /* rotate which goes first */
      w = r = 0;
      calls_batch(p, k, use_mpi ? &mm : &mr, use_mpi, &w, &r);
      if (me == 0) samples_add(&s[use_mpi], w);
      else samples_add(&s[2 + use_mpi], r);
    }
  }
  double med[4] = {0, 0, 0, 0}, all[4];
  for (int i = 0; i < 4; i++) med[i] = samples_median(&s[i]);
  MPIB(MPI_Allreduce(med, all, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  if (me == 0) {
    printf("== bench_rpipe calls: software per 8 B message on each side, no waits (ns, median of %d batches of %d)\n",
           rounds, k);
    printf("   writer: rpipe_rmalloc+rmem+rwrite %.0f   MPI_Send %.0f   ratio %.2f\n", all[0], all[1], all[0] / all[1]);
    printf("   reader: rpipe_rread+rmem+rfree    %.0f   MPI_Recv %.0f   ratio %.2f\n", all[2], all[3], all[2] / all[3]);
    FILE *f = bench_csv_open(outdir, "bench_rpipe_calls");
    bench_row_t wr = {"calls_writer", "MPI_Send (eager)", 8, all[0] / 1e3, all[1] / 1e3, 0, 0, rounds};
    bench_row_t rr = {"calls_reader", "MPI_Recv (unexpected queue)", 8, all[2] / 1e3, all[3] / 1e3, 0, 0, rounds};
    bench_csv_row(f, &wr);
    bench_csv_row(f, &rr);
    fclose(f);
  }
  for (int i = 0; i < 4; i++) samples_free(&s[i]);
  FHB(rpipe_close(p));
  return 0;
}

int main(int argc, char **argv) {
  /* lat needs ~16.5 MiB of library heap per rank: leave room if FH_HEAP_SIZE is unset. */
  if (argc > 1 && !strcmp(argv[1], "lat")) setenv("FH_HEAP_SIZE", "48M", 0);
  int level = bench_mpi_init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &bench_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  me = bench_rank;
  const char *mode = argc > 1 ? argv[1] : "";
  const char *outdir = argc > 2 ? argv[2] : ".";
  if (strcmp(mode, "lat") && strcmp(mode, "policy") && strcmp(mode, "random") && strcmp(mode, "calls")) {
    if (me == 0) fprintf(stderr, "usage: bench_rpipe lat|policy|random|calls [outdir]\n");
    MPI_Finalize();
    return 2;
  }
  FHB(fh_init(MPI_COMM_WORLD, NULL, &ctx));
  int rc = !strcmp(mode, "lat")      ? run_lat(outdir, level)
           : !strcmp(mode, "policy") ? run_policy(outdir)
           : !strcmp(mode, "calls")  ? run_calls(outdir)
                                     : run_random(outdir);
  bench_poll_barrier(ctx);
  FHB(fh_finalize(ctx));
  if (me == 0 && rc == 0) printf("bench_rpipe %s: done (CSV in %s)\n", mode, outdir);
  MPI_Finalize();
  return rc;
}
