/* rpipe: ordered, intact delivery through one-sided pipes, under random speeds.
 *
 * Ranks pair up (0-1, 2-3, ...; an odd last rank sits out of the pair phases).
 * Every message's length and bytes are a function of (pipe, sequence number): its
 * first 8 bytes carry the sequence number (when it has 8), the next 8 the sender's
 * rank and the length (when it has 16), the rest a pseudo-random pattern; readers
 * regenerate and compare every byte, so a lost, duplicated, reordered, truncated or
 * overwritten message is caught and named.
 *
 *  a. ordered delivery: a half-duplex pair sends FH_TEST_RPIPE_MSGS messages per pair
 *     (default 100000 at 2 ranks, 100000/(np/2) but at least 5000 above) of 0..16 KiB
 *     (exactly 0 and exactly the width included). The writer spins randomly, mixes
 *     rmalloc and try_rmalloc, sometimes allocates a batch out of order and writes it
 *     in order, sometimes cancels an allocation (writer rfree). The reader mixes rread
 *     and try_rread, holds up to 8 messages and frees them out of order after random
 *     delays, re-checking each held message's bytes before freeing it (flow control
 *     must never overwrite a held message) and that held messages never overlap.
 *  b. the same, shorter, for each policy (next/first/best/worst fit), push and pull,
 *     with the writer alternating between the even and the odd rank.
 *  c. heap exhaustion: try_rmalloc fills the reader's heap until FH_NOT_READY; the
 *     count matches width/extent or the outstanding cap min(width/64, 1024), and
 *     rpipe_stats' heap fields agree. Held (read, unfreed) messages keep the heap
 *     full; freeing every other message fragments it (largest free = one extent);
 *     a blocked rpipe_rmalloc returns once the reader frees, with no reader progress;
 *     a full-width message fits once the heap is empty.
 *  d. full duplex: both ends RPIPE_BOTH write and read N messages interleaved (push,
 *     then pull), never blocking while the peer might wait on them.
 *  e. all-to-all: every rank opens a full-duplex pipe to every other rank and sends K
 *     messages to each, round-robin, reading from all; per-pipe order and source are
 *     checked. Opens go in increasing peer order: then every rank handles its pairs
 *     in increasing (min rank, max rank) order, so the smallest unfinished pair
 *     always has both ends waiting on it and no cycle of waits can form. (Closes do
 *     not wait for the peer; test_rpipe_close_order closes in other orders.)
 *  f. close: calls on a closed handle give FH_ERR_STATE (rmem NULL); a writer blocked
 *     in rpipe_rmalloc fails with FH_ERR_STATE when the reader closes, a reader blocked
 *     in rpipe_rread on an empty pipe when the writer closes; once the reader's
 *     close arrived, the writer's rwrite and rmalloc fail even with room left; a reader reads
 *     what was written before the writer closed, then rpipe_rread fails with
 *     FH_ERR_STATE (push and pull); closing with messages unread works and the pair
 *     opens again; 40 open/close cycles of a 4 MiB pipe leak no library heap.
 *  g. three pipes open at once between one pair, messages interleaved across them,
 *     each stream intact.
 *
 * A watchdog (alarm) names the phase if one hangs. Run: mpirun -np 2|4|8 test_rpipe */
#include "common.h"
#include <unistd.h>

static fh_ctx_t *ctx;
static int me, np;
static uint64_t rng; /* timing and choices only; message contents depend on seq */
static int pipe_no;  /* pipes opened so far by the pair phases (same within a pair; all_to_all
                        makes it the same on every rank, since an odd rank out skips pair phases) */

/* ---------------- helpers ---------------- */
static unsigned rnd(unsigned n) { return (unsigned)(rng_next(&rng) % n); }

static volatile uint64_t spin_sink;
static void spin(unsigned iters) {
  for (unsigned i = 0; i < iters; i++) spin_sink += i;
}
/* A random short busy wait, most often none. */
static void maybe_spin(void) {
  unsigned r = rnd(16);
  if (r < 10) return;
  spin(r < 15 ? rnd(500) : rnd(20000));
}

#define ULL(x) ((unsigned long long)(x))
/* rpipe_stats, with the heap fields' own consistency checked. */
static rpipe_stats_t stats_of(rpipe_t *p) {
  rpipe_stats_t st;
  memset(&st, 0, sizeof st);
  CHECK_OK(rpipe_stats(p, &st));
  CHECK(st.heap_largest_free <= st.heap_free_bytes && st.heap_free_bytes <= st.max_message &&
            st.heap_fragmentation >= 0.0 && st.heap_fragmentation < 1.0 &&
            (st.heap_free_bytes != 0 || st.heap_fragmentation == 0.0),
        "inconsistent heap stats: free %llu largest %llu max_message %llu fragmentation %g",
        ULL(st.heap_free_bytes), ULL(st.heap_largest_free), ULL(st.max_message), st.heap_fragmentation);
  return st;
}

/* ---------------- message format ---------------- */
/* Length of message `seq` of stream `key`: 0 every 97th, the full width every 89th,
 * otherwise uniform 0..width, <= 64, <= 1024, or log-uniform. */
static size_t msg_len(uint64_t seq, uint64_t key, size_t width) {
  if (seq % 97 == 0) return 0;
  if (seq % 89 == 0) return width;
  uint64_t h = mix64(seq * 0x2545F4914F6CDD1DULL ^ key);
  uint64_t v = h >> 8;
  size_t n;
  switch (h & 3) {
  case 0: n = (size_t)(v % (width + 1)); break;
  case 1: n = (size_t)(v % 65); break;
  case 2: n = (size_t)(v % 1025); break;
  default: {
    unsigned bits = 0;
    while (((size_t)1 << (bits + 1)) <= width) bits++;
    unsigned b = (unsigned)(v % (bits + 1));
    n = (size_t)((v >> 8) % (((uint64_t)1 << b) + 1));
    break;
  }
  }
  return n > width ? width : n;
}

/* Byte stream of message `seq` of stream `key` (the header overwrites its start). */
static void pattern(unsigned char *p, size_t len, uint64_t seq, uint64_t key) {
  uint64_t s = mix64(key ^ mix64(seq)) | 1;
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    s ^= s >> 12; s ^= s << 25; s ^= s >> 27;
    memcpy(p + i, &s, 8);
  }
  if (i < len) {
    s ^= s >> 12; s ^= s << 25; s ^= s >> 27;
    memcpy(p + i, &s, len - i);
  }
}
static void fill_msg(unsigned char *p, size_t len, uint64_t seq, uint64_t key, int src) {
  pattern(p, len, seq, key);
  if (len >= 8) memcpy(p, &seq, 8);
  if (len >= 16) {
    uint32_t h[2] = {(uint32_t)src, (uint32_t)len};
    memcpy(p + 8, h, 8);
  }
}

