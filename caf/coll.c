/* Collective subroutines: CO_BROADCAST, CO_SUM, CO_MIN, CO_MAX, CO_REDUCE.
 *
 * CO_BROADCAST is fh_broadcast (pipelined tree); CO_SUM / CO_MIN / CO_MAX on the
 * integer, real and complex kinds firehose reduces are fh_reduce / fh_allreduce (rank-
 * order trees: results are deterministic and bit-identical on every image). The rest
 * (CHARACTER min/max, integer(16), real(10/16), and CO_REDUCE's user function) are
 * fh_reduce_fn / fh_allreduce_fn with our fold: the same tree, in image order, so the
 * result is the same on every image and from run to run. Non-contiguous arguments are
 * packed.
 */
#include "caf.h"

#include <complex.h>
#include <stdlib.h>
#include <string.h>

/* A contiguous copy of the argument's elements (or the argument itself). */
static char *pack(gfc_desc_t *d, caf_sect_t *s, size_t *bytes) {
  sect_from_desc(s, d);
  *bytes = s->n * s->esz;
  if (sect_contiguous(s)) return s->base;
  char *buf = malloc(*bytes ? *bytes : 1);
  for (size_t k = 0; k < s->n; k++) memcpy(buf + k * s->esz, sect_addr(s, k), s->esz);
  return buf;
}

static void unpack(caf_sect_t *s, char *buf) {
  if (buf == s->base) return;
  for (size_t k = 0; k < s->n; k++) memcpy(sect_addr(s, k), buf + k * s->esz, s->esz);
  free(buf);
}

static int team_check(int *stat, char *errmsg, size_t errmsg_len, const char *what) {
  caf_team_t *t = caf.current;
  caf_flush();
  if (!caf_any_stopped()) return 0;
  for (int i = 0; i < t->size; i++)
    if (caf_stopped(t->world[i]))
      return caf_report(stat, errmsg, errmsg_len, CAF_STAT_STOPPED_IMAGE,
                        "%s: image %d has stopped", what, i + 1);
  return 0;
}

static int done(int rc, int *stat, char *errmsg, size_t errmsg_len, const char *what) {
  if (rc == FH_OK) return 0;
  return caf_report(stat, errmsg, errmsg_len, CAF_STAT_ERROR, "%s: %s", what, fh_strerror(rc));
}

void _gfortran_caf_co_broadcast(gfc_desc_t *a, int source_image, int *stat, char *errmsg,
                                size_t errmsg_len) {
  caf_need_init();
  if (stat) *stat = 0;
  if (team_check(stat, errmsg, errmsg_len, "CO_BROADCAST")) return;
  caf_team_t *t = caf.current;
  if (source_image < 1 || source_image > t->size) {
    caf_report(stat, errmsg, errmsg_len, CAF_STAT_ERROR,
               "CO_BROADCAST: SOURCE_IMAGE %d out of range 1..%d", source_image, t->size);
    return;
  }
  caf_sect_t s;
  size_t bytes;
  char *buf = pack(a, &s, &bytes);
  int rc = fh_broadcast(t->ctx, source_image - 1, buf, bytes);
  unpack(&s, buf);
  done(rc, stat, errmsg, errmsg_len, "CO_BROADCAST");
}

/* firehose's element type for a Fortran type and kind, or -1. */
static int fh_type(gfc_desc_t *a) {
  size_t len = a->dtype.elem_len;
  switch (a->dtype.type) {
  case BT_INTEGER:
    return len == 1 ? FH_INT8 : len == 2 ? FH_INT16 : len == 4 ? FH_INT32 : len == 8 ? FH_INT64 : -1;
  case BT_REAL: return len == 4 ? FH_FLOAT : len == 8 ? FH_DOUBLE : -1;
  case BT_COMPLEX: return len == 8 ? FH_CFLOAT : len == 16 ? FH_CDOUBLE : -1;
  default: return -1;
  }
}

typedef void (*fold_fn)(char *acc, const char *x, const void *arg);
typedef struct { fold_fn f; const void *arg; size_t esz; } fold_t;

/* fh_reduce_fn's callback: fold element by element (acc: the lower images' side). */
static void fold_elems(void *inout, const void *in, size_t count, void *user) {
  const fold_t *t = user;
  for (size_t k = 0; k < count; k++) t->f((char *)inout + k * t->esz, (const char *)in + k * t->esz, t->arg);
}

