/* Coarray tokens: what _gfortran_caf_register creates and every access names.
 *
 * A coarray, lock, event or critical construct gets memory on every image of the
 * current team (a collective call: every image registers the same coarrays in the
 * same order) from firehose's heap: node-shared while FH_HEAP_SIZE lasts (atomics
 * without the target's CPU), then the registered segments fh_malloc grows it by. The
 * addresses of every image's copy are exchanged once, at registration (fh_allgather),
 * so an access is one lookup: base[world rank] + offset.
 *
 * Components (REGISTER_ONLY / ALLOCATE_ONLY) are local, non-collective allocations:
 * other images reach them through the by-reference calls, which read the pointer in
 * the remote object; firehose puts and gets reach any address.
 */
#include "caf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static caf_token_t *live; /* every token, for finalize */

caf_token_t *caf_token(void *token, const char *what) {
  caf_token_t *t = token;
  if (!t || t->magic != CAF_TOKEN_MAGIC) caf_fatal("%s: not a registered coarray", what);
  return t;
}

char *caf_remote(caf_token_t *t, int world, size_t offset, size_t nbytes, const char *what) {
  if (world < 0 || world >= caf.np)
    caf_fatal("%s: image index out of range (%d images)", what, caf.current->size);
  if (!t->base || !t->base[world])
    caf_fatal("%s: the coarray is not established on image %d", what, world + 1);
  if (offset > t->size || nbytes > t->size - offset)
    caf_fatal("%s: %zu bytes at offset %zu are outside the coarray (%zu bytes) on image %d",
              what, nbytes, offset, t->size, world + 1);
  return (char *)t->base[world] + offset;
}

static void link_token(caf_token_t *t) {
  t->next = live;
  t->prev = NULL;
  if (live) live->prev = t;
  live = t;
}

static void unlink_token(caf_token_t *t) {
  if (t->prev) t->prev->next = t->next;
  else live = t->next;
  if (t->next) t->next->prev = t->prev;
  t->magic = 0;
}

/* Memory every image can reach: firehose's heap, which grows into registered
 * segments when FH_HEAP_SIZE is used up. */
static void *alloc_shared(size_t size, caf_mem_t *mem) {
  void *p = fh_malloc(caf.ctx, size);
  if (!p) return NULL;
  *mem = MEM_HEAP;
  memset(p, 0, size);
  return p;
}

static void free_shared(caf_token_t *t) {
  if (!t->local) return;
  if (t->mem == MEM_HEAP) fh_free(caf.ctx, t->local);
  else free(t->local);
  t->local = NULL;
}

static bool is_sync_object(caf_register_t type) {
  return type == CAF_REGTYPE_LOCK_STATIC || type == CAF_REGTYPE_LOCK_ALLOC ||
         type == CAF_REGTYPE_CRITICAL || type == CAF_REGTYPE_EVENT_STATIC ||
         type == CAF_REGTYPE_EVENT_ALLOC;
}

/* Collective: memory on every image of the current team, addresses exchanged. */
static int register_collective(caf_token_t *t, size_t size, int *stat, char *errmsg,
                               size_t errmsg_len) {
  caf_team_t *team = caf.current;
  /* F2018 9.7.4: with an image of the team stopped, STAT_STOPPED_IMAGE (the exchange
   * below would wait for it for ever). */
  for (int i = 0; i < team->size && caf_any_stopped(); i++)
    if (caf_stopped(team->world[i]))
      return caf_report(stat, errmsg, errmsg_len, CAF_STAT_STOPPED_IMAGE,
                        "coarray allocation: image %d of the team has stopped", i + 1);
  t->size = size;
  t->local = alloc_shared(size ? size : 1, &t->mem);
  void *mine = t->local;
  void **all = calloc((size_t)team->size, sizeof(void *));
  t->base = calloc((size_t)caf.np, sizeof(void *));
  int rc = fh_allgather(team->ctx, &mine, sizeof mine, all);
  if (rc != FH_OK)
    return caf_report(stat, errmsg, errmsg_len, CAF_STAT_ERROR, "coarray allocation: %s",
                      fh_strerror(rc));
  for (int i = 0; i < team->size; i++) {
    if (!all[i])
      return caf_report(stat, errmsg, errmsg_len, CAF_STAT_ERROR,
                        "coarray allocation of %zu bytes failed on image %d", size, i + 1);
    t->base[team->world[i]] = all[i];
  }
  free(all);
  return 0;
}

void _gfortran_caf_register(size_t size, caf_register_t type, void **token, gfc_desc_t *desc,
                            int *stat, char *errmsg, size_t errmsg_len) {
  caf_need_init();
  if (stat) *stat = 0;
  caf_token_t *t;
  if (type == CAF_REGTYPE_COARRAY_ALLOC_ALLOCATE_ONLY) {
    t = caf_token(*token, "ALLOCATE of a coarray component");
    free_shared(t);
    t->mem = MEM_LOCAL;
    t->size = size;
    t->local = calloc(1, size ? size : 1);
    if (!t->local) {
      caf_report(stat, errmsg, errmsg_len, CAF_STAT_ERROR, "out of memory (%zu bytes)", size);
      return;
    }
    if (desc) desc->base_addr = t->local;
    return;
  }
  t = calloc(1, sizeof *t);
  t->magic = CAF_TOKEN_MAGIC;
  t->regtype = type;
  link_token(t);
  *token = t;
  if (type == CAF_REGTYPE_COARRAY_ALLOC_REGISTER_ONLY) {
    t->mem = MEM_LOCAL;
    if (desc) desc->base_addr = NULL;
    return;
  }
  /* Locks and events: `size` counts them; each is one 64-bit word. */
  size_t bytes = is_sync_object(type) ? size * sizeof(uint64_t) : size;
  if (register_collective(t, bytes, stat, errmsg, errmsg_len)) return;
  if (desc) desc->base_addr = t->local;
  if (type == CAF_REGTYPE_COARRAY_ALLOC) t->desc = desc;
}

void _gfortran_caf_deregister(void **token, int type, int *stat, char *errmsg,
                              size_t errmsg_len) {
  caf_need_init();
  if (stat) *stat = 0;
  caf_token_t *t = caf_token(*token, "DEALLOCATE");
  bool component = t->regtype == CAF_REGTYPE_COARRAY_ALLOC_REGISTER_ONLY ||
                   t->regtype == CAF_REGTYPE_COARRAY_ALLOC_ALLOCATE_ONLY;
  if (!component) {
    /* DEALLOCATE of a coarray synchronises the team first (Fortran 2018 9.7.3.2). */
    caf_flush();
    if (caf_barrier(caf.current, stat, errmsg, errmsg_len)) return;
  }
  free_shared(t);
  if (type == 1 /* CAF_DEREGTYPE_COARRAY_DEALLOCATE_ONLY */) return;
  unlink_token(t);
  free(t->base);
  free(t);
  *token = NULL;
}

/* At the end of the image: every coarray still registered. */
static void mem_finalize(void) {
  while (live) {
    caf_token_t *t = live;
    free_shared(t);
    unlink_token(t);
    free(t->base);
    free(t);
  }
}

__attribute__((constructor)) static void register_mem(void) { caf_at_end(mem_finalize); }