static unsigned char *scratch; /* width-sized, for the expected bytes */
static size_t scratch_len;
static void need_scratch(size_t n) {
  if (n <= scratch_len) return;
  free(scratch);
  scratch = malloc(n);
  CHECK(scratch != NULL, "malloc(%zu)", n);
  scratch_len = n;
}

/* Check message `seq` of stream `key` from `src`: length, header, every byte. */
static void check_msg(const char *what, const unsigned char *p, size_t len, uint64_t seq, uint64_t key,
                      int src, size_t width) {
  size_t want = msg_len(seq, key, width);
  if (len >= 8) {
    uint64_t got;
    memcpy(&got, p, 8);
    if (got != seq)
      FAILF("%s: from rank %d: message #%llu arrived where #%llu was expected (missing, duplicated or "
            "reordered), %zu bytes", what, src, ULL(got), ULL(seq), len);
  }
  if (len != want) FAILF("%s: from rank %d: message #%llu has %zu bytes, expected %zu", what, src, ULL(seq), len, want);
  if (len >= 16) {
    uint32_t h[2];
    memcpy(h, p + 8, 8);
    if (h[0] != (uint32_t)src || h[1] != (uint32_t)len)
      FAILF("%s: message #%llu says it is from rank %u with %u bytes; expected rank %d, %zu bytes", what,
            ULL(seq), h[0], h[1], src, len);
  }
  need_scratch(width + 1);
  fill_msg(scratch, len, seq, key, src);
  if (len && memcmp(scratch, p, len) != 0) {
    size_t i = 0;
    while (p[i] == scratch[i]) i++;
    FAILF("%s: from rank %d: message #%llu (%zu bytes) byte %zu is 0x%02x, expected 0x%02x", what, src, ULL(seq),
          len, i, p[i], scratch[i]);
  }
}

static uint64_t stream_key(int writer, int reader, int pipe) {
  return mix64(((uint64_t)pipe << 40) ^ ((uint64_t)writer << 20) ^ (uint64_t)reader ^ 0xF1EE);
}

/* ---------------- reader's held messages ---------------- */
typedef struct {
  rpipe_addr_t addr;
  const unsigned char *ptr;
  size_t len;
  uint64_t seq;
} held_t;
#define HOLD_MAX 16
typedef struct {
  held_t h[HOLD_MAX];
  int n;
  int target;
} holds_t;

/* Free `count` of the held messages (random ones), re-checking each first. */
static void free_some(rpipe_t *p, holds_t *hs, int count, const char *what, uint64_t key, int src, size_t width) {
  while (count-- > 0 && hs->n > 0) {
    int i = (int)rnd((unsigned)hs->n);
    held_t m = hs->h[i];
    hs->h[i] = hs->h[--hs->n];
    maybe_spin();
    /* Still intact while held: the writer must not reuse the space before the free. */
    const unsigned char *q = rpipe_rmem(p, m.addr);
    CHECK(q == m.ptr, "%s: rmem of held message #%llu changed (%p, was %p)", what, ULL(m.seq), (const void *)q,
          (const void *)m.ptr);
    check_msg(what, m.ptr, m.len, m.seq, key, src, width);
    CHECK_OK(rpipe_rfree(p, m.addr));
    if (rnd(64) == 0) CHECK(rpipe_rmem(p, m.addr) == NULL, "%s: rmem of a freed message is not NULL", what);
  }
}

/* Take a message just read: check it, check it overlaps no held one, hold it. */
static void take(rpipe_t *p, holds_t *hs, rpipe_addr_t a, size_t len, uint64_t seq, const char *what, uint64_t key,
                 int src, size_t width) {
  const unsigned char *q = rpipe_rmem(p, a);
  CHECK(q != NULL, "%s: rmem of message #%llu just read is NULL", what, ULL(seq));
  check_msg(what, q, len, seq, key, src, width);
  size_t ext = len ? len : 1;
  for (int i = 0; i < hs->n; i++) {
    size_t e2 = hs->h[i].len ? hs->h[i].len : 1;
    if (hs->h[i].addr == a || (q < hs->h[i].ptr + e2 && hs->h[i].ptr < q + ext))
      FAILF("%s: message #%llu at %p+%zu overlaps held message #%llu at %p+%zu", what, ULL(seq), (const void *)q,
            len, ULL(hs->h[i].seq), (const void *)hs->h[i].ptr, hs->h[i].len);
  }
  if (hs->n == HOLD_MAX) free_some(p, hs, 1, what, key, src, width);
  hs->h[hs->n++] = (held_t){a, q, len, seq};
}

/* ---------------- a/b: half-duplex stream ---------------- */
typedef struct {
  long rmalloc_notready, batches, cancels, read_notready, blocking_reads, max_held;
} stream_counts_t;

static void writer_one(rpipe_t *p, uint64_t seq, uint64_t key, size_t width, stream_counts_t *c) {
  size_t len = msg_len(seq, key, width);
  rpipe_addr_t a;
  if (rnd(2)) {
    CHECK_OK(rpipe_rmalloc(p, len, &a));
  } else {
    int rc;
    while ((rc = rpipe_try_rmalloc(p, len, &a)) == FH_NOT_READY) {
      c->rmalloc_notready++;
      maybe_spin();
    }
    CHECK_OK(rc);
  }
  unsigned char *m = rpipe_rmem(p, a);
  CHECK(m != NULL, "rmem of a fresh %zu-byte allocation is NULL", len);
  fill_msg(m, len, seq, key, me);
  maybe_spin();
  CHECK_OK(rpipe_rwrite(p, a));
  if (rnd(128) == 0) CHECK(rpipe_rmem(p, a) == NULL, "writer: rmem after rwrite is not NULL");
}

/* Allocate messages seq..seq+k-1 in a shuffled order with try_rmalloc, then fill and
 * write them in order. Returns 0 (cancelling what it got) when the heap is full. */
