/* Image control and atomics: SYNC ALL / IMAGES / MEMORY, LOCK / UNLOCK (and
 * CRITICAL), EVENT POST / WAIT / QUERY, ATOMIC_*.
 *
 * SYNC IMAGES uses notification counters: notes[j] on image i counts the syncs j
 * made with i (one remote fetch-free add, no target CPU); i waits until it has seen
 * as many as it made with j. No pairwise barrier, no message.
 * A lock is a firehose word lock (fh_word_lock): one 64-bit word, taken with one
 * remote compare-and-swap, that knows its holder (STAT_LOCKED,
 * STAT_LOCKED_OTHER_IMAGE); lock arrays cost one word per element, nothing is
 * collective. The runtime waits with FH_WORD_LOCK_TRY so it notices a stopped holder.
 * An event is a 64-bit notify counter: EVENT POST is a remote add after the poster's
 * puts completed; EVENT WAIT waits on the local word (fh_signal_wait_until) and
 * subtracts what it consumed.
 * Every wait polls firehose and yields the CPU, so 8 images on 2 cores progress.
 */
#include "caf.h"

#include <sched.h>
#include <stdlib.h>

static void backoff(unsigned *spins) {
  fh_poll(caf.ctx);
  if (++*spins > 64) sched_yield();
}

static uint64_t load_local(uint64_t *p) {
  uint64_t v = 0;
  fh_atomic_fetch_u64(caf.ctx, caf.me, p, &v);
  return v;
}

void _gfortran_caf_sync_all(int *stat, char *errmsg, size_t errmsg_len) {
  caf_need_init();
  if (stat) *stat = 0;
  caf_barrier(caf.current, stat, errmsg, errmsg_len);
}

void _gfortran_caf_sync_memory(int *stat, char *errmsg, size_t errmsg_len) {
  (void)errmsg;
  (void)errmsg_len;
  caf_need_init();
  if (stat) *stat = 0;
  caf_flush();
}

/* The world ranks SYNC IMAGES names (all others for count -1), or NULL on error. */
static int *sync_list(int count, int images[], int *n, int *stat, char *errmsg, size_t len) {
  caf_team_t *t = caf.current;
  int *w = malloc(sizeof(int) * (size_t)(t->size + 1));
  *n = 0;
  if (count < 0) {
    for (int i = 0; i < t->size; i++)
      if (i != t->rank) w[(*n)++] = t->world[i];
    return w;
  }
  char *seen = calloc((size_t)t->size + 1, 1);
  for (int k = 0; k < count; k++) {
    int img = images[k];
    if (img < 1 || img > t->size || seen[img]) {
      caf_report(stat, errmsg, len, CAF_STAT_ERROR,
                 img < 1 || img > t->size ? "SYNC IMAGES: image %d out of range"
                                          : "SYNC IMAGES: image %d listed twice", img);
      free(seen);
      free(w);
      return NULL;
    }
    seen[img] = 1;
    if (img - 1 != t->rank) w[(*n)++] = t->world[img - 1];
  }
  free(seen);
  return w;
}

void _gfortran_caf_sync_images(int count, int images[], int *stat, char *errmsg,
                               size_t errmsg_len) {
  caf_need_init();
  if (stat) *stat = 0;
  int n;
  int *w = sync_list(count, images, &n, stat, errmsg, errmsg_len);
  if (!w) return;
  caf_flush();
  for (int k = 0; k < n; k++)
    caf_fh_check(fh_atomic_add_u64(caf.ctx, w[k], &caf.notes_at[w[k]][caf.me], 1), "SYNC IMAGES");
  for (int k = 0; k < n; k++) {
    uint64_t want = ++caf.seen[w[k]];
    unsigned spins = 0;
    while (load_local(&caf.notes[w[k]]) < want) {
      if (caf_stopped(w[k])) {
        caf.seen[w[k]]--;
        caf_report(stat, errmsg, errmsg_len, CAF_STAT_STOPPED_IMAGE,
                   "SYNC IMAGES: image %d has stopped", w[k] + 1);
        break;
      }
      backoff(&spins);
    }
  }
  free(w);
}

static uint64_t *word(void *token, size_t index, int image_index, int *world, const char *what) {
  caf_token_t *t = caf_token(token, what);
  int w = image_index == 0 ? caf.me : caf_world_of(image_index);
  if (w < 0) caf_fatal("%s: image index %d out of range", what, image_index);
  *world = w;
  return (uint64_t *)caf_remote(t, w, index * sizeof(uint64_t), sizeof(uint64_t), what);
}

