/* Teams (Fortran 2018 11.6.9-11.6.10): FORM TEAM splits the current team's context
 * (fh_split: every team's collectives and barriers run on its own context); CHANGE TEAM / END TEAM move
 * the current team, which image indices, THIS_IMAGE and NUM_IMAGES follow. Puts, gets
 * and atomics always go through the world context, naming world ranks.
 * Also RANDOM_INIT.
 */
#include "caf.h"

#include <stdlib.h>

static caf_team_t **formed;
static size_t nformed;
static void team_finalize_all(void);

/* The team this image's FORM TEAM may reuse: the latest one formed from `cur` with
 * the same team number and key, or NULL. */
static caf_team_t *cached_team(caf_team_t *cur, int team_number, int key) {
  caf_team_t *best = NULL;
  for (size_t i = 0; i < nformed; i++) {
    caf_team_t *t = formed[i];
    if (t->parent == cur && t->number == team_number && t->key == key && (!best || t->gen > best->gen)) best = t;
  }
  return best;
}

/* A loop of FORM TEAM with the same partition reuses the team made last time: each
 * team is a library context (its own heap and windows, tens of MiB per image), and a
 * team value is never freed, so a new one per iteration exhausted memory within a
 * few hundred. Reuse is decided together (FORM TEAM is collective over the current
 * team): every image found the team of the same earlier FORM TEAM, in which every
 * image had its present team number and key, so the partition is the same. The old
 * team is not current (FORM TEAM forms children of the current team), holds no
 * coarrays (transfers go through the initial team's context) and no collective in
 * flight, so it serves as a fresh one. */
void _gfortran_caf_form_team(int team_number, void **team, int new_index) {
  caf_need_init();
  caf_flush();
  caf_team_t *cur = caf.current;
  if (team_number <= 0) caf_fatal("FORM TEAM: team number %d must be positive", team_number);
  int key = new_index > 0 ? new_index - 1 : cur->rank;
  int64_t gen = ++cur->forms;
  caf_team_t *old = cached_team(cur, team_number, key);
  int64_t mine[2] = {old ? old->gen : -1, old ? -old->gen : -1}, all[2];
  caf_fh_check(fh_allreduce(cur->ctx, mine, all, 2, FH_INT64, FH_MIN), "FORM TEAM");
  if (old && all[0] >= 0 && all[0] == -all[1]) {
    old->gen = gen;
    *team = old;
    return;
  }
  caf_team_t *t = calloc(1, sizeof *t);
  /* fh_split: the teams set up in turn (sibling contexts created at once collide in
   * Open MPI 4.1's one-sided component). */
  caf_fh_check(fh_split(cur->ctx, team_number, key, NULL, &t->ctx), "FORM TEAM");
  t->rank = fh_rank(t->ctx);
  t->size = fh_size(t->ctx);
  t->world = malloc(sizeof(int) * (size_t)t->size);
  caf_fh_check(fh_allgather(t->ctx, &caf.me, sizeof(int), t->world), "FORM TEAM");
  t->number = team_number;
  t->parent = cur;
  t->key = key;
  t->gen = gen;
  caf_at_end(team_finalize_all); /* runs before mem.c's: registered later */
  formed = realloc(formed, sizeof *formed * (nformed + 1));
  formed[nformed++] = t;
  *team = t;
}

static caf_team_t *team_of(void **team, const char *what) {
  if (!team || !*team) caf_fatal("%s: the team variable is not defined (no FORM TEAM)", what);
  return *team;
}

void _gfortran_caf_change_team(void **team, int coselector) {
  (void)coselector;
  caf_need_init();
  caf_team_t *t = team_of(team, "CHANGE TEAM");
  if (t->parent != caf.current) caf_fatal("CHANGE TEAM: the team was not formed by the current team");
  caf_flush();
  t->active = 1;
  caf.current = t;
  caf_barrier(t, NULL, NULL, 0);
}

void _gfortran_caf_end_team(void **team) {
  (void)team;
  caf_need_init();
  caf_team_t *t = caf.current;
  if (t == &caf.initial) caf_fatal("END TEAM outside a CHANGE TEAM construct");
  caf_barrier(t, NULL, NULL, 0);
  t->active = 0;
  caf.current = t->parent;
}

void _gfortran_caf_sync_team(void **team, int unused) {
  (void)unused;
  caf_need_init();
  caf_team_t *t = team_of(team, "SYNC TEAM");
  caf_barrier(t, NULL, NULL, 0);
}

int _gfortran_caf_team_number(void **team) {
  caf_need_init();
  caf_team_t *t = team && *team ? *team : caf.current;
  return t->number;
}

void *_gfortran_caf_get_team(int32_t *level) {
  caf_need_init();
  if (level && *level == 0) return &caf.initial; /* INITIAL_TEAM */
  if (level && *level == 1 && caf.current->parent) return caf.current->parent; /* PARENT_TEAM */
  return caf.current;
}

/* Finalize every team context, innermost first (collective within each team). */
static void team_finalize_all(void) {
  while (nformed > 0) {
    caf_team_t *t = formed[--nformed];
    fh_finalize(t->ctx);
    free(t->world);
    free(t);
  }
  free(formed);
  formed = NULL;
  caf.current = &caf.initial;
}

/* libgfortran seeds per image with its own generator; `this_image` makes images
 * distinct when asked. */
extern void _gfortran_random_init(int32_t repeatable, int32_t image_distinct, int32_t hwm);

void _gfortran_caf_random_init(bool repeatable, bool image_distinct) {
  caf_need_init();
  _gfortran_random_init(repeatable, image_distinct, caf.initial.rank + 1);
}
