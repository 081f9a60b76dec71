/* How an image ends: STOP, ERROR STOP, FAIL IMAGE, the end of the program.
 *
 * Termination (Fortran 2018 5.3.7): an image that executes STOP, or reaches the end
 * of the program, first writes `1 + code` into status[me] of every image (remote
 * atomics: the others' CPUs do nothing), then keeps serving the job: it loops on the
 * world context's split-phase barrier with id CAF_BARRIER_DONE. A live image's SYNC ALL
 * uses id CAF_BARRIER_LIVE (barrier.c), so the barrier completes with a mismatch, which
 * tells the live images that some image has stopped (STAT_STOPPED_IMAGE) without
 * hanging them. The first barrier in which every image says DONE ends the job
 * everywhere in the same round; only then are the contexts finalized. So a stopped
 * image never hangs the others, its memory stays readable, and fh_finalize runs when
 * all have arrived. ERROR STOP is fh_abort: every image ends at once with the code.
 */
#include "caf.h"

#include <stdio.h>
#include <stdlib.h>

/* Tell every image that this one has stopped. */
static void announce_stop(int code) {
  uint64_t v = 1 + (uint64_t)(uint32_t)code;
  for (int w = 0; w < caf.np; w++) {
    fh_atomic_set_u64(caf.ctx, w, &caf.status_at[w][caf.me], v);
    fh_atomic_add_u64(caf.ctx, w, &caf.status_at[w][caf.np], 1);
  }
}

/* Serve the job until every image has stopped (see the top of the file). */
static void serve_until_all_stopped(void) {
  for (;;) {
    int rc = fh_barrier_notify(caf.ctx, CAF_BARRIER_DONE, 0);
    if (rc != FH_OK) return;
    do rc = fh_barrier_try(caf.ctx, CAF_BARRIER_DONE, 0);
    while (rc == FH_NOT_READY);
    if (rc == FH_OK) return;
    if (rc != FH_ERR_BARRIER_MISMATCH) return;
  }
}

static void end_images(int code) {
  if (caf.ended || !caf.ctx) return;
  caf.ended = true;
  caf_flush();
  fflush(stdout);
  announce_stop(code);
  serve_until_all_stopped();
  caf_run_at_end(); /* teams, coarrays */
  fh_free(caf.ctx, caf.status);
  fh_free(caf.ctx, caf.notes);
  fh_finalize(caf.ctx);
  caf.ctx = NULL;
}

__attribute__((constructor)) static void register_end(void) { caf_end_hook = end_images; }

void _gfortran_caf_finalize(void) { end_images(0); }

void _gfortran_caf_stop_numeric(int code, bool quiet) {
  if (!quiet) fprintf(stderr, "STOP %d\n", code);
  caf_terminate(code, false);
}

void _gfortran_caf_stop_str(const char *s, size_t len, bool quiet) {
  if (!quiet && s && len) fprintf(stderr, "STOP %.*s\n", (int)len, s);
  caf_terminate(0, false);
}

void _gfortran_caf_error_stop(int code, bool quiet) {
  if (!quiet) fprintf(stderr, "ERROR STOP %d\n", code);
  caf_terminate(code ? code : 1, true);
}

void _gfortran_caf_error_stop_str(const char *s, size_t len, bool quiet) {
  if (!quiet) fprintf(stderr, "ERROR STOP %.*s\n", (int)(s ? len : 0), s ? s : "");
  caf_terminate(1, true);
}

void _gfortran_caf_fail_image(void) {
  fprintf(stderr, "FAIL IMAGE on image %d: this runtime does not continue past failed "
                  "images; the job ends\n", caf.me + 1);
  caf_terminate(1, true);
}

