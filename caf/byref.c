/* The by-reference calls: `obj[i]%comp(2:n)%x = ...`, where the path into the remote
 * object goes through allocatable components whose addresses only image i knows.
 *
 * A reference chain is walked once per statement: each allocatable component costs
 * one remote read of its pointer or descriptor (fetched whole, once), never one per
 * element. Fortran allows at most one part with nonzero rank, and no allocatable
 * component to its right, so the walk ends in one remote section (regular, or with
 * vector subscripts), which xfer.c moves with a single firehose call.
 */
#include "caf.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  int world;
  char *addr;         /* current remote object (scalar part of the walk) */
  char *desc_addr;    /* a remote descriptor to use for the next array ref */
  bool ranked;        /* the section below holds the nonzero-rank part */
  caf_sect_t s;
  bool absent;        /* an unallocated component was met */
} walk_t;

static int fetch(int world, void *dst, const void *src, size_t n) {
  return fh_get(caf.ctx, dst, world, src, n);
}

static int ref_dims(const caf_reference_t *r) {
  int n = 0;
  while (n < CAF_MAX_DIM && r->u.a.mode[n] != CAF_ARR_REF_NONE) n++;
  return n;
}

/* One dimension of an array ref: adds a section dimension or a constant offset. */
static void array_dim(walk_t *w, const caf_reference_t *r, int i, ptrdiff_t lb, ptrdiff_t ub,
                      ptrdiff_t st, char **base) {
  ptrdiff_t lo = r->u.a.dim[i].s.start, hi = r->u.a.dim[i].s.end, step = r->u.a.dim[i].s.stride;
  switch (r->u.a.mode[i]) {
  case CAF_ARR_REF_SINGLE: *base += (lo - lb) * st; return;
  case CAF_ARR_REF_FULL:
    if (r->type == CAF_REF_ARRAY) lo = lb, hi = ub, step = 1; /* static: bounds given */
    break;
  case CAF_ARR_REF_OPEN_END: hi = ub, step = step ? step : 1; break;
  case CAF_ARR_REF_OPEN_START: lo = lb, step = step ? step : 1; break;
  case CAF_ARR_REF_VECTOR: {
    size_t n = r->u.a.dim[i].v.nvec;
    ptrdiff_t *offs = malloc(sizeof(ptrdiff_t) * (n ? n : 1));
    for (size_t k = 0; k < n; k++)
      offs[k] = (sect_vec_index(r->u.a.dim[i].v.vector, r->u.a.dim[i].v.kind, k) - lb) * st;
    int d = w->s.rank++;
    w->s.ext[d] = (ptrdiff_t)n;
    w->s.str[d] = st;
    w->s.vec[d] = offs;
    return;
  }
  default: break;
  }
  if (step == 0) step = 1;
  ptrdiff_t e = (hi - lo) / step + 1;
  int d = w->s.rank++;
  *base += (lo - lb) * st;
  w->s.ext[d] = e > 0 ? e : 0;
  w->s.str[d] = step * st;
}

/* An array with a descriptor: the remote one at desc_addr, or (first ref of an
 * allocatable coarray) this image's, which has every image's shape. */
static int array_ref(walk_t *w, caf_token_t *t, const caf_reference_t *r, bool first) {
  char raw[sizeof(gfc_desc_t) + CAF_MAX_DIM * sizeof(caf_dim_t)];
  gfc_desc_t *d = (gfc_desc_t *)raw;
  int nd = ref_dims(r);
  char *data;
  if (w->desc_addr) {
    int rc = fetch(w->world, raw, w->desc_addr, sizeof(gfc_desc_t) + (size_t)nd * sizeof(caf_dim_t));
    if (rc != FH_OK) return rc;
    data = d->base_addr;
    w->desc_addr = NULL;
  } else if (first && t->desc) {
    memcpy(raw, t->desc, sizeof(gfc_desc_t) + (size_t)nd * sizeof(caf_dim_t));
    data = w->addr;
  } else {
    return FH_ERR_INVALID_ARG;
  }
  if (!data) {
    w->absent = true;
    return FH_OK;
  }
  ptrdiff_t span = d->span > 0 ? d->span : (ptrdiff_t)r->item_size;
  char *base = data;
  int before = w->s.rank;
  for (int i = 0; i < nd; i++)
    array_dim(w, r, i, d->dim[i].lbound, d->dim[i].ubound, d->dim[i].stride * span, &base);
  if (w->s.rank > before) {
    if (w->ranked) return FH_ERR_INVALID_ARG; /* two parts with rank: not Fortran */
    w->ranked = true;
    w->s.base = base;
  } else {
    w->addr = base;
  }
  return FH_OK;
}

/* A non-allocatable array inside the object: start/end/stride count elements from
 * its first one (the compiler folds the dimensions together). */