void _gfortran_caf_lock(void *token, size_t index, int image_index, int *acquired_lock,
                        int *stat, char *errmsg, size_t errmsg_len) {
  caf_need_init();
  if (stat) *stat = 0;
  int w;
  uint64_t *lk = word(token, index, image_index, &w, "LOCK");
  caf_flush();
  unsigned spins = 0;
  for (;;) {
    int holder = -1;
    int rc = fh_word_lock(caf.ctx, w, lk, FH_WORD_LOCK_TRY, &holder);
    if (rc == FH_OK) {
      if (acquired_lock) *acquired_lock = 1;
      return;
    }
    if (rc == FH_ERR_STATE && holder == caf.me) {
      caf_report(stat, errmsg, errmsg_len, CAF_STAT_LOCKED, "LOCK: this image holds the lock");
      return;
    }
    if (rc != FH_NOT_READY) caf_fh_check(rc, "LOCK");
    if (acquired_lock) {
      *acquired_lock = 0;
      return;
    }
    if (caf_stopped(holder)) {
      caf_report(stat, errmsg, errmsg_len, CAF_STAT_STOPPED_IMAGE,
                 "LOCK: the holder, image %d, has stopped", holder + 1);
      return;
    }
    backoff(&spins);
  }
}

void _gfortran_caf_unlock(void *token, size_t index, int image_index, int *stat, char *errmsg,
                          size_t errmsg_len) {
  caf_need_init();
  if (stat) *stat = 0;
  int w;
  uint64_t *lk = word(token, index, image_index, &w, "UNLOCK");
  caf_flush();
  int holder = -1;
  int rc = fh_word_unlock(caf.ctx, w, lk, &holder);
  if (rc == FH_OK) return;
  if (rc != FH_ERR_STATE) caf_fh_check(rc, "UNLOCK");
  if (holder < 0)
    caf_report(stat, errmsg, errmsg_len, CAF_STAT_UNLOCKED, "UNLOCK: the lock is not locked");
  else
    caf_report(stat, errmsg, errmsg_len, CAF_STAT_LOCKED_OTHER_IMAGE,
               "UNLOCK: image %d holds the lock", holder + 1);
}

void _gfortran_caf_event_post(void *token, size_t index, int image_index, int *stat,
                              char *errmsg, size_t errmsg_len) {
  caf_need_init();
  if (stat) *stat = 0;
  int w;
  uint64_t *ev = word(token, index, image_index, &w, "EVENT POST");
  caf_flush();
  if (w != caf.me && caf_stopped(w)) {
    caf_report(stat, errmsg, errmsg_len, CAF_STAT_STOPPED_IMAGE,
               "EVENT POST: image %d has stopped", w + 1);
    return;
  }
  caf_fh_check(fh_atomic_add_u64(caf.ctx, w, ev, 1), "EVENT POST");
}

void _gfortran_caf_event_wait(void *token, size_t index, int until_count, int *stat,
                              char *errmsg, size_t errmsg_len) {
  (void)errmsg;
  (void)errmsg_len;
  caf_need_init();
  if (stat) *stat = 0;
  int w;
  uint64_t *ev = word(token, index, 0, &w, "EVENT WAIT");
  uint64_t want = until_count > 0 ? (uint64_t)until_count : 1;
  caf_flush();
  /* A notify counter: the library's wait (progress, yielding, stall reports). */
  caf_fh_check(fh_signal_wait_until(caf.ctx, ev, FH_CMP_GE, want, NULL), "EVENT WAIT");
  caf_fh_check(fh_atomic_add_u64(caf.ctx, caf.me, ev, (uint64_t)0 - want), "EVENT WAIT");
}

void _gfortran_caf_event_query(void *token, size_t index, int image_index, int *count, int *stat) {
  caf_need_init();
  if (stat) *stat = 0;
  int w;
  uint64_t *ev = word(token, index, image_index, &w, "EVENT_QUERY");
  uint64_t v = 0;
  caf_flush();
  caf_fh_check(fh_atomic_fetch_u64(caf.ctx, w, ev, &v), "EVENT_QUERY");
  *count = (int)v;
}

/* --- ATOMIC_* (atomic_int_kind / atomic_logical_kind: 4 bytes; kind 8 also works) --- */

enum { CAF_ATOMIC_ADD = 1, CAF_ATOMIC_AND, CAF_ATOMIC_OR, CAF_ATOMIC_XOR };