static int writer_batch(rpipe_t *p, uint64_t seq, int k, uint64_t key, size_t width, stream_counts_t *c) {
  rpipe_addr_t a[4];
  int order[4], got[4] = {0, 0, 0, 0};
  for (int i = 0; i < k; i++) order[i] = i;
  for (int i = k - 1; i > 0; i--) {
    int j = (int)rnd((unsigned)i + 1), t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  for (int i = 0; i < k; i++) {
    int s = order[i];
    int rc = rpipe_try_rmalloc(p, msg_len(seq + (uint64_t)s, key, width), &a[s]);
    if (rc == FH_NOT_READY) {
      c->rmalloc_notready++;
      for (int j = 0; j < k; j++)
        if (got[j]) {
          CHECK_OK(rpipe_rfree(p, a[j])); /* cancel: never written */
          CHECK(rpipe_rmem(p, a[j]) == NULL, "writer: rmem of a cancelled allocation is not NULL");
        }
      c->cancels++;
      return 0;
    }
    CHECK_OK(rc);
    got[s] = 1;
  }
  for (int s = 0; s < k; s++) {
    size_t len = msg_len(seq + (uint64_t)s, key, width);
    unsigned char *m = rpipe_rmem(p, a[s]);
    CHECK(m != NULL, "rmem of a batch allocation is NULL");
    fill_msg(m, len, seq + (uint64_t)s, key, me);
  }
  for (int s = 0; s < k; s++) {
    maybe_spin();
    CHECK_OK(rpipe_rwrite(p, a[s]));
  }
  c->batches++;
  return 1;
}

static void stream_half(int peer, int writer, long n, size_t width, int mode, int policy, const char *what) {
  int wr = writer ? me : peer, rd = writer ? peer : me;
  uint64_t key = stream_key(wr, rd, ++pipe_no);
  rpipe_t *p;
  CHECK_OK(rpipe_open(ctx, peer, writer ? RPIPE_WRITER : RPIPE_READER, width, mode, policy, &p));
  stream_counts_t c = {0, 0, 0, 0, 0, 0};
  uint64_t bytes = 0;
  if (writer) {
    uint64_t seq = 1;
    while (seq <= (uint64_t)n) {
      maybe_spin();
      unsigned r = rnd(100);
      if (r < 4 && seq + 4 <= (uint64_t)n) {
        int k = 2 + (int)rnd(3);
        if (writer_batch(p, seq, k, key, width, &c)) {
          for (int s = 0; s < k; s++) bytes += msg_len(seq + (uint64_t)s, key, width);
          seq += (uint64_t)k;
          continue;
        }
      } else if (r < 6) { /* allocate something and cancel it */
        rpipe_addr_t a;
        size_t len = rnd((unsigned)width + 1);
        int rc = rpipe_try_rmalloc(p, len, &a);
        if (rc == FH_OK) {
          unsigned char *m = rpipe_rmem(p, a);
          CHECK(m != NULL, "rmem of an allocation to cancel is NULL");
          memset(m, 0xEE, len);
          CHECK_OK(rpipe_rfree(p, a));
          c.cancels++;
        } else {
          CHECK_RC(rc, FH_NOT_READY);
        }
      }
      writer_one(p, seq, key, width, &c);
      bytes += msg_len(seq, key, width);
      seq++;
    }
    rpipe_stats_t st = stats_of(p);
    CHECK(st.messages_written == (uint64_t)n && st.bytes_written == bytes,
          "%s: writer stats say %llu messages / %llu bytes written, expected %ld / %llu", what,
          ULL(st.messages_written), ULL(st.bytes_written), n, ULL(bytes));
    CHECK(st.messages_read == 0 && st.refused == 0, "%s: writer stats read %llu refused %llu", what,
          ULL(st.messages_read), ULL(st.refused));
    CHECK(st.max_message == width, "%s: max_message %llu, width %zu", what, ULL(st.max_message), width);
  } else {
    holds_t hs = {.n = 0, .target = 1};
    uint64_t seq = 1;
    while (seq <= (uint64_t)n) {
      maybe_spin();
      rpipe_addr_t a = 0;
      size_t len = 0;
      int rc;
      if (hs.n == 0 && rnd(2)) {
        rc = rpipe_rread(p, &a, &len); /* holding nothing: the writer can always go on */
        c.blocking_reads++;
      } else {
        rc = rpipe_try_rread(p, &a, &len);
      }
      if (rc == FH_NOT_READY) {
        /* The writer may be waiting for space: usually free some held messages (all,
         * or a random few), sometimes keep holding a while longer. */
        c.read_notready++;
        if (hs.n > 0 && rnd(4) != 0) free_some(p, &hs, rnd(2) ? hs.n : 1 + (int)rnd((unsigned)hs.n), what, key, peer, width);
        continue;
      }
      CHECK_OK(rc);
      take(p, &hs, a, len, seq, what, key, peer, width);
      if (hs.n > c.max_held) c.max_held = hs.n;
      bytes += len;
      seq++;
      if (hs.n >= hs.target) {
        free_some(p, &hs, rnd(2) ? hs.n : 1 + (int)rnd((unsigned)hs.n), what, key, peer, width);
        hs.target = 1 + (int)rnd(8);
      }
    }
    free_some(p, &hs, hs.n, what, key, peer, width);
    rpipe_addr_t a;
    size_t len;
    CHECK_RC(rpipe_try_rread(p, &a, &len), FH_NOT_READY);
    rpipe_stats_t st = stats_of(p);
    CHECK(st.messages_read == (uint64_t)n && st.bytes_read == bytes,
          "%s: reader stats say %llu messages / %llu bytes read, expected %ld / %llu", what, ULL(st.messages_read),
          ULL(st.bytes_read), n, ULL(bytes));
    CHECK(st.messages_written == 0 && st.refused == 0 && st.heap_allocations == 0,
          "%s: reader stats written %llu refused %llu allocations %llu", what, ULL(st.messages_written),
          ULL(st.refused), ULL(st.heap_allocations));
  }
  CHECK_OK(rpipe_close(p));
  if (getenv("FH_TEST_VERBOSE"))
    printf("[rank %d] %s: %s notready rmalloc %ld rread %ld, batches %ld cancels %ld blocking reads %ld, "
           "most held %ld\n", me, what, writer ? "writer" : "reader", c.rmalloc_notready, c.read_notready,
           c.batches, c.cancels, c.blocking_reads, c.max_held);
}

/* ---------------- c: heap exhaustion ---------------- */
/* MPI coordination inside a pair (no firehose progress needed: frees are one-sided). */
static void pair_sync(int peer) {
  int x = 0, y;
  MPI_Sendrecv(&x, 1, MPI_INT, peer, 77, &y, 1, MPI_INT, peer, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

static size_t extent_of(size_t n) { return (n ? (n + 63) / 64 : 1) * 64; }

static void exhaust(int peer, int writer, size_t width, size_t n, int mode, int policy, const char *what) {
  int wr = writer ? me : peer, rd = writer ? peer : me;
  uint64_t key = stream_key(wr, rd, ++pipe_no);
  size_t ext = extent_of(n);
  size_t cap = width / 64 < 1024 ? width / 64 : 1024;
  size_t expect = width / ext < cap ? width / ext : cap;
  int heap_bound = width / ext <= cap; /* the heap, not the notice cap, is what runs out */
  rpipe_t *p;
  CHECK_OK(rpipe_open(ctx, peer, writer ? RPIPE_WRITER : RPIPE_READER, width, mode, policy, &p));
  rpipe_addr_t *addrs = malloc(sizeof *addrs * (expect + 1));
  if (writer) {
    rpipe_stats_t st = stats_of(p);
    CHECK(st.heap_free_bytes == width && st.heap_largest_free == width && st.heap_allocations == 0 &&
              st.max_message == width && st.heap_fragmentation == 0.0,
          "%s: fresh heap: free %llu largest %llu allocations %llu max %llu frag %g (width %zu)", what,
          ULL(st.heap_free_bytes), ULL(st.heap_largest_free), ULL(st.heap_allocations), ULL(st.max_message),
          st.heap_fragmentation, width);
    size_t count = 0;
    int rc;
    while ((rc = rpipe_try_rmalloc(p, n, &addrs[count])) == FH_OK) {
      count++;
      CHECK(count <= expect, "%s: more than %zu %zu-byte allocations fit a %zu-byte heap", what, expect, n, width);
    }
    CHECK_RC(rc, FH_NOT_READY);
    CHECK(count == expect, "%s: %zu allocations of %zu bytes fit, expected %zu (width %zu, extent %zu, cap %zu)",
          what, count, n, expect, width, ext, cap);
    st = stats_of(p);
    CHECK(st.heap_allocations == count && st.heap_free_bytes == width - count * ext && st.rmalloc_waits == 1,
          "%s: full heap: allocations %llu free %llu waits %llu; expected %zu, %zu, 1", what,
          ULL(st.heap_allocations), ULL(st.heap_free_bytes), ULL(st.rmalloc_waits), count, width - count * ext);
    CHECK(st.heap_largest_free <= st.heap_free_bytes && (heap_bound ? st.heap_largest_free < ext : 1),
          "%s: full heap: largest free %llu, free %llu, extent %zu", what, ULL(st.heap_largest_free),
          ULL(st.heap_free_bytes), ext);
    for (size_t i = 0; i < count; i++) {
      unsigned char *m = rpipe_rmem(p, addrs[i]);
      CHECK(m != NULL, "%s: rmem of allocation %zu is NULL", what, i);
      for (size_t j = 0; j < i; j++) CHECK(addrs[j] != addrs[i], "%s: rmalloc returned an address twice", what);
      fill_msg(m, n, i + 1, key, me);
    }
    for (size_t i = 0; i < count; i++) CHECK_OK(rpipe_rwrite(p, addrs[i]));
    pair_sync(peer); /* 1: all written */
    pair_sync(peer); /* 2: all read, none freed */
    rpipe_addr_t a;
    CHECK_RC(rpipe_try_rmalloc(p, n, &a), FH_NOT_READY);
    CHECK_RC(rpipe_try_rmalloc(p, 0, &a), FH_NOT_READY);
    st = stats_of(p);
    CHECK(st.heap_allocations == count && st.messages_written == count,
          "%s: held heap: allocations %llu written %llu, expected %zu", what, ULL(st.heap_allocations),
          ULL(st.messages_written), count);
    pair_sync(peer); /* 3: reader frees every other message */
    pair_sync(peer); /* 4: freed */
    size_t freed = count / 2;
    CHECK_RC(rpipe_try_rmalloc(p, width, &a), FH_NOT_READY); /* syncs the view; never fits */
    st = stats_of(p);
    CHECK(st.heap_allocations == count - freed && st.heap_free_bytes == width - (count - freed) * ext,
          "%s: half freed: allocations %llu free %llu; expected %zu, %zu", what, ULL(st.heap_allocations),
          ULL(st.heap_free_bytes), count - freed, width - (count - freed) * ext);
    if (heap_bound && count >= 4) {
      /* Allocated back to back, every other one freed: the holes are one extent each. */
      CHECK(st.heap_largest_free == ext && st.heap_fragmentation > 0.0,
            "%s: fragmented heap: largest free %llu (extent %zu), fragmentation %g", what,
            ULL(st.heap_largest_free), ext, st.heap_fragmentation);
      CHECK_RC(rpipe_try_rmalloc(p, ext + 1, &a), FH_NOT_READY);
    }
    CHECK_OK(rpipe_try_rmalloc(p, n, &a)); /* a hole fits one */
    CHECK_OK(rpipe_rfree(p, a));           /* cancel it */
    /* Take the free space back (cap permitting), then block on the next rmalloc until
     * the reader frees one more (it sleeps first: it must not need to progress). */
    size_t extra = 0;
    while (rpipe_try_rmalloc(p, n, &addrs[extra]) == FH_OK) extra++;
    CHECK(extra == freed, "%s: %zu allocations fit the holes, expected %zu", what, extra, freed);
    for (size_t i = 0; i < extra; i++) CHECK_OK(rpipe_rfree(p, addrs[i]));
    CHECK_RC(rpipe_try_rmalloc(p, n, &a), FH_OK); /* cancelled space is free again at once */
    CHECK_OK(rpipe_rfree(p, a));
    /* Fill the holes again, then block until the reader frees one more message: it
     * sleeps first and frees with no firehose progress (the writer collects by RDMA). */
    for (size_t i = 0; i < freed; i++) CHECK_OK(rpipe_try_rmalloc(p, n, &addrs[i]));
    CHECK_RC(rpipe_try_rmalloc(p, n, &a), FH_NOT_READY);
    uint64_t waits0 = stats_of(p).rmalloc_waits;
    pair_sync(peer); /* 5: about to block */
    rpipe_addr_t b;
    CHECK_OK(rpipe_rmalloc(p, n, &b));
    if (getenv("FH_TEST_VERBOSE"))
      printf("[rank %d] %s: blocking rmalloc %s\n", me, what,
             stats_of(p).rmalloc_waits > waits0 ? "waited for the free" : "found the free at once");
    for (size_t i = 0; i < freed; i++) CHECK_OK(rpipe_rfree(p, addrs[i]));
    CHECK_OK(rpipe_rfree(p, b));
    pair_sync(peer); /* 6: reader freed all */
    /* Empty heap: one full-width message fits. */
    CHECK_OK(rpipe_rmalloc(p, width, &a));
    st = stats_of(p);
    CHECK(st.heap_allocations == 1 && st.heap_free_bytes == 0, "%s: full-width allocation: allocations %llu free %llu",
          what, ULL(st.heap_allocations), ULL(st.heap_free_bytes));
    unsigned char *m = rpipe_rmem(p, a);
    CHECK(m != NULL, "%s: rmem of the full-width allocation is NULL", what);
    fill_msg(m, width, 1, key ^ 1, me);
    CHECK_OK(rpipe_rwrite(p, a));
    CHECK_OK(rpipe_rmalloc(p, width, &a)); /* once the reader freed it */
    CHECK_OK(rpipe_rfree(p, a));
    st = stats_of(p);
    CHECK(st.heap_allocations == 0 && st.heap_free_bytes == width && st.heap_largest_free == width &&
              st.messages_written == count + 1 && st.refused == 0,
          "%s: end: allocations %llu free %llu largest %llu written %llu refused %llu", what,
          ULL(st.heap_allocations), ULL(st.heap_free_bytes), ULL(st.heap_largest_free), ULL(st.messages_written),
          ULL(st.refused));
  } else {
    pair_sync(peer); /* 1 */
    size_t count = expect;
    const unsigned char **ptrs = malloc(sizeof *ptrs * count);
    for (size_t i = 0; i < count; i++) {
      size_t len;
      CHECK_OK(rpipe_rread(p, &addrs[i], &len));
      CHECK(len == n, "%s: message %zu has %zu bytes, expected %zu", what, i + 1, len, n);
      ptrs[i] = rpipe_rmem(p, addrs[i]);
      CHECK(ptrs[i] != NULL, "%s: rmem of message %zu is NULL", what, i + 1);
      if (n >= 8) {
        uint64_t s;
        memcpy(&s, ptrs[i], 8);
        CHECK(s == i + 1, "%s: message #%llu arrived where #%zu was expected", what, ULL(s), i + 1);
      }
    }
    rpipe_addr_t a;
    size_t len;
    CHECK_RC(rpipe_try_rread(p, &a, &len), FH_NOT_READY);
    pair_sync(peer); /* 2 */
    pair_sync(peer); /* 3 */
    for (size_t i = 1; i < count; i += 2) {
      need_scratch(width + 1);
      fill_msg(scratch, n, i + 1, key, peer);
      CHECK(memcmp(scratch, ptrs[i], n) == 0, "%s: held message %zu changed", what, i + 1);
      CHECK_OK(rpipe_rfree(p, addrs[i]));
    }
    pair_sync(peer); /* 4 */
    pair_sync(peer); /* 5: the writer blocks; free one after a while, with no firehose call */
    usleep(50000);
    need_scratch(width + 1);
    for (size_t i = 0; i < count; i += 2) {
      fill_msg(scratch, n, i + 1, key, peer);
      CHECK(memcmp(scratch, ptrs[i], n) == 0, "%s: held message %zu changed", what, i + 1);
      CHECK_OK(rpipe_rfree(p, addrs[i]));
    }
    pair_sync(peer); /* 6 */
    CHECK_OK(rpipe_rread(p, &a, &len));
    CHECK(len == width, "%s: full-width message has %zu bytes, expected %zu", what, len, width);
    const unsigned char *q = rpipe_rmem(p, a);
    CHECK(q != NULL, "%s: rmem of the full-width message is NULL", what);
    need_scratch(width + 1);
    fill_msg(scratch, width, 1, key ^ 1, peer);
    CHECK(memcmp(scratch, q, width) == 0, "%s: full-width message corrupted", what);
    CHECK_OK(rpipe_rfree(p, a));
    rpipe_stats_t st = stats_of(p);
    CHECK(st.messages_read == count + 1, "%s: reader read %llu, expected %zu", what, ULL(st.messages_read),
          count + 1);
    free(ptrs);
  }
  free(addrs);
  CHECK_OK(rpipe_close(p));
}

/* ---------------- d/e: full-duplex exchange over several pipes ---------------- */
typedef struct {
  rpipe_t *p;
  int peer;
  uint64_t key_out, key_in;
  long sent, recvd;
  holds_t hs;
} fd_t;

static void fd_free_all(fd_t *f, size_t width) {
  free_some(f->p, &f->hs, f->hs.n, "exchange", f->key_in, f->peer, width);
}

/* Each pipe: send k messages, receive k. Never blocks while a peer may wait on us:
 * rmalloc is only tried; a blocking rread is used only once everything is sent and
 * nothing is held (then every peer either runs or has sent us everything). */
static void exchange(fd_t *f, int nf, long k, size_t width, const char *what) {
  long left = 0;
  for (int i = 0; i < nf; i++) left += 2 * k;
  long sends_left = (long)nf * k;
  int start = 0;
  while (left > 0) {
    int progressed = 0;
    for (int ii = 0; ii < nf; ii++) {
      fd_t *x = &f[(start + ii) % nf];
      if (x->sent < k) {
        uint64_t seq = (uint64_t)x->sent + 1;
        size_t len = msg_len(seq, x->key_out, width);
        rpipe_addr_t a;
        int rc = rpipe_try_rmalloc(x->p, len, &a);
        if (rc == FH_OK) {
          unsigned char *m = rpipe_rmem(x->p, a);
          CHECK(m != NULL, "%s: rmem of an allocation to rank %d is NULL", what, x->peer);
          fill_msg(m, len, seq, x->key_out, me);
          maybe_spin();
          CHECK_OK(rpipe_rwrite(x->p, a));
          x->sent++;
          sends_left--;
          left--;
          progressed = 1;
        } else {
          CHECK_RC(rc, FH_NOT_READY);
        }
      }
      int reads = 1 + (int)rnd(4);
      for (int r = 0; r < reads && x->recvd < k; r++) {
        rpipe_addr_t a;
        size_t len;
        int rc = rpipe_try_rread(x->p, &a, &len);
        if (rc == FH_NOT_READY) {
          fd_free_all(x, width);
          break;
        }
        CHECK_OK(rc);
        x->recvd++;
        left--;
        progressed = 1;
        take(x->p, &x->hs, a, len, (uint64_t)x->recvd, what, x->key_in, x->peer, width);
        if (x->hs.n >= x->hs.target) {
          free_some(x->p, &x->hs, x->hs.n, what, x->key_in, x->peer, width);
          x->hs.target = 1 + (int)rnd(6);
        }
      }
    }
    start = (start + 1) % nf;
    if (!progressed) {
      for (int i = 0; i < nf; i++) fd_free_all(&f[i], width);
      if (sends_left == 0 && rnd(4) == 0) {
        for (int i = 0; i < nf; i++) {
          fd_t *x = &f[i];
          if (x->recvd >= k) continue;
          rpipe_addr_t a;
          size_t len;
          CHECK_OK(rpipe_rread(x->p, &a, &len));
          x->recvd++;
          left--;
          take(x->p, &x->hs, a, len, (uint64_t)x->recvd, what, x->key_in, x->peer, width);
          fd_free_all(x, width);
          break;
        }
      }
    }
  }
  for (int i = 0; i < nf; i++) {
    fd_free_all(&f[i], width);
    rpipe_addr_t a;
    size_t len;
    /* Nothing more: not ready, or the peer finished and closed its end already. */
    int rc = rpipe_try_rread(f[i].p, &a, &len);
    CHECK(rc == FH_NOT_READY || rc == FH_ERR_STATE, "%s: pipe to rank %d: try_rread after the last message gave %d",
          what, f[i].peer, rc);
    rpipe_stats_t st = stats_of(f[i].p);
    CHECK(st.messages_written == (uint64_t)k && st.messages_read == (uint64_t)k && st.refused == 0,
          "%s: pipe to rank %d: written %llu read %llu refused %llu, expected %ld each", what, f[i].peer,
          ULL(st.messages_written), ULL(st.messages_read), ULL(st.refused), k);
  }
}

static void open_fd(fd_t *x, int peer, size_t width, int mode, int policy, int pipe) {
  memset(x, 0, sizeof *x);
  x->peer = peer;
  x->key_out = stream_key(me, peer, pipe);
  x->key_in = stream_key(peer, me, pipe);
  x->hs.target = 1;
  CHECK_OK(rpipe_open(ctx, peer, RPIPE_BOTH, width, RPIPE_FULL_DUPLEX | mode, policy, &x->p));
}

static void full_duplex(int peer, long n, size_t width, int mode, int policy, const char *what) {
  fd_t f;
  open_fd(&f, peer, width, mode, policy, ++pipe_no);
  /* Directions differ: an allocation here is not the slot of a message there. */
  rpipe_addr_t a;
  CHECK_OK(rpipe_rmalloc(f.p, 8, &a));
  void *m = rpipe_rmem(f.p, a);
  CHECK(m != NULL, "%s: rmem of an allocation is NULL", what);
  CHECK_OK(rpipe_rfree(f.p, a));
  exchange(&f, 1, n, width, what);
  CHECK_OK(rpipe_close(f.p));
}

static void all_to_all(long k, size_t width, int mode, int policy, const char *what) {
  fd_t *f = calloc((size_t)np, sizeof *f);
  int nf = 0;
  /* The rank left out of the pair phases at an odd count opened fewer pipes. */
  CHECK(MPI_Allreduce(MPI_IN_PLACE, &pipe_no, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD) == MPI_SUCCESS, "allreduce");
  pipe_no++;
  for (int q = 0; q < np; q++) /* increasing peer order: deadlock-free, see the top */
    if (q != me) open_fd(&f[nf++], q, width, mode, policy, pipe_no);
  /* Round-robin starting after this rank, so ranks do not all hit rank 0 first. */
  fd_t *g = malloc(sizeof *g * (size_t)nf);
  for (int i = 0; i < nf; i++) g[i] = f[(i + me) % nf];
  exchange(g, nf, k, width, what);
  for (int i = 0; i < nf; i++) CHECK_OK(rpipe_close(f[i].p));
  free(g);
  free(f);
}

/* ---------------- f: close ---------------- */
static void check_dead(rpipe_t *p, rpipe_addr_t old) {
  rpipe_addr_t a;
  size_t len;
  rpipe_stats_t st;
  CHECK_RC(rpipe_rmalloc(p, 8, &a), FH_ERR_STATE);
  CHECK_RC(rpipe_try_rmalloc(p, 8, &a), FH_ERR_STATE);
  CHECK_RC(rpipe_rwrite(p, old), FH_ERR_STATE);
  CHECK_RC(rpipe_rread(p, &a, &len), FH_ERR_STATE);
  CHECK_RC(rpipe_try_rread(p, &a, &len), FH_ERR_STATE);
  CHECK_RC(rpipe_rfree(p, old), FH_ERR_STATE);
  CHECK_RC(rpipe_stats(p, &st), FH_ERR_STATE);
  CHECK(rpipe_rmem(p, old) == NULL, "rmem on a closed pipe is not NULL");
  CHECK_RC(rpipe_close(p), FH_ERR_STATE);
}

static void close_tests(int peer, int writer) {
  int role = writer ? RPIPE_WRITER : RPIPE_READER;
  rpipe_t *p;
  rpipe_addr_t a, kept = 0;
  size_t len;
  /* f1: use after close */
  CHECK_OK(rpipe_open(ctx, peer, role, 4096, RPIPE_HALF_DUPLEX, RPIPE_NEXT_FIT, &p));
  if (writer) {
    CHECK_OK(rpipe_rmalloc(p, 100, &a));
    memset(rpipe_rmem(p, a), 7, 100);
    CHECK_OK(rpipe_rwrite(p, a));
    CHECK_OK(rpipe_rmalloc(p, 100, &kept)); /* still allocated at close */
  } else {
    CHECK_OK(rpipe_rread(p, &a, &len));
    CHECK(len == 100, "close: message has %zu bytes", len);
    kept = a; /* still held at close */
  }
  CHECK_OK(rpipe_close(p));
  check_dead(p, kept);
  ++pipe_no;

  /* f2: the reader holds everything and closes; the blocked writer fails. */
  CHECK_OK(rpipe_open(ctx, peer, role, 4096, RPIPE_HALF_DUPLEX, RPIPE_FIRST_FIT, &p));
  if (writer) {
    int count = 0;
    while (rpipe_try_rmalloc(p, 200, &a) == FH_OK) {
      CHECK_OK(rpipe_rwrite(p, a));
      count++;
    }
    CHECK(count == 4096 / 256, "close: %d 200-byte messages fit a 4 KiB heap", count);
    MPI_Send(&count, 1, MPI_INT, peer, 78, MPI_COMM_WORLD);
    CHECK_RC(rpipe_rmalloc(p, 200, &a), FH_ERR_STATE); /* returns when the reader closes */
    CHECK_OK(rpipe_close(p));
  } else {
    int count;
    MPI_Recv(&count, 1, MPI_INT, peer, 78, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (int i = 0; i < count; i++) CHECK_OK(rpipe_rread(p, &a, &len));
    usleep(20000); /* let the writer block */
    CHECK_OK(rpipe_close(p));
  }
  check_dead(p, a);
  ++pipe_no;

  /* f2c: the reader closes with room left in the pipe. Once its close has arrived,
   * the writer's rpipe_rwrite of a message allocated before and its next
   * rpipe_try_rmalloc are refused with FH_ERR_STATE (both once returned FH_OK while
   * room was left, and the message was silently lost). */
  CHECK_OK(rpipe_open(ctx, peer, role, 65536, RPIPE_HALF_DUPLEX, RPIPE_NEXT_FIT, &p));
  if (writer) {
    rpipe_addr_t pre;
    CHECK_OK(rpipe_rmalloc(p, 64, &pre));
    memset(rpipe_rmem(p, pre), 5, 64);
    pair_sync(peer); /* allocated: the reader may close */
    pair_sync(peer); /* the reader has closed */
    for (int i = 0; i < 200; i++) { /* let its close arrive */
      CHECK_OK(fh_poll(ctx));
      usleep(500);
    }
    CHECK_RC(rpipe_rwrite(p, pre), FH_ERR_STATE);
    CHECK_RC(rpipe_try_rmalloc(p, 8, &a), FH_ERR_STATE);
    CHECK_RC(rpipe_rmalloc(p, 8, &a), FH_ERR_STATE);
    CHECK_OK(rpipe_close(p));
  } else {
    pair_sync(peer);
    CHECK_OK(rpipe_close(p));
    pair_sync(peer);
  }
  ++pipe_no;

  /* f2b: a reader blocked in rpipe_rread on an empty pipe fails when the writer closes. */
  CHECK_OK(rpipe_open(ctx, peer, role, 4096, RPIPE_HALF_DUPLEX | RPIPE_PULL, RPIPE_NEXT_FIT, &p));
  if (writer) {
    pair_sync(peer);
    usleep(20000); /* let the reader block */
    CHECK_OK(rpipe_close(p));
  } else {
    pair_sync(peer);
    CHECK_RC(rpipe_rread(p, &a, &len), FH_ERR_STATE);
    CHECK_OK(rpipe_close(p));
  }
  check_dead(p, a);
  ++pipe_no;

  /* f3: the writer writes 5 and closes; the reader reads them, then FH_ERR_STATE. */
  for (int pull = 0; pull < 2; pull++) {
    uint64_t key = stream_key(writer ? me : peer, writer ? peer : me, ++pipe_no);
    CHECK_OK(rpipe_open(ctx, peer, role, 8192, RPIPE_HALF_DUPLEX | (pull ? RPIPE_PULL : 0), RPIPE_BEST_FIT, &p));
    if (writer) {
      for (uint64_t s = 1; s <= 5; s++) {
        size_t n = msg_len(s, key, 1024);
        CHECK_OK(rpipe_rmalloc(p, n, &a));
        fill_msg(rpipe_rmem(p, a), n, s, key, me);
        CHECK_OK(rpipe_rwrite(p, a));
      }
      CHECK_OK(rpipe_close(p));
      MPI_Send(&pull, 1, MPI_INT, peer, 79, MPI_COMM_WORLD); /* closed */
    } else {
      int x;
      /* Read the first message, then wait until the writer's BYE must have
       * arrived: the rest must still be readable after it. */
      CHECK_OK(rpipe_rread(p, &a, &len));
      check_msg("close f3", rpipe_rmem(p, a), len, 1, key, peer, 1024);
      CHECK_OK(rpipe_rfree(p, a));
      double t0 = MPI_Wtime();
      while (MPI_Wtime() - t0 < 0.05) fh_poll(ctx); /* receive the BYE */
      for (uint64_t s = 2; s <= 5; s++) {
        CHECK_OK(rpipe_rread(p, &a, &len));
        check_msg("close f3 (after the writer's close)", rpipe_rmem(p, a), len, s, key, peer, 1024);
        CHECK_OK(rpipe_rfree(p, a));
      }
      CHECK_RC(rpipe_rread(p, &a, &len), FH_ERR_STATE);
      CHECK_OK(rpipe_close(p));
      MPI_Recv(&x, 1, MPI_INT, peer, 79, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    check_dead(p, a);
  }

  /* f4: close with messages unread and held, then the pair opens again. */
  CHECK_OK(rpipe_open(ctx, peer, role, 4096, RPIPE_HALF_DUPLEX, RPIPE_WORST_FIT, &p));
  if (writer) {
    for (int i = 0; i < 5; i++) {
      CHECK_OK(rpipe_rmalloc(p, 64, &a));
      CHECK_OK(rpipe_rwrite(p, a));
    }
  } else {
    CHECK_OK(rpipe_rread(p, &a, &len));
    CHECK_OK(rpipe_rfree(p, a));
    CHECK_OK(rpipe_rread(p, &a, &len)); /* held at close */
  }
  CHECK_OK(rpipe_close(p));
  ++pipe_no;
  stream_half(peer, writer, 200, 4096, RPIPE_HALF_DUPLEX, RPIPE_NEXT_FIT, "close f4: reopen");

  /* f5: 40 open/close cycles of a 4 MiB pipe (each end holds 4 MiB of the 32 MiB
   * library heap per cycle): no leak, or the ninth would fail with FH_ERR_NO_MEMORY. */
  const size_t big = (size_t)4 << 20;
  for (int i = 0; i < 40; i++) {
    uint64_t key = stream_key(writer ? me : peer, writer ? peer : me, ++pipe_no);
    CHECK_OK(rpipe_open(ctx, peer, role, big, RPIPE_HALF_DUPLEX | (i % 2 ? RPIPE_PULL : 0), RPIPE_NEXT_FIT, &p));
    size_t n = i % 8 == 0 ? big : (size_t)i * 1000;
    if (writer) {
      CHECK_OK(rpipe_rmalloc(p, n, &a));
      fill_msg(rpipe_rmem(p, a), n, 1, key, me);
      CHECK_OK(rpipe_rwrite(p, a));
    } else {
      CHECK_OK(rpipe_rread(p, &a, &len));
      CHECK(len == n, "close f5: cycle %d: %zu bytes, expected %zu", i, len, n);
      need_scratch(big + 1);
      fill_msg(scratch, n, 1, key, peer);
      CHECK(memcmp(scratch, rpipe_rmem(p, a), n) == 0, "close f5: cycle %d: message corrupted", i);
      CHECK_OK(rpipe_rfree(p, a));
    }
    CHECK_OK(rpipe_close(p));
  }
}

/* ---------------- g: several pipes per pair ---------------- */
static void several_pipes(int peer, int even) {
  /* Pipe 0: even writes (push, 4 KiB); pipe 1: odd writes (pull, 16 KiB);
   * pipe 2: full duplex (push, 8 KiB). Opened in the same order on both ends. */
  const size_t widths[3] = {4096, 16384, 8192};
  rpipe_t *p[3];
  uint64_t key[3];
  int base = pipe_no;
  pipe_no += 3;
  CHECK_OK(rpipe_open(ctx, peer, even ? RPIPE_WRITER : RPIPE_READER, widths[0], RPIPE_HALF_DUPLEX, RPIPE_FIRST_FIT,
                      &p[0]));
  CHECK_OK(rpipe_open(ctx, peer, even ? RPIPE_READER : RPIPE_WRITER, widths[1], RPIPE_PULL, RPIPE_BEST_FIT, &p[1]));
  CHECK_OK(rpipe_open(ctx, peer, RPIPE_BOTH, widths[2], RPIPE_FULL_DUPLEX, RPIPE_NEXT_FIT, &p[2]));
  const long n = 600;
  long sent[3] = {0, 0, 0}, recvd[3] = {0, 0, 0};
  int wr[3] = {even, !even, 1}, rdr[3] = {!even, even, 1};
  for (int i = 0; i < 3; i++) key[i] = stream_key(0, 0, base + 1 + i);
  uint64_t kout = key[2] ^ (uint64_t)me, kin = key[2] ^ (uint64_t)peer; /* pipe 2's two directions */
  for (;;) {
    int busy = 0;
    for (int i = 0; i < 3; i++) {
      uint64_t ko = i == 2 ? kout : key[i], ki = i == 2 ? kin : key[i];
      if (wr[i] && sent[i] < n) {
        busy = 1;
        uint64_t s = (uint64_t)sent[i] + 1;
        size_t len = msg_len(s, ko, widths[i]);
        rpipe_addr_t a;
        int rc = rpipe_try_rmalloc(p[i], len, &a);
        if (rc == FH_OK) {
          fill_msg(rpipe_rmem(p[i], a), len, s, ko, me);
          CHECK_OK(rpipe_rwrite(p[i], a));
          sent[i]++;
        } else {
          CHECK_RC(rc, FH_NOT_READY);
        }
      }
      if (rdr[i] && recvd[i] < n) {
        busy = 1;
        rpipe_addr_t a;
        size_t len;
        int rc = rpipe_try_rread(p[i], &a, &len);
        if (rc == FH_OK) {
          recvd[i]++;
          check_msg("several pipes", rpipe_rmem(p[i], a), len, (uint64_t)recvd[i], ki, peer, widths[i]);
          CHECK_OK(rpipe_rfree(p[i], a));
        } else {
          CHECK_RC(rc, FH_NOT_READY);
        }
      }
    }
    if (!busy) break;
  }
  for (int i = 0; i < 3; i++) CHECK_OK(rpipe_close(p[i]));
}

/* ---------------- main ---------------- */
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  ctx = fh_test_init(&me, &np);
  watchdog_init(ctx, 44);
  rng = mix64(0x5EED0000ULL + (uint64_t)me);
  int peer = me ^ 1;
  int paired = peer < np;
  int even = me % 2 == 0;
  long nmsgs = 100000 / (np / 2 > 0 ? np / 2 : 1);
  if (nmsgs < 5000) nmsgs = 5000;
  if (getenv("FH_TEST_RPIPE_MSGS")) nmsgs = atol(getenv("FH_TEST_RPIPE_MSGS"));
  long nshort = nmsgs < 3000 ? nmsgs : 3000;
  if (me == 0) {
    printf("rpipe: %d ranks, %ld messages per pair in (a), %ld per run in (b)\n", np, nmsgs, nshort);
    fflush(stdout);
  }
  const size_t W = 16384;

  begin_phase("a. ordered delivery, random sizes and speeds", 120);
  if (paired) stream_half(peer, even, nmsgs, W, RPIPE_HALF_DUPLEX, RPIPE_NEXT_FIT, "a");
  end_phase();

  static const char *pol_names[4] = {"next fit", "first fit", "best fit", "worst fit"};
  static const int pols[4] = {RPIPE_NEXT_FIT, RPIPE_FIRST_FIT, RPIPE_BEST_FIT, RPIPE_WORST_FIT};
  for (int pull = 0; pull < 2; pull++)
    for (int i = 0; i < 4; i++) {
      char name[96];
      snprintf(name, sizeof name, "b. %s, %s", pol_names[i], pull ? "pull" : "push");
      begin_phase(name, 60);
      /* 4 KiB or 16 KiB, writer alternating between the even and the odd rank. */
      size_t w = i % 2 ? 4096 : W;
      if (paired)
        stream_half(peer, even ^ (i % 2), nshort, w, RPIPE_HALF_DUPLEX | (pull ? RPIPE_PULL : 0), pols[i], name);
      end_phase();
    }

  begin_phase("c. heap exhaustion and recovery", 60);
  if (paired) {
    exhaust(peer, even, 8192, 100, RPIPE_HALF_DUPLEX, RPIPE_NEXT_FIT, "c 8K/100 next");       /* heap: 64 */
    exhaust(peer, !even, 4096, 64, RPIPE_PULL, RPIPE_FIRST_FIT, "c 4K/64 first pull");        /* both: 64 */
    exhaust(peer, even, 16384, 1000, RPIPE_HALF_DUPLEX, RPIPE_BEST_FIT, "c 16K/1000 best");   /* heap: 16 */
    exhaust(peer, !even, 131072, 0, RPIPE_HALF_DUPLEX, RPIPE_WORST_FIT, "c 128K/0 worst");    /* cap: 1024 */
    exhaust(peer, even, 262144, 100, RPIPE_PULL, RPIPE_NEXT_FIT, "c 256K/100 next pull");     /* cap: 1024 */
  }
  end_phase();

  long nfd = nmsgs / 10 < 3000 ? nmsgs / 10 : 3000;
  if (nfd < 500) nfd = 500;
  begin_phase("d. full duplex, push", 60);
  if (paired) full_duplex(peer, nfd, 8192, 0, RPIPE_NEXT_FIT, "d push");
  end_phase();
  begin_phase("d. full duplex, pull, worst fit", 60);
  if (paired) full_duplex(peer, nfd, 8192, RPIPE_PULL, RPIPE_WORST_FIT, "d pull");
  end_phase();

  long ka = 4000 / (np - 1);
  if (ka < 100) ka = 100;
  if (np > 1) {
    begin_phase("e. all-to-all, push", 90);
    all_to_all(ka, 8192, 0, RPIPE_FIRST_FIT, "e push");
    end_phase();
    begin_phase("e. all-to-all, pull, best fit", 90);
    all_to_all(ka / 2, 4096, RPIPE_PULL, RPIPE_BEST_FIT, "e pull");
    end_phase();
  }

  begin_phase("f. close", 60);
  if (paired) close_tests(peer, even);
  end_phase();

  begin_phase("g. three pipes per pair at once", 60);
  if (paired) several_pipes(peer, even);
  end_phase();

  alarm(0);
  CHECK_OK(fh_finalize(ctx));
  TEST_PASS("rpipe");
  free(scratch);
  MPI_Finalize();
  return 0;
}
