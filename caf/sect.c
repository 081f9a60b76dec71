/* Array sections: the elements a descriptor (or a descriptor plus vector subscripts)
 * names, in array element order (first index fastest), as base + sum of per-dimension
 * byte offsets. Element k of a section is the k-th in that order on both sides of an
 * assignment, which is what Fortran's elemental assignment pairs.
 */
#include "caf.h"

#include <stdlib.h>
#include <string.h>

int desc_rank(gfc_desc_t *d) { return d->dtype.rank; }

static ptrdiff_t span_of(gfc_desc_t *d) {
  return d->span > 0 ? d->span : (ptrdiff_t)d->dtype.elem_len;
}

size_t desc_elems(gfc_desc_t *d) {
  size_t n = 1;
  for (int i = 0; i < d->dtype.rank; i++) {
    ptrdiff_t e = d->dim[i].ubound - d->dim[i].lbound + 1;
    n *= e > 0 ? (size_t)e : 0;
  }
  return n;
}

void sect_from_desc(caf_sect_t *s, gfc_desc_t *d) {
  memset(s, 0, sizeof *s);
  s->base = d->base_addr;
  s->rank = d->dtype.rank;
  s->esz = d->dtype.elem_len;
  s->n = desc_elems(d);
  ptrdiff_t span = span_of(d);
  for (int i = 0; i < s->rank; i++) {
    ptrdiff_t e = d->dim[i].ubound - d->dim[i].lbound + 1;
    s->ext[i] = e > 0 ? e : 0;
    s->str[i] = d->dim[i].stride * span;
  }
}

/* Element k of a vector subscript of integer kind `kind`. */
ptrdiff_t sect_vec_index(const void *v, int kind, size_t k) {
  switch (kind) {
  case 1: return ((const int8_t *)v)[k];
  case 2: return ((const int16_t *)v)[k];
  case 4: return ((const int32_t *)v)[k];
  default: return (ptrdiff_t)((const int64_t *)v)[k];
  }
}

/* caf_send / caf_get with vector subscripts: `origin` is the address of the array's
 * first element (lower bounds), `d` gives bounds and strides, `v[i]` the subscripts of
 * dimension i: a list of indices or a triplet. */
int sect_from_vector(caf_sect_t *s, char *origin, gfc_desc_t *d, caf_vector_t *v) {
  memset(s, 0, sizeof *s);
  s->base = origin;
  s->rank = d->dtype.rank;
  s->esz = d->dtype.elem_len;
  s->n = 1;
  ptrdiff_t span = span_of(d);
  int out = 0;
  for (int i = 0; i < d->dtype.rank; i++) {
    ptrdiff_t lb = d->dim[i].lbound, st = d->dim[i].stride * span;
    if (v[i].nvec > 0) {
      ptrdiff_t *offs = malloc(sizeof(ptrdiff_t) * v[i].nvec);
      for (size_t k = 0; k < v[i].nvec; k++)
        offs[k] = (sect_vec_index(v[i].u.v.vector, v[i].u.v.kind, k) - lb) * st;
      s->ext[out] = (ptrdiff_t)v[i].nvec;
      s->vec[out] = offs;
      s->str[out] = st;
    } else {
      ptrdiff_t lo = v[i].u.triplet.lower_bound, hi = v[i].u.triplet.upper_bound;
      ptrdiff_t step = v[i].u.triplet.stride ? v[i].u.triplet.stride : 1;
      ptrdiff_t e = (hi - lo) / step + 1;
      if (e < 0) e = 0;
      s->base += (lo - lb) * st;
      s->ext[out] = e;
      s->str[out] = step * st;
    }
    s->n *= (size_t)s->ext[out];
    out++;
  }
  s->rank = out;
  return 0;
}

void sect_free(caf_sect_t *s) {
  for (int i = 0; i < s->rank; i++) {
    free(s->vec[i]);
    s->vec[i] = NULL;
  }
}

char *sect_addr(const caf_sect_t *s, size_t k) {
  char *p = s->base;
  for (int i = 0; i < s->rank; i++) {
    size_t e = (size_t)s->ext[i];
    size_t idx = e ? k % e : 0;
    k = e ? k / e : 0;
    p += s->vec[i] ? s->vec[i][idx] : (ptrdiff_t)idx * s->str[i];
  }
  return p;
}

bool sect_contiguous(const caf_sect_t *s) {
  ptrdiff_t want = (ptrdiff_t)s->esz;
  for (int i = 0; i < s->rank; i++) {
    if (s->vec[i]) return false;
    if (s->ext[i] > 1 && s->str[i] != want) return false;
    want *= s->ext[i];
  }
  return true;
}