static void *atomic_addr(void *token, size_t offset, int image_index, int kind, int *w,
                         const char *what) {
  caf_token_t *t = caf_token(token, what);
  *w = image_index == 0 ? caf.me : caf_world_of(image_index);
  if (*w < 0) caf_fatal("%s: image index %d out of range", what, image_index);
  if (kind != 4 && kind != 8) caf_fatal("%s: kind %d is not an atomic kind", what, kind);
  caf_flush();
  return caf_remote(t, *w, offset, (size_t)kind, what);
}

void _gfortran_caf_atomic_define(void *token, size_t offset, int image_index, void *value,
                                 int *stat, int type, int kind) {
  (void)type;
  caf_need_init();
  if (stat) *stat = 0;
  int w;
  void *a = atomic_addr(token, offset, image_index, kind, &w, "ATOMIC_DEFINE");
  int rc = kind == 4 ? fh_atomic_set_u32(caf.ctx, w, a, *(uint32_t *)value)
                     : fh_atomic_set_u64(caf.ctx, w, a, *(uint64_t *)value);
  if (rc) caf_report(stat, NULL, 0, CAF_STAT_ERROR, "ATOMIC_DEFINE: %s", fh_strerror(rc));
}

void _gfortran_caf_atomic_ref(void *token, size_t offset, int image_index, void *value,
                              int *stat, int type, int kind) {
  (void)type;
  caf_need_init();
  if (stat) *stat = 0;
  int w;
  void *a = atomic_addr(token, offset, image_index, kind, &w, "ATOMIC_REF");
  int rc = kind == 4 ? fh_atomic_fetch_u32(caf.ctx, w, a, value)
                     : fh_atomic_fetch_u64(caf.ctx, w, a, value);
  if (rc) caf_report(stat, NULL, 0, CAF_STAT_ERROR, "ATOMIC_REF: %s", fh_strerror(rc));
}

void _gfortran_caf_atomic_cas(void *token, size_t offset, int image_index, void *old,
                              void *compare, void *new_val, int *stat, int type, int kind) {
  (void)type;
  caf_need_init();
  if (stat) *stat = 0;
  int w;
  void *a = atomic_addr(token, offset, image_index, kind, &w, "ATOMIC_CAS");
  int rc = kind == 4 ? fh_atomic_cas_u32(caf.ctx, w, a, *(uint32_t *)compare,
                                         *(uint32_t *)new_val, old)
                     : fh_atomic_cas_u64(caf.ctx, w, a, *(uint64_t *)compare,
                                         *(uint64_t *)new_val, old);
  if (rc) caf_report(stat, NULL, 0, CAF_STAT_ERROR, "ATOMIC_CAS: %s", fh_strerror(rc));
}

void _gfortran_caf_atomic_op(int op, void *token, size_t offset, int image_index, void *value,
                             void *old, int *stat, int type, int kind) {
  (void)type;
  caf_need_init();
  if (stat) *stat = 0;
  int w;
  void *a = atomic_addr(token, offset, image_index, kind, &w, "ATOMIC operation");
  uint64_t scratch;
  void *out = old ? old : &scratch;
  int rc;
  if (kind == 4) {
    uint32_t v = *(uint32_t *)value;
    switch (op) {
    case CAF_ATOMIC_ADD: rc = fh_atomic_fetch_add_u32(caf.ctx, w, a, v, out); break;
    case CAF_ATOMIC_AND: rc = fh_atomic_fetch_and_u32(caf.ctx, w, a, v, out); break;
    case CAF_ATOMIC_OR: rc = fh_atomic_fetch_or_u32(caf.ctx, w, a, v, out); break;
    case CAF_ATOMIC_XOR: rc = fh_atomic_fetch_xor_u32(caf.ctx, w, a, v, out); break;
    default: rc = FH_ERR_INVALID_ARG; break;
    }
  } else {
    uint64_t v = *(uint64_t *)value;
    switch (op) {
    case CAF_ATOMIC_ADD: rc = fh_atomic_fetch_add_u64(caf.ctx, w, a, v, out); break;
    case CAF_ATOMIC_AND: rc = fh_atomic_fetch_and_u64(caf.ctx, w, a, v, out); break;
    case CAF_ATOMIC_OR: rc = fh_atomic_fetch_or_u64(caf.ctx, w, a, v, out); break;
    case CAF_ATOMIC_XOR: rc = fh_atomic_fetch_xor_u64(caf.ctx, w, a, v, out); break;
    default: rc = FH_ERR_INVALID_ARG; break;
    }
  }
  if (rc) caf_report(stat, NULL, 0, CAF_STAT_ERROR, "ATOMIC operation %d: %s", op, fh_strerror(rc));
}