/* A reduction firehose has no built-in operation for: its tree with our fold (the
 * same rank-ordered tree as the built-in ones). */
static int tree_fold(char *buf, size_t n, size_t esz, fold_fn f, const void *arg, int result_image) {
  caf_team_t *t = caf.current;
  fold_t ft = {f, arg, esz};
  /* In place: firehose's reductions allow src == dst. */
  return result_image == 0 ? fh_allreduce_fn(t->ctx, buf, buf, n, esz, fold_elems, &ft)
                           : fh_reduce_fn(t->ctx, result_image - 1, buf, buf, n, esz, fold_elems, &ft);
}

typedef struct { int type, op; size_t esz, kind; } fold_arg_t;

static int cmp_elem(const char *a, const char *b, const fold_arg_t *f) {
  if (f->type == BT_CHARACTER) {
    if (f->kind == 4) {
      for (size_t i = 0; i < f->esz / 4; i++) {
        uint32_t x = ((const uint32_t *)a)[i], y = ((const uint32_t *)b)[i];
        if (x != y) return x < y ? -1 : 1;
      }
      return 0;
    }
    return memcmp(a, b, f->esz);
  }
  if (f->type == BT_INTEGER) {
    __int128 x = 0, y = 0;
    memcpy(&x, a, f->esz);
    memcpy(&y, b, f->esz);
    return x < y ? -1 : x > y;
  }
  long double x = f->esz == 16 && f->kind == 16 ? (long double)*(const _Float128 *)a : *(const long double *)a;
  long double y = f->esz == 16 && f->kind == 16 ? (long double)*(const _Float128 *)b : *(const long double *)b;
  return x < y ? -1 : x > y;
}

/* The generic fold for what firehose does not reduce itself. */
static void fold_generic(char *acc, const char *x, const void *arg) {
  const fold_arg_t *f = arg;
  if (f->op == FH_SUM) {
    if (f->type == BT_INTEGER) {
      __int128 s = 0, y = 0;
      memcpy(&s, acc, f->esz);
      memcpy(&y, x, f->esz);
      s += y;
      memcpy(acc, &s, f->esz);
    } else if (f->kind == 16) {
      for (size_t p = 0; p < f->esz; p += 16)
        *(_Float128 *)(acc + p) += *(const _Float128 *)(x + p);
    } else {
      for (size_t p = 0; p < f->esz; p += 16)
        *(long double *)(acc + p) += *(const long double *)(x + p);
    }
    return;
  }
  int c = cmp_elem(x, acc, f);
  if ((f->op == FH_MIN && c < 0) || (f->op == FH_MAX && c > 0)) memcpy(acc, x, f->esz);
}

static void co_op(gfc_desc_t *a, int result_image, int *stat, char *errmsg, size_t errmsg_len,
                  int op, const char *what) {
  caf_need_init();
  if (stat) *stat = 0;
  if (team_check(stat, errmsg, errmsg_len, what)) return;
  caf_team_t *t = caf.current;
  if (result_image < 0 || result_image > t->size) {
    caf_report(stat, errmsg, errmsg_len, CAF_STAT_ERROR, "%s: RESULT_IMAGE %d out of range",
               what, result_image);
    return;
  }
  caf_sect_t s;
  size_t bytes;
  char *buf = pack(a, &s, &bytes);
  int dt = fh_type(a), rc;
  if (dt >= 0 && !(op != FH_SUM && a->dtype.type == BT_COMPLEX)) {
    /* In place: firehose's reductions allow src == dst. */
    if (result_image == 0) rc = fh_allreduce(t->ctx, buf, buf, s.n, dt, op);
    else rc = fh_reduce(t->ctx, result_image - 1, buf, buf, s.n, dt, op);
  } else {
    /* real(10) and real(16) both take 16 bytes and the descriptor does not say
     * which: gfortran's real(10) (x87 extended) is assumed. */
    size_t kind = a->dtype.type == BT_REAL || a->dtype.type == BT_COMPLEX ? 10
                  : a->dtype.type == BT_CHARACTER                        ? 1
                                                                         : a->dtype.elem_len;
    fold_arg_t f = {a->dtype.type, op, s.esz, kind};
    rc = tree_fold(buf, s.n, s.esz, fold_generic, &f, result_image);
  }
  unpack(&s, buf);
  done(rc, stat, errmsg, errmsg_len, what);
}

