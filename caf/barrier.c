/* The barrier of a team (SYNC ALL, SYNC TEAM, CHANGE / END TEAM, DEALLOCATE).
 *
 * On the initial team it is firehose's split-phase barrier with the id
 * CAF_BARRIER_LIVE; an image that has stopped takes part with CAF_BARRIER_DONE
 * (stop.c), so the barrier completes with FH_ERR_BARRIER_MISMATCH, which reports
 * STAT_STOPPED_IMAGE instead of hanging. On a sub-team, a stopped member is reported
 * before the barrier.
 */
#include "caf.h"

int caf_barrier(caf_team_t *t, int *stat, char *errmsg, size_t errmsg_len) {
  caf_flush();
  int rc;
  if (t == &caf.initial) {
    rc = fh_barrier_notify(t->ctx, CAF_BARRIER_LIVE, 0);
    if (rc == FH_OK) rc = fh_barrier_wait(t->ctx, CAF_BARRIER_LIVE, 0);
    if (rc == FH_ERR_BARRIER_MISMATCH)
      return caf_report(stat, errmsg, errmsg_len, CAF_STAT_STOPPED_IMAGE,
                        "SYNC ALL: an image has stopped");
  } else {
    for (int i = 0; i < t->size && caf_any_stopped(); i++)
      if (caf_stopped(t->world[i]))
        return caf_report(stat, errmsg, errmsg_len, CAF_STAT_STOPPED_IMAGE,
                          "SYNC: image %d of the team has stopped", i + 1);
    rc = fh_barrier(t->ctx);
  }
  if (rc != FH_OK)
    return caf_report(stat, errmsg, errmsg_len, CAF_STAT_ERROR, "SYNC ALL: %s", fh_strerror(rc));
  return 0;
}

