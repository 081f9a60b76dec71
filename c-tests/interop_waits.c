/* interop_waits.c -- firehose non-blocking RMA interleaved with MPI point-to-point
 * waits, synchronised only with MPI (no fh_barrier anywhere).
 *
 * Ring, NPHASES phases. Each rank, in phase p:
 *  - fh_put_nb into the right neighbour's heap IN area and fh_put_nbi into its plain
 *    malloc IN area; fh_get_nbi from the left neighbour's registered OUT area and
 *    fh_get_nb from its plain malloc OUT area. Heap and registered areas alternate
 *    by p % 2; the plain ones also move to another MiB of a 4 MiB buffer every two
 *    phases, so even phases touch memory the peer has not pinned yet (a firehose
 *    miss that the peer must answer). In even phases half of the ranks (alternating)
 *    start 30 ms late, so their peers already wait in MPI_Waitall / MPI_Probe /
 *    MPI_Sendrecv when those first accesses arrive;
 *  - completes the puts (fh_wait, fh_wait_nbi(PUTS)) and only then MPI_Isend's the
 *    right neighbour a note {phase, length, checksum, extra words} of varying
 *    length; completes the gets (fh_wait, fh_wait_nbi(GETS)) and checks them;
 *  - receives the left neighbour's note: MPI_Irecv + MPI_Waitall in even phases,
 *    MPI_Probe + MPI_Get_count + MPI_Recv in odd ones; the note's arrival means the
 *    left neighbour's puts are complete, so the IN areas are checked against it;
 *  - acknowledges with MPI_Sendrecv (to the left, from the right), after which the
 *    OUT areas of phase p + 2 are filled (last read in phase p + 2 - 8 for the plain
 *    ones, in phase p for the others; the right neighbour reads them only after my
 *    note of phase p + 1).
 * At the end MPI_Allreduce sums a checksum of every word received through firehose
 * and every rank compares it with the closed-form total.
 */
#include <mpi.h>
#include "firehose.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int g_rank = -1;

#define CHECK(cond, ...)                                                              \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      char eb_[512];                                                                  \
      fh_last_error(eb_, sizeof eb_);                                                 \
      fprintf(stderr, "[rank %d] %s:%d: CHECK(%s) failed: ", g_rank, __FILE__,       \
              __LINE__, #cond);                                                       \
      fprintf(stderr, __VA_ARGS__);                                                   \
      fprintf(stderr, "\n[rank %d]   fh_last_error: %s\n", g_rank, eb_);            \
      fflush(stderr);                                                                 \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                   \
    }                                                                                 \
  } while (0)