void _gfortran_caf_co_sum(gfc_desc_t *a, int result_image, int *stat, char *errmsg,
                          size_t errmsg_len) {
  co_op(a, result_image, stat, errmsg, errmsg_len, FH_SUM, "CO_SUM");
}

void _gfortran_caf_co_min(gfc_desc_t *a, int result_image, int *stat, char *errmsg, int a_len,
                          size_t errmsg_len) {
  (void)a_len;
  co_op(a, result_image, stat, errmsg, errmsg_len, FH_MIN, "CO_MIN");
}

void _gfortran_caf_co_max(gfc_desc_t *a, int result_image, int *stat, char *errmsg, int a_len,
                          size_t errmsg_len) {
  (void)a_len;
  co_op(a, result_image, stat, errmsg, errmsg_len, FH_MAX, "CO_MAX");
}

/* --- CO_REDUCE: the user's pure function, applied in image order --- */

enum { GFC_CAF_BYREF = 1, GFC_CAF_HIDDENLEN = 2, GFC_CAF_ARG_VALUE = 4, GFC_CAF_ARG_DESC = 8 };

typedef struct { void *fn; int flags, type; size_t esz; } user_op_t;

/* Call fn(acc, x) with the calling convention its result type and flags imply. */
static void fold_user(char *acc, const char *x, const void *arg) {
  const user_op_t *u = arg;
  bool byval = u->flags & GFC_CAF_ARG_VALUE;
  void *f = u->fn;
  if (u->type == BT_CHARACTER) {
    char *res = malloc(u->esz);
    if (u->flags & GFC_CAF_HIDDENLEN)
      ((void (*)(char *, size_t, const char *, const char *, size_t, size_t))f)(
          res, u->esz, acc, x, u->esz, u->esz);
    else
      ((void (*)(char *, size_t, const char *, const char *))f)(res, u->esz, acc, x);
    memcpy(acc, res, u->esz);
    free(res);
    return;
  }
#define CALL(T)                                                                   \
  do {                                                                            \
    T r_ = byval ? ((T(*)(T, T))f)(*(const T *)acc, *(const T *)x)                \
                 : ((T(*)(const T *, const T *))f)((const T *)acc, (const T *)x); \
    memcpy(acc, &r_, sizeof r_);                                                  \
    return;                                                                       \
  } while (0)
  if (u->type == BT_REAL && u->esz == 4) CALL(float);
  if (u->type == BT_REAL && u->esz == 8) CALL(double);
  if (u->type == BT_COMPLEX && u->esz == 8) CALL(float _Complex);
  if (u->type == BT_COMPLEX && u->esz == 16) CALL(double _Complex);
  if (u->esz == 1) CALL(int8_t);
  if (u->esz == 2) CALL(int16_t);
  if (u->esz == 4) CALL(int32_t);
  if (u->esz == 8) CALL(int64_t);
#undef CALL
  /* Larger derived types come back through a hidden result pointer (x86-64 SysV). */
  char *res = malloc(u->esz);
  ((void (*)(char *, const char *, const char *))f)(res, acc, x);
  memcpy(acc, res, u->esz);
  free(res);
}

void _gfortran_caf_co_reduce(gfc_desc_t *a, void *(*opr)(void *, void *), int opr_flags,
                             int result_image, int *stat, char *errmsg, int a_len,
                             size_t errmsg_len) {
  (void)a_len;
  caf_need_init();
  if (stat) *stat = 0;
  if (team_check(stat, errmsg, errmsg_len, "CO_REDUCE")) return;
  caf_team_t *t = caf.current;
  if (result_image < 0 || result_image > t->size) {
    caf_report(stat, errmsg, errmsg_len, CAF_STAT_ERROR, "CO_REDUCE: RESULT_IMAGE %d out of range",
               result_image);
    return;
  }
  size_t esz = a->dtype.elem_len;
  if (a->dtype.type == BT_DERIVED && esz > 8 && esz <= 16) {
    caf_report(stat, errmsg, errmsg_len, CAF_STAT_ERROR,
               "CO_REDUCE: derived types of 9 to 16 bytes are not supported");
    return;
  }
  caf_sect_t s;
  size_t bytes;
  char *buf = pack(a, &s, &bytes);
  user_op_t u = {(void *)opr, opr_flags, a->dtype.type, esz};
  int rc = tree_fold(buf, s.n, s.esz, fold_user, &u, result_image);
  unpack(&s, buf);
  done(rc, stat, errmsg, errmsg_len, "CO_REDUCE");
}
