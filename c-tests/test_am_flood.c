/* An AM flood with back-pressure, as a stranger writes it from the header: MPI_Init,
 * a context on the world, MPI_Barrier between phases. Rank 0 stops polling for one
 * second while every other rank floods it with short, medium (1 B to 8 KiB) and long
 * (up to 64 KiB, from malloc'd and from fh_malloc'd buffers) requests, more than the
 * flow-control window (FH_AM_CREDITS=16, set here for every rank).
 *  - nothing is lost: rank 0 handles every request exactly once, with the right
 *    arguments and payload bytes (checked in the handlers);
 *  - senders block and resume: each sender counts the requests whose call returned
 *    before rank 0 woke up; that must be at most the window (16) and less than all,
 *    and every sender must finish after rank 0 wakes;
 *  - run twice: once with rank 0 asleep, once with every rank flooding every other
 *    at once (all queues full together, everyone polling while blocked).
 * Between node peers the requests travel through shared-memory rings (and MPI when a
 * ring is full); scripts/run-c-tests.sh also runs it with FH_SHM=0 (MPI only). */
#include "common.h"
#include <time.h>
#include <unistd.h>

#define H_FLOOD 140
#define PER_SENDER 400
#define CREDITS 16
#define SLOT (64 * 1024)
#define MAX_MEDIUM 8192

static int me, np;
static fh_ctx_t *ctx;
static unsigned char *slots; /* fh_malloc'd: np slots of SLOT bytes, one per sender */
static long *handled;        /* per sender: requests handled here */
static long bad;

static unsigned char byte_of(int src, long seq, size_t j) {
  return (unsigned char)mix64(((uint64_t)src << 40) ^ ((uint64_t)seq << 20) ^ j);
}

static size_t len_of(int kind, long seq) {
  if (kind == 1) return 1 + (size_t)(mix64((uint64_t)seq) % MAX_MEDIUM);
  if (kind == 2) return 1 + (size_t)(mix64((uint64_t)seq * 3) % SLOT);
  return 0;
}

/* args: src, seq, kind (0 short, 1 medium, 2 long), length */
static void on_flood(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs,
                     void *user) {
  (void)user;
  int src = fh_am_source(tok);
  if (nargs != 4 || (int)args[0] != src || src < 0 || src >= np) {
    bad++;
    return;
  }
  long seq = (long)args[1];
  int kind = (int)args[2];
  size_t want = len_of(kind, seq);
  if (nbytes != want || args[3] != want) {
    bad++;
    return;
  }
  if (kind == 2 && buf != slots + (size_t)src * SLOT) bad++;
  const unsigned char *b = buf;
  for (size_t j = 0; j < nbytes; j++)
    if (b[j] != byte_of(src, seq, j)) {
      bad++;
      return;
    }
  handled[src]++;
}

/* Send PER_SENDER requests to `dest`; returns how many calls returned before
 * `deadline` on the monotonic clock (0: do not count). */
static long flood(int dest, void **all_slots, unsigned char *tmp, unsigned char *heap_tmp, double deadline) {
  long early = 0;
  for (long seq = 0; seq < PER_SENDER; seq++) {
    int kind = (int)(seq % 3);
    size_t n = len_of(kind, seq);
    unsigned char *src = (seq % 2) ? heap_tmp : tmp;
    for (size_t j = 0; j < n; j++) src[j] = byte_of(me, seq, j);
    uint64_t args[4] = {(uint64_t)me, (uint64_t)seq, (uint64_t)kind, n};
    if (kind == 0) CHECK_OK(fh_am_request_short(ctx, dest, H_FLOOD, args, 4));
    if (kind == 1) CHECK_OK(fh_am_request_medium(ctx, dest, H_FLOOD, src, n, args, 4));
    if (kind == 2) {
      unsigned char *dst = (unsigned char *)all_slots[dest] + (size_t)me * SLOT;
      CHECK_OK(fh_am_request_long(ctx, dest, H_FLOOD, src, n, dst, args, 4));
    }
    if (deadline > 0 && fh_test_now() < deadline) early++;
  }
  return early;
}

/* Poll until `want` requests arrived from each rank in `from` (all others when -1). */
static void drain(long want, int from) {
  for (;;) {
    int done = 1;
    for (int r = 0; r < np; r++)
      if ((from < 0 ? r != me : r == from) && handled[r] < want) done = 0;
    if (done) return;
    CHECK_OK(fh_poll(ctx));
  }
}

static void phase_asleep(void **all_slots, unsigned char *tmp, unsigned char *heap_tmp) {
  memset(handled, 0, sizeof(long) * (size_t)np);
  MPI_Barrier(MPI_COMM_WORLD);
  double wake = 0;
  long early = 0;
  if (me == 0) {
    wake = fh_test_now() + 1.0;
    MPI_Bcast(&wake, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    while (fh_test_now() < wake) usleep(10000); /* not polling */
    for (int r = 1; r < np; r++) CHECK(handled[r] == 0, "handled %ld from %d while asleep", handled[r], r);
    drain(PER_SENDER, -1);
  } else {
    MPI_Bcast(&wake, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    early = flood(0, all_slots, tmp, heap_tmp, wake);
    double end = fh_test_now();
    CHECK(early <= CREDITS, "%ld requests returned while rank 0 slept (window %d)", early, CREDITS);
    CHECK(early < PER_SENDER && end >= wake, "the sender never blocked");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(bad == 0, "%ld requests arrived wrong", bad);
}

static void phase_all(void **all_slots, unsigned char *tmp, unsigned char *heap_tmp) {
  memset(handled, 0, sizeof(long) * (size_t)np);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int k = 1; k < np; k++) flood((me + k) % np, all_slots, tmp, heap_tmp, 0);
  drain(PER_SENDER, -1);
  MPI_Barrier(MPI_COMM_WORLD);
  /* Nobody sent more than it should have either. */
  for (int r = 0; r < np; r++)
    CHECK(r == me || handled[r] == PER_SENDER, "%ld requests from %d, want %d", handled[r], r, PER_SENDER);
  CHECK(bad == 0, "%ld requests arrived wrong", bad);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  setenv("FH_AM_CREDITS", "16", 1);
  CHECK_OK(fh_init_world(NULL, &ctx));
  me = fh_rank(ctx);
  np = fh_size(ctx);
  fh_test_rank = me;
  CHECK(np <= 64, "at most 64 ranks");
  CHECK_OK(fh_am_register(ctx, H_FLOOD, on_flood, NULL));
  handled = calloc((size_t)np, sizeof(long));
  slots = fh_malloc(ctx, (size_t)np * SLOT);
  unsigned char *heap_tmp = fh_malloc(ctx, SLOT);
  unsigned char *tmp = malloc(SLOT);
  CHECK(slots && heap_tmp && tmp && handled, "allocation");
  void *all_slots[64];
  exchange_ptrs(slots, all_slots, MPI_COMM_WORLD);
  watchdog_init(ctx, 30);
  begin_phase("a. 1 receiver asleep for 1 s, the others flood it", 120);
  phase_asleep(all_slots, tmp, heap_tmp);
  end_phase();
  begin_phase("b. every rank floods every other at once", 120);
  phase_all(all_slots, tmp, heap_tmp);
  end_phase();
  free(tmp);
  fh_free(ctx, heap_tmp);
  fh_free(ctx, slots);
  CHECK_OK(fh_finalize(ctx));
  TEST_PASS("test_am_flood");
  MPI_Finalize();
  return 0;
}