static int static_array_ref(walk_t *w, const caf_reference_t *r) {
  int nd = ref_dims(r);
  ptrdiff_t isz = (ptrdiff_t)r->item_size;
  char *base = w->ranked ? w->s.base : w->addr;
  int before = w->s.rank;
  for (int i = 0; i < nd; i++) {
    if (r->u.a.mode[i] == CAF_ARR_REF_VECTOR || r->u.a.mode[i] == CAF_ARR_REF_OPEN_END ||
        r->u.a.mode[i] == CAF_ARR_REF_OPEN_START)
      return FH_ERR_INVALID_ARG;
    array_dim(w, r, i, 0, 0, isz, &base);
  }
  if (w->s.rank > before) {
    if (w->ranked && before > 0 && w->s.base != base) return FH_ERR_INVALID_ARG;
    w->ranked = true;
  }
  if (w->ranked) w->s.base = base;
  else w->addr = base;
  return FH_OK;
}

static int component_ref(walk_t *w, const caf_reference_t *r) {
  if (w->ranked) {
    if (r->u.c.caf_token_offset > 0) return FH_ERR_INVALID_ARG;
    w->s.base += r->u.c.offset;
    return FH_OK;
  }
  w->addr += r->u.c.offset;
  if (r->u.c.caf_token_offset <= 0) return FH_OK;
  if (r->next && r->next->type == CAF_REF_ARRAY) {
    w->desc_addr = w->addr; /* an allocatable array component: its descriptor is here */
    return FH_OK;
  }
  char *p = NULL;
  int rc = fetch(w->world, &p, w->addr, sizeof p);
  if (rc != FH_OK) return rc;
  if (!p) w->absent = true;
  w->addr = p;
  return FH_OK;
}

/* Walk `refs` on image `world`; the result is w->s (rank 0 for a scalar). */
static int walk(walk_t *w, caf_token_t *t, int world, caf_reference_t *refs) {
  memset(w, 0, sizeof *w);
  w->world = world;
  w->addr = caf_remote(t, world, 0, 0, "coarray reference");
  size_t esz = 0;
  for (caf_reference_t *r = refs; r && !w->absent; r = r->next) {
    int rc;
    switch (r->type) {
    case CAF_REF_COMPONENT: rc = component_ref(w, r); break;
    case CAF_REF_ARRAY: rc = array_ref(w, t, r, r == refs); break;
    case CAF_REF_STATIC_ARRAY: rc = static_array_ref(w, r); break;
    default: rc = FH_ERR_INVALID_ARG; break;
    }
    if (rc != FH_OK) return rc;
    esz = r->item_size;
  }
  if (!w->ranked) w->s.base = w->addr;
  w->s.esz = esz;
  w->s.n = 1;
  for (int i = 0; i < w->s.rank; i++) w->s.n *= (size_t)w->s.ext[i];
  return FH_OK;
}

static int world_of(int image) {
  int w = caf_world_of(image);
  if (w < 0) caf_fatal("coarray reference: image index %d out of range 1..%d", image, caf.current->size);
  return w;
}

/* Whether an allocated left-hand side has the remote section's shape (an allocatable
 * of another shape is reallocated, F2018 10.2.1.3, not only one of another size). */
static bool same_shape(gfc_desc_t *dst, const caf_sect_t *s) {
  for (int i = 0; i < dst->dtype.rank; i++) {
    ptrdiff_t e = i < s->rank ? s->ext[i] : 1;
    if (dst->dim[i].ubound - dst->dim[i].lbound + 1 != e) return false;
  }
  return desc_elems(dst) == s->n;
}

/* An unallocated (NULL) left-hand side that the assignment may allocate: give it the
 * shape of the remote section, lower bounds 1 (so the offset is minus the sum of the
 * strides). */
static void allocate_like(gfc_desc_t *dst, const caf_sect_t *s) {
  int rank = dst->dtype.rank;
  size_t n = 1;
  ptrdiff_t stride = 1, offset = 0;
  for (int i = 0; i < rank; i++) {
    ptrdiff_t e = i < s->rank ? s->ext[i] : 1;
    dst->dim[i].lbound = 1;
    dst->dim[i].ubound = e;
    dst->dim[i].stride = stride;
    offset -= stride; /* -(lbound * stride), lbound 1 */
    stride *= e;
    n *= (size_t)e;
  }
  size_t esz = dst->dtype.elem_len ? dst->dtype.elem_len : s->esz;
  dst->dtype.elem_len = esz;
  dst->span = (ptrdiff_t)esz;
  dst->offset = offset;
  dst->base_addr = malloc((n ? n : 1) * esz);
}