#define CHECK_RC(call)                                                                \
  do {                                                                                \
    int rc_ = (call);                                                                 \
    CHECK(rc_ == FH_OK, "%s returned %d (%s)", #call, rc_, fh_strerror(rc_));        \
  } while (0)

#define W 1024
#define NPHASES 10
#define T_NOTE 100
#define T_ACK 1000
#define MAXNOTE 8
enum { IN_H, IN_P, OUT_R, OUT_P, NBUF }; /* heap, plain, registered, plain */
static const char *buf_name[NBUF] = {"heap IN", "plain IN", "registered OUT", "plain OUT"};

static uint64_t pat(int who, int p, int b, int i) {
  uint64_t x = ((uint64_t)(who + 1) << 44) ^ ((uint64_t)(p + 1) << 32) ^
               ((uint64_t)(b + 1) << 28) ^ (uint64_t)i;
  x *= 0x9E3779B97F4A7C15ull;
  return x ^ (x >> 27);
}
static int nwords(int p) { return p % 2 ? 100 + 13 * p : W; }
static int note_len(int who, int p) { return 3 + (p + who) % (MAXNOTE - 2); }
#define MIB_WORDS ((size_t)1 << 17)
#define PLAIN_BYTES ((size_t)4 << 20)
/* Phase p's area of buffer kind b: heap and registered by parity; plain ones also
 * in MiB (p / 2) % 4. */
static uint64_t *area(uint64_t *base, int b, int p) {
  size_t off = (size_t)(p % 2) * W;
  if (b == IN_P || b == OUT_P) off += (size_t)((p / 2) % 4) * MIB_WORDS;
  return base + off;
}

/* Checksum of what `who` moves in phase p through buffer kind b. */
static uint64_t sum_of(int who, int p, int b) {
  uint64_t s = 0;
  for (int i = 0; i < nwords(p); i++) s += pat(who, p, b, i);
  return s;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int me, np;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  g_rank = me;
  CHECK(np >= 2, "needs at least 2 ranks, got %d", np);
  fh_ctx_t *ctx;
  CHECK_RC(fh_init(MPI_COMM_WORLD, NULL, &ctx));
  int right = (me + 1) % np, left = (me + np - 1) % np;

  size_t bytes = 2 * W * sizeof(uint64_t);
  uint64_t *buf[NBUF];
  buf[IN_H] = fh_malloc(ctx, bytes);
  buf[IN_P] = malloc(PLAIN_BYTES);
  buf[OUT_R] = malloc(bytes);
  buf[OUT_P] = malloc(PLAIN_BYTES);
  for (int b = 0; b < NBUF; b++) CHECK(buf[b] != NULL, "allocating %s", buf_name[b]);
  CHECK_RC(fh_mem_register(ctx, buf[OUT_R], bytes));
  memset(buf[IN_H], 0, bytes);
  memset(buf[IN_P], 0, PLAIN_BYTES);
  memset(buf[OUT_P], 0, PLAIN_BYTES);
  for (int p = 0; p < 2; p++)
    for (int b = OUT_R; b <= OUT_P; b++)
      for (int i = 0; i < W; i++) area(buf[b], b, p)[i] = pat(me, p, b, i);
  uint64_t mine[NBUF], *all = malloc(sizeof(uint64_t) * NBUF * np);
  CHECK(all != NULL, "malloc");
  for (int b = 0; b < NBUF; b++) mine[b] = (uint64_t)(uintptr_t)buf[b];
  MPI_Allgather(mine, NBUF, MPI_UINT64_T, all, NBUF, MPI_UINT64_T, MPI_COMM_WORLD);
#define RADDR(r, b) ((uint64_t *)(uintptr_t)all[(size_t)(r) * NBUF + (b)])

  static uint64_t srcH[W], srcP[W], gotR[W], gotP[W];
  uint64_t checksum = 0;
  for (int p = 0; p < NPHASES; p++) {
    int n = nwords(p);
    size_t nb = (size_t)n * sizeof(uint64_t);
    MPI_Request rreq = MPI_REQUEST_NULL, sreq;
    uint64_t note_in[MAXNOTE], note_out[MAXNOTE];
    if (p % 2 == 0)
      MPI_Irecv(note_in, MAXNOTE, MPI_UINT64_T, left, T_NOTE + p, MPI_COMM_WORLD, &rreq);
    for (int i = 0; i < n; i++) srcH[i] = pat(me, p, IN_H, i), srcP[i] = pat(me, p, IN_P, i);
    memset(gotR, 0xee, sizeof gotR);
    memset(gotP, 0xee, sizeof gotP);
    if (p % 2 == 0 && me % 2 == (p / 2) % 2) usleep(30 * 1000);
    fh_handle_t hput, hget;
    CHECK_RC(fh_put_nb(ctx, right, area(RADDR(right, IN_H), IN_H, p), srcH, nb, &hput));
    CHECK_RC(fh_put_nbi(ctx, right, area(RADDR(right, IN_P), IN_P, p), srcP, nb));
    CHECK_RC(fh_get_nbi(ctx, gotR, left, area(RADDR(left, OUT_R), OUT_R, p), nb));
    CHECK_RC(fh_get_nb(ctx, gotP, left, area(RADDR(left, OUT_P), OUT_P, p), nb, &hget));

    /* Puts complete: tell the right neighbour. */
    CHECK_RC(fh_wait(ctx, hput));
    CHECK_RC(fh_wait_nbi(ctx, FH_NBI_PUTS));
    int ln = note_len(me, p);
    note_out[0] = (uint64_t)p, note_out[1] = (uint64_t)n;
    note_out[2] = sum_of(me, p, IN_H) + sum_of(me, p, IN_P);
    for (int i = 3; i < ln; i++) note_out[i] = pat(me, p, 9, i);
    MPI_Isend(note_out, ln, MPI_UINT64_T, right, T_NOTE + p, MPI_COMM_WORLD, &sreq);

    /* Gets complete: check them. */
    CHECK_RC(fh_wait(ctx, hget));
    CHECK_RC(fh_wait_nbi(ctx, FH_NBI_GETS));
    for (int i = 0; i < n; i++) {
      CHECK(gotR[i] == pat(left, p, OUT_R, i), "phase %d: got %#llx from rank %d's %s word %d",
            p, (unsigned long long)gotR[i], left, buf_name[OUT_R], i);
      CHECK(gotP[i] == pat(left, p, OUT_P, i), "phase %d: got %#llx from rank %d's %s word %d",
            p, (unsigned long long)gotP[i], left, buf_name[OUT_P], i);
      checksum += gotR[i] + gotP[i];
    }

    /* The left neighbour's note: its puts into my IN areas are complete. */
    MPI_Status st;
    int cnt = -1;
    if (p % 2 == 0) {
      MPI_Request rs[2] = {rreq, sreq};
      MPI_Status sts[2];
      MPI_Waitall(2, rs, sts);
      st = sts[0];
    } else {
      MPI_Probe(left, T_NOTE + p, MPI_COMM_WORLD, &st);
      MPI_Get_count(&st, MPI_UINT64_T, &cnt);
      CHECK(cnt == note_len(left, p), "phase %d: probed a note of %d words, want %d", p, cnt,
            note_len(left, p));
      MPI_Recv(note_in, cnt, MPI_UINT64_T, left, T_NOTE + p, MPI_COMM_WORLD, &st);
      MPI_Wait(&sreq, MPI_STATUS_IGNORE);
    }
    MPI_Get_count(&st, MPI_UINT64_T, &cnt);
    CHECK(st.MPI_SOURCE == left && cnt == note_len(left, p), "phase %d: note from %d, %d words",
          p, st.MPI_SOURCE, cnt);
    CHECK(note_in[0] == (uint64_t)p && note_in[1] == (uint64_t)n &&
              note_in[2] == sum_of(left, p, IN_H) + sum_of(left, p, IN_P),
          "phase %d: bad note {%llu, %llu, %#llx}", p, (unsigned long long)note_in[0],
          (unsigned long long)note_in[1], (unsigned long long)note_in[2]);
    for (int i = 3; i < cnt; i++)
      CHECK(note_in[i] == pat(left, p, 9, i), "phase %d: note word %d", p, i);
    for (int b = IN_H; b <= IN_P; b++) {
      const volatile uint64_t *in = area(buf[b], b, p);
      for (int i = 0; i < n; i++) {
        CHECK(in[i] == pat(left, p, b, i), "phase %d: my %s word %d is %#llx, want %#llx", p,
              buf_name[b], i, (unsigned long long)in[i], (unsigned long long)pat(left, p, b, i));
        checksum += in[i];
      }
    }

    /* Ack: the right neighbour finished reading my OUT areas of this phase. */
    int ack_out = p, ack_in = -1;
    MPI_Sendrecv(&ack_out, 1, MPI_INT, left, T_ACK + p, &ack_in, 1, MPI_INT, right, T_ACK + p,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(ack_in == p, "phase %d: ack %d", p, ack_in);
    for (int b = OUT_R; b <= OUT_P; b++)
      for (int i = 0; i < W; i++) area(buf[b], b, p + 2)[i] = pat(me, p + 2, b, i);
  }

  uint64_t total = 0, want = 0;
  MPI_Allreduce(&checksum, &total, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  for (int r = 0; r < np; r++)
    for (int p = 0; p < NPHASES; p++)
      for (int b = 0; b < NBUF; b++) want += sum_of(r, p, b);
  CHECK(total == want, "checksum of everything received %#llx, want %#llx",
        (unsigned long long)total, (unsigned long long)want);

  CHECK_RC(fh_mem_unregister(ctx, buf[OUT_R], bytes));
  fh_free(ctx, buf[IN_H]);
  CHECK_RC(fh_finalize(ctx));
  free(buf[IN_P]);
  free(buf[OUT_R]);
  free(buf[OUT_P]);
  free(all);
  if (me == 0) printf("interop_waits: OK (np=%d)\n", np);
  MPI_Finalize();
  return 0;
}
