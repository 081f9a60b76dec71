/* Deferred puts: the staging arena and the list of puts not yet complete.
 *
 * Guarantees: caf_flush() returns when every put issued through caf_stage() is
 * visible at its target; a put that overlaps a pending one (same image, overlapping
 * bytes) completes the pending ones first, so puts to one place land in program
 * order; the arena is reused only after a flush.
 */
#include "caf.h"

#include <stdlib.h>

#define CAF_STAGE (1u << 20)
#define CAF_STAGE_MAX (64u << 10)
/* Puts up to this size block instead: to a node peer a put is one copy into its
 * shared heap (~0.06 us), cheaper than deferring it (a repeated `x[2] = v` would
 * overlap the pending one and flush every time). */
#define CAF_BLOCK_MAX 256u
#define CAF_PENDING 64

static char *stage;
static size_t stage_used;
static struct { int world; uintptr_t lo, hi; } pending[CAF_PENDING];
static int npending;

void caf_flush(void) {
  if (!caf.puts_pending) return;
  caf_fh_check(fh_wait_nbi(caf.ctx, FH_NBI_PUTS), "completing coarray puts");
  caf.puts_pending = false;
  stage_used = 0;
  npending = 0;
}

static bool overlaps_pending(int world, uintptr_t lo, uintptr_t hi) {
  for (int i = 0; i < npending; i++)
    if (pending[i].world == world && lo < pending[i].hi && pending[i].lo < hi) return true;
  return false;
}

/* A staging buffer for a deferred put of `n` bytes to [lo, hi) of `world`, or NULL:
 * then the put blocks (and a pending put it overlaps has been completed). */
char *caf_stage(size_t n, int world, uintptr_t lo, uintptr_t hi) {
  if (n <= CAF_BLOCK_MAX || n > CAF_STAGE_MAX) {
    if (overlaps_pending(world, lo, hi)) caf_flush();
    return NULL;
  }
  if (!stage && !(stage = malloc(CAF_STAGE))) return NULL;
  if (stage_used + n > CAF_STAGE || npending == CAF_PENDING || overlaps_pending(world, lo, hi))
    caf_flush();
  char *p = stage + stage_used;
  stage_used += (n + 15) & ~(size_t)15;
  pending[npending].world = world;
  pending[npending].lo = lo;
  pending[npending].hi = hi;
  npending++;
  return p;
}