void _gfortran_caf_get_by_ref(void *token, int image_index, gfc_desc_t *dst,
                              caf_reference_t *refs, int dst_kind, int src_kind,
                              bool may_require_tmp, bool dst_reallocatable, int *stat,
                              int src_type) {
  (void)may_require_tmp;
  caf_need_init();
  if (stat) *stat = 0;
  caf_token_t *t = caf_token(token, "coarray get");
  int w = world_of(image_index);
  walk_t wk;
  int rc = walk(&wk, t, w, refs);
  if (rc == FH_OK && wk.absent) {
    caf_report(stat, NULL, 0, CAF_STAT_ERROR,
               "coarray get: a component is not allocated on image %d", image_index);
    return;
  }
  if (rc == FH_OK) {
    if (!dst->base_addr || (dst_reallocatable && !same_shape(dst, &wk.s))) {
      if (dst->base_addr && dst_reallocatable) free(dst->base_addr);
      allocate_like(dst, &wk.s);
    }
    caf_sect_t l;
    sect_from_desc(&l, dst);
    caf_elty_t rt = {src_type, src_kind, wk.s.esz};
    rc = xfer_get(&l, elty_of(dst, dst_kind), w, &wk.s, rt);
  }
  sect_free(&wk.s);
  if (rc != FH_OK)
    caf_report(stat, NULL, 0, CAF_STAT_ERROR, "coarray get from image %d: %s", image_index,
               fh_strerror(rc));
}

void _gfortran_caf_send_by_ref(void *token, int image_index, gfc_desc_t *src,
                               caf_reference_t *refs, int dst_kind, int src_kind,
                               bool may_require_tmp, bool dst_reallocatable, int *stat,
                               int dst_type) {
  (void)may_require_tmp;
  (void)dst_reallocatable;
  caf_need_init();
  if (stat) *stat = 0;
  caf_token_t *t = caf_token(token, "coarray put");
  int w = world_of(image_index);
  walk_t wk;
  int rc = walk(&wk, t, w, refs);
  if (rc == FH_OK && wk.absent) {
    caf_report(stat, NULL, 0, CAF_STAT_ERROR,
               "coarray put: a component is not allocated on image %d", image_index);
    return;
  }
  if (rc == FH_OK) {
    caf_sect_t l;
    sect_from_desc(&l, src);
    caf_elty_t rt = {dst_type, dst_kind, wk.s.esz};
    rc = xfer_put(w, &wk.s, rt, &l, elty_of(src, src_kind));
  }
  sect_free(&wk.s);
  if (rc != FH_OK)
    caf_report(stat, NULL, 0, CAF_STAT_ERROR, "coarray put to image %d: %s", image_index,
               fh_strerror(rc));
}

void _gfortran_caf_sendget_by_ref(void *dst_token, int dst_image, caf_reference_t *dst_refs,
                                  void *src_token, int src_image, caf_reference_t *src_refs,
                                  int dst_kind, int src_kind, bool may_require_tmp, int *dst_stat,
                                  int *src_stat, int dst_type, int src_type) {
  (void)may_require_tmp;
  caf_need_init();
  if (dst_stat) *dst_stat = 0;
  if (src_stat) *src_stat = 0;
  caf_token_t *dt = caf_token(dst_token, "coarray copy"), *st = caf_token(src_token, "coarray copy");
  int dw = world_of(dst_image), sw = world_of(src_image);
  walk_t ws, wd;
  int rc = walk(&ws, st, sw, src_refs);
  size_t nbytes = 0;
  char *buf = NULL;
  if (rc == FH_OK && !ws.absent) buf = xfer_fetch(sw, &ws.s, &nbytes);
  if (!buf) {
    caf_report(src_stat, NULL, 0, CAF_STAT_ERROR, "coarray copy: cannot read image %d",
               src_image);
    sect_free(&ws.s);
    return;
  }
  rc = walk(&wd, dt, dw, dst_refs);
  if (rc == FH_OK && !wd.absent) {
    caf_sect_t l = {0};
    l.base = buf;
    l.rank = 1;
    l.n = ws.s.n;
    l.esz = ws.s.esz;
    l.ext[0] = (ptrdiff_t)ws.s.n;
    l.str[0] = (ptrdiff_t)ws.s.esz;
    caf_elty_t lt = {src_type, src_kind, ws.s.esz}, rt = {dst_type, dst_kind, wd.s.esz};
    rc = xfer_put(dw, &wd.s, rt, &l, lt);
    caf_flush();
  } else if (rc == FH_OK) {
    rc = FH_ERR_INVALID_ARG;
  }
  free(buf);
  sect_free(&ws.s);
  sect_free(&wd.s);
  if (rc != FH_OK)
    caf_report(dst_stat, NULL, 0, CAF_STAT_ERROR, "coarray copy to image %d: %s", dst_image,
               fh_strerror(rc));
}

int _gfortran_caf_is_present(void *token, int image_index, caf_reference_t *refs) {
  caf_need_init();
  caf_token_t *t = caf_token(token, "ALLOCATED");
  int w = world_of(image_index);
  walk_t wk;
  caf_flush();
  int rc = walk(&wk, t, w, refs);
  sect_free(&wk.s);
  if (rc != FH_OK) caf_fatal("ALLOCATED on image %d: %s", image_index, fh_strerror(rc));
  return !wk.absent;
}
