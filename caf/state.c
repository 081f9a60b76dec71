/* Images: initialisation, the image tables, image indices, errors and STAT=, and
 * the status of other images (STOPPED_IMAGES, IMAGE_STATUS). How an image ends is
 * stop.c's (it registers caf_end_hook); the parts that hold resources register their
 * finalizers with caf_at_end.
 */
#include "caf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

caf_state_t caf;

/* Static coarrays are registered by constructors that run before main, hence before
 * _gfortran_caf_init: the first call of any kind initialises. */
void caf_need_init(void) {
  if (!caf.ctx) _gfortran_caf_init(NULL, NULL);
}

int caf_world_of(int image) {
  caf_team_t *t = caf.current;
  if (image < 1 || image > t->size) return -1;
  return t->world[image - 1];
}

/* One word says whether any image has stopped (status[np] counts them), so the
 * common case costs one local atomic read, not one per image. */
bool caf_any_stopped(void) {
  uint64_t v = 0;
  fh_atomic_fetch_u64(caf.ctx, caf.me, &caf.status[caf.np], &v);
  return v != 0;
}

bool caf_stopped(int world) {
  uint64_t v = 0;
  fh_atomic_fetch_u64(caf.ctx, caf.me, &caf.status[world], &v);
  return v != 0;
}

static void copy_errmsg(char *errmsg, size_t len, const char *msg) {
  if (!errmsg || len == 0) return;
  size_t n = strlen(msg);
  if (n > len) n = len;
  memcpy(errmsg, msg, n);
  memset(errmsg + n, ' ', len - n);
}

/* STAT= given: store `code` and the message, return `code`. Otherwise the error ends
 * the program, as gfortran's single-image runtime does. */
int caf_report(int *stat, char *errmsg, size_t errmsg_len, int code, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (stat) {
    *stat = code;
    copy_errmsg(errmsg, errmsg_len, msg);
    return code;
  }
  if (code == CAF_STAT_STOPPED_IMAGE) {
    /* Fortran 2018 11.6.11: without STAT=, a stopped image ends this one normally. */
    fprintf(stderr, "Image %d: %s\n", caf.me + 1, msg);
    caf_terminate(0, false);
  }
  fprintf(stderr, "Fortran runtime error on image %d: %s\n", caf.me + 1, msg);
  caf_terminate(1, true);
}

void caf_fatal(const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "Fortran runtime error on image %d: %s\n", caf.me + 1, msg);
  caf_terminate(1, true);
}

void caf_fh_check(int rc, const char *what) {
  if (rc == FH_OK) return;
  char why[256];
  fh_last_error(why, sizeof why);
  caf_fatal("%s: %s (%s)", what, fh_strerror(rc), why);
}

void caf_terminate(int code, bool error) {
  fflush(stdout);
  if (error) {
    fflush(stderr);
    fh_abort(caf.ctx, code ? code : 1); /* every image ends, with this status */
    exit(code ? code : 1);
  }
  if (caf_end_hook) caf_end_hook(code);
  exit(code);
}

void (*caf_end_hook)(int code);

/* Finalizers of the runtime's parts, run by the end of the image (stop.c). */
static void (*at_end[8])(void);
static int nat_end;

void caf_at_end(void (*fn)(void)) {
  for (int i = 0; i < nat_end; i++)
    if (at_end[i] == fn) return;
  if (nat_end < (int)(sizeof at_end / sizeof at_end[0])) at_end[nat_end++] = fn;
}

void caf_run_at_end(void) {
  while (nat_end > 0) at_end[--nat_end]();
}

void _gfortran_caf_init(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  if (caf.ctx || caf.ended) return;
  int rc = fh_init_world(NULL, &caf.ctx);
  if (rc != FH_OK) {
    char why[256];
    fh_last_error(why, sizeof why);
    fprintf(stderr, "libcaf_firehose: fh_init_world failed: %s (%s)\n", fh_strerror(rc), why);
    exit(1);
  }
  caf.me = fh_rank(caf.ctx);
  caf.np = fh_size(caf.ctx);
  caf_team_t *t = &caf.initial;
  t->ctx = caf.ctx;
  t->rank = caf.me;
  t->size = caf.np;
  t->number = -1;
  t->world = malloc(sizeof(int) * (size_t)caf.np);
  for (int i = 0; i < caf.np; i++) t->world[i] = i;
  caf.current = t;
  size_t words = sizeof(uint64_t) * (size_t)caf.np;
  caf.status = fh_malloc(caf.ctx, words + sizeof(uint64_t));
  caf.notes = fh_malloc(caf.ctx, words);
  caf.seen = calloc((size_t)caf.np, sizeof(uint64_t));
  caf.status_at = malloc(sizeof(void *) * (size_t)caf.np);
  caf.notes_at = malloc(sizeof(void *) * (size_t)caf.np);
  if (!caf.status || !caf.notes || !caf.seen || !caf.status_at || !caf.notes_at)
    caf_fatal("cannot allocate the runtime's image tables (FH_HEAP_SIZE too small?)");
  memset(caf.status, 0, words + sizeof(uint64_t));
  memset(caf.notes, 0, words);
  caf_fh_check(fh_allgather(caf.ctx, &caf.status, sizeof(void *), caf.status_at), "caf_init");
  caf_fh_check(fh_allgather(caf.ctx, &caf.notes, sizeof(void *), caf.notes_at), "caf_init");
}

int _gfortran_caf_this_image(int distance) {
  (void)distance;
  caf_need_init();
  return caf.current->rank + 1;
}

int _gfortran_caf_num_images(int distance, int failed) {
  (void)distance;
  caf_need_init();
  if (failed > 0) return 0; /* no image ever fails here: FAIL IMAGE ends the job */
  return caf.current->size;
}

int _gfortran_caf_image_status(int image, void *team) {
  (void)team;
  caf_need_init();
  int w = caf_world_of(image);
  if (w < 0) caf_fatal("IMAGE_STATUS: image %d is not in the current team", image);
  return caf_stopped(w) ? CAF_STAT_STOPPED_IMAGE : 0;
}

/* Allocate and fill a rank-1 integer result (the caller passes base_addr NULL). */
static void image_list(gfc_desc_t *d, int kind, bool stopped) {
  caf_team_t *t = caf.current;
  int n = 0;
  int *list = malloc(sizeof(int) * (size_t)t->size);
  for (int i = 0; i < t->size && stopped; i++)
    if (caf_stopped(t->world[i])) list[n++] = i + 1;
  size_t esz = kind == 8 ? 8 : 4;
  d->base_addr = malloc(esz * (size_t)(n ? n : 1));
  /* Intrinsic results are zero-based; the caller shifts them to its bounds. */
  d->offset = 0;
  d->dtype.elem_len = esz;
  d->dtype.rank = 1;
  d->dtype.type = BT_INTEGER;
  d->span = (ptrdiff_t)esz;
  d->dim[0].lbound = 0;
  d->dim[0].ubound = n - 1;
  d->dim[0].stride = 1;
  for (int i = 0; i < n; i++) {
    if (esz == 8) ((int64_t *)d->base_addr)[i] = list[i];
    else ((int32_t *)d->base_addr)[i] = list[i];
  }
  free(list);
}

void _gfortran_caf_failed_images(gfc_desc_t *d, void *team, int *kind) {
  (void)team;
  caf_need_init();
  image_list(d, kind ? *kind : 4, false);
}

void _gfortran_caf_stopped_images(gfc_desc_t *d, void *team, int *kind) {
  (void)team;
  caf_need_init();
  image_list(d, kind ? *kind : 4, true);
}
