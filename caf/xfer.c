/* send / get / sendget: moving a section between this image and another.
 *
 * Design (issue 18 part 3):
 *   - The remote side is described to firehose as one call: fh_put/fh_get when
 *     contiguous, the strided VIS calls (fh_puts/fh_gets) for sections, the vector
 *     ones (fh_putv/fh_getv) for vector subscripts. Negative strides are turned around
 *     (the local side is packed in the matching order), so firehose sees ascending runs.
 *   - The local side is used in place when it is contiguous and of the same type;
 *     otherwise it is packed (with kind conversion) into a buffer.
 *   - Puts of CAF_BLOCK_MAX to CAF_STAGE_MAX bytes are copied into a staging arena and
 *     issued with the _nbi calls: they complete at the next image-control statement, get or
 *     atomic (caf_flush), as the Fortran memory model allows. A put that overlaps a
 *     pending one flushes first, so two puts to one place land in program order.
 */
#include "caf.h"

#include <stdlib.h>
#include <string.h>

/* Make every regular dimension's stride positive; flip[i] marks the turned ones. */
static void normalize(caf_sect_t *r, bool *flip) {
  for (int i = 0; i < r->rank; i++) {
    flip[i] = false;
    if (!r->vec[i] && r->str[i] < 0 && r->ext[i] > 1) {
      r->base += (r->ext[i] - 1) * r->str[i];
      r->str[i] = -r->str[i];
      flip[i] = true;
    }
  }
}

/* Element order index (before normalisation) of the k-th element after it. */
static size_t natural(const caf_sect_t *r, const bool *flip, size_t k) {
  size_t out = 0, mul = 1;
  for (int i = 0; i < r->rank; i++) {
    size_t e = (size_t)r->ext[i];
    size_t idx = e ? k % e : 0;
    k = e ? k / e : 0;
    if (flip[i]) idx = e - 1 - idx;
    out += idx * mul;
    mul *= e;
  }
  return out;
}

static bool any_flip(const caf_sect_t *r, const bool *flip) {
  for (int i = 0; i < r->rank; i++)
    if (flip[i]) return true;
  return false;
}

static bool any_vec(const caf_sect_t *r) {
  for (int i = 0; i < r->rank; i++)
    if (r->vec[i]) return true;
  return false;
}

/* Strided description of a regular section against a contiguous buffer: returns the
 * number of levels; count[0] is the contiguous run. */
static size_t strided(const caf_sect_t *r, size_t *count, size_t *rstr, size_t *bstr) {
  size_t levels = 0, run = r->esz, packed = r->esz;
  bool merging = true;
  for (int i = 0; i < r->rank; i++) {
    if (r->ext[i] == 1) continue;
    if (merging && (size_t)r->str[i] == run) {
      run *= (size_t)r->ext[i];
      packed = run;
      continue;
    }
    merging = false;
    count[levels + 1] = (size_t)r->ext[i];
    rstr[levels] = (size_t)r->str[i];
    bstr[levels] = packed;
    packed *= (size_t)r->ext[i];
    levels++;
  }
  count[0] = run;
  return levels;
}

static fh_memvec_t *pieces(const caf_sect_t *r) {
  fh_memvec_t *v = malloc(sizeof *v * (r->n ? r->n : 1));
  for (size_t k = 0; k < r->n; k++) {
    v[k].addr = sect_addr(r, k);
    v[k].len = r->esz;
  }
  return v;
}

/* Write the contiguous buffer `buf` (r->n elements) into section `r` of `world`. */
static int write_remote(int world, caf_sect_t *r, const char *buf, bool deferred) {
  size_t total = r->n * r->esz;
  if (any_vec(r)) {
    fh_memvec_t *v = pieces(r), src = {(void *)buf, total};
    int rc = fh_putv(caf.ctx, world, r->n, v, 1, &src);
    free(v);
    return rc;
  }
  size_t count[CAF_MAX_DIM + 1], rstr[CAF_MAX_DIM], bstr[CAF_MAX_DIM];
  size_t levels = strided(r, count, rstr, bstr);
  if (levels == 0)
    return deferred ? fh_put_nbi(caf.ctx, world, r->base, buf, total)
                    : fh_put(caf.ctx, world, r->base, buf, total);
  return deferred ? fh_puts_nbi(caf.ctx, world, r->base, rstr, buf, bstr, count, levels)
                  : fh_puts(caf.ctx, world, r->base, rstr, buf, bstr, count, levels);
}

static int read_remote(int world, caf_sect_t *r, char *buf) {
  size_t total = r->n * r->esz;
  if (any_vec(r)) {
    fh_memvec_t *v = pieces(r), dst = {buf, total};
    int rc = fh_getv(caf.ctx, 1, &dst, world, r->n, v);
    free(v);
    return rc;
  }
  size_t count[CAF_MAX_DIM + 1], rstr[CAF_MAX_DIM], bstr[CAF_MAX_DIM];
  size_t levels = strided(r, count, rstr, bstr);
  if (levels == 0) return fh_get(caf.ctx, buf, world, r->base, total);
  return fh_gets(caf.ctx, buf, bstr, world, r->base, rstr, count, levels);
}

/* The remote extent [lo, hi) a section touches (for the overlap check). */
static void extent(const caf_sect_t *r, uintptr_t *lo, uintptr_t *hi) {
  intptr_t a = (intptr_t)r->base, b = a + (intptr_t)r->esz;
  for (int i = 0; i < r->rank; i++) {
    if (r->vec[i]) {
      *lo = 0;
      *hi = UINTPTR_MAX;
      return;
    }
    intptr_t span = (r->ext[i] - 1) * r->str[i];
    if (span < 0) a += span;
    else b += span;
  }
  *lo = (uintptr_t)a;
  *hi = (uintptr_t)b;
}

int xfer_put(int world, caf_sect_t *r, caf_elty_t rt, caf_sect_t *l, caf_elty_t lt) {
  size_t n = r->n;
  if (n == 0) return FH_OK;
  bool bcast = l->n == 1 && n > 1;
  if (!bcast && l->n != n) return FH_ERR_INVALID_ARG;
  bool flip[CAF_MAX_DIM];
  normalize(r, flip);
  size_t total = n * r->esz;
  bool inplace = !bcast && !any_flip(r, flip) && elty_same(rt, lt) && sect_contiguous(l);
  uintptr_t lo, hi;
  extent(r, &lo, &hi);
  char *buf = caf_stage(total, world, lo, hi);
  bool deferred = buf != NULL;
  if (!buf && inplace) buf = l->base;
  else if (!buf) buf = malloc(total);
  if (buf != l->base) {
    if (inplace) {
      memcpy(buf, l->base, total);
    } else {
      for (size_t k = 0; k < n; k++) {
        const char *src = bcast ? l->base : sect_addr(l, natural(r, flip, k));
        convert_elem(buf + k * r->esz, rt, src, lt);
      }
    }
  }
  int rc = write_remote(world, r, buf, deferred);
  if (deferred) caf.puts_pending = true;
  else if (buf != l->base) free(buf);
  return rc;
}

int xfer_get(caf_sect_t *l, caf_elty_t lt, int world, caf_sect_t *r, caf_elty_t rt) {
  size_t n = r->n;
  if (n == 0) return FH_OK;
  if (l->n != n) return FH_ERR_INVALID_ARG;
  caf_flush();
  bool flip[CAF_MAX_DIM];
  normalize(r, flip);
  bool inplace = !any_flip(r, flip) && elty_same(rt, lt) && sect_contiguous(l);
  char *buf = inplace ? l->base : malloc(n * r->esz);
  int rc = read_remote(world, r, buf);
  if (!inplace) {
    if (rc == FH_OK)
      for (size_t k = 0; k < n; k++)
        convert_elem(sect_addr(l, natural(r, flip, k)), lt, buf + k * r->esz, rt);
    free(buf);
  }
  return rc;
}

/* The elements of a remote section, contiguous, in element order (for sendget). */
void *xfer_fetch(int world, caf_sect_t *r, size_t *nbytes) {
  caf_sect_t l = {0};
  char *buf = malloc(r->n * r->esz + 1);
  l.base = buf;
  l.rank = 1;
  l.n = r->n;
  l.esz = r->esz;
  l.ext[0] = (ptrdiff_t)r->n;
  l.str[0] = (ptrdiff_t)r->esz;
  caf_elty_t t = {BT_DERIVED, 0, r->esz};
  int rc = xfer_get(&l, t, world, r, t);
  if (rc != FH_OK) {
    free(buf);
    return NULL;
  }
  *nbytes = r->n * r->esz;
  return buf;
}

/* --- the ABI calls --- */

static void remote_sect(caf_sect_t *s, caf_token_t *t, int world, size_t offset, gfc_desc_t *d,
                        caf_vector_t *v, const char *what) {
  char *origin = caf_remote(t, world, offset, d->dtype.elem_len, what);
  if (v) {
    sect_from_vector(s, origin, d, v);
  } else {
    sect_from_desc(s, d);
    s->base = origin;
  }
  /* Bounds: the section's first and last byte must lie in the coarray. */
  if (s->n) {
    uintptr_t lo, hi, b = (uintptr_t)t->base[world];
    extent(s, &lo, &hi);
    if (!any_vec(s) && (lo < b || hi > b + t->size))
      caf_fatal("%s: section outside the coarray on image %d", what, world + 1);
  }
}

static int image_world(int image_index, const char *what) {
  int w = caf_world_of(image_index);
  if (w < 0) caf_fatal("%s: image index %d out of range 1..%d", what, image_index, caf.current->size);
  return w;
}

void _gfortran_caf_send(void *token, size_t offset, int image_index, gfc_desc_t *dest,
                        caf_vector_t *dst_vector, gfc_desc_t *src, int dst_kind, int src_kind,
                        bool may_require_tmp, int *stat) {
  (void)may_require_tmp;
  caf_need_init();
  if (stat) *stat = 0;
  caf_token_t *t = caf_token(token, "coarray put");
  int w = image_world(image_index, "coarray put");
  caf_sect_t r, l;
  remote_sect(&r, t, w, offset, dest, dst_vector, "coarray put");
  sect_from_desc(&l, src);
  int rc = xfer_put(w, &r, elty_of(dest, dst_kind), &l, elty_of(src, src_kind));
  sect_free(&r);
  if (rc != FH_OK)
    caf_report(stat, NULL, 0, CAF_STAT_ERROR, "coarray put to image %d: %s", image_index,
               fh_strerror(rc));
}

void _gfortran_caf_get(void *token, size_t offset, int image_index, gfc_desc_t *src,
                       caf_vector_t *src_vector, gfc_desc_t *dest, int src_kind, int dst_kind,
                       bool may_require_tmp, int *stat) {
  (void)may_require_tmp;
  caf_need_init();
  if (stat) *stat = 0;
  caf_token_t *t = caf_token(token, "coarray get");
  int w = image_world(image_index, "coarray get");
  caf_sect_t r, l;
  remote_sect(&r, t, w, offset, src, src_vector, "coarray get");
  sect_from_desc(&l, dest);
  int rc = xfer_get(&l, elty_of(dest, dst_kind), w, &r, elty_of(src, src_kind));
  sect_free(&r);
  if (rc != FH_OK)
    caf_report(stat, NULL, 0, CAF_STAT_ERROR, "coarray get from image %d: %s", image_index,
               fh_strerror(rc));
}

void _gfortran_caf_sendget(void *dst_token, size_t dst_offset, int dst_image, gfc_desc_t *dest,
                           caf_vector_t *dst_vector, void *src_token, size_t src_offset,
                           int src_image, gfc_desc_t *src, caf_vector_t *src_vector,
                           int dst_kind, int src_kind, bool may_require_tmp, int *stat) {
  (void)may_require_tmp;
  caf_need_init();
  if (stat) *stat = 0;
  caf_token_t *dt = caf_token(dst_token, "coarray copy"), *st = caf_token(src_token, "coarray copy");
  int dw = image_world(dst_image, "coarray copy"), sw = image_world(src_image, "coarray copy");
  caf_sect_t r, s, l = {0};
  remote_sect(&s, st, sw, src_offset, src, src_vector, "coarray copy");
  size_t nbytes = 0;
  char *buf = xfer_fetch(sw, &s, &nbytes);
  int rc = buf ? FH_OK : FH_ERR_ACCESS;
  if (buf) {
    remote_sect(&r, dt, dw, dst_offset, dest, dst_vector, "coarray copy");
    l.base = buf;
    l.rank = 1;
    l.n = s.n;
    l.esz = s.esz;
    l.ext[0] = (ptrdiff_t)s.n;
    l.str[0] = (ptrdiff_t)s.esz;
    rc = xfer_put(dw, &r, elty_of(dest, dst_kind), &l, elty_of(src, src_kind));
    caf_flush();
    sect_free(&r);
    free(buf);
  }
  sect_free(&s);
  if (rc != FH_OK)
    caf_report(stat, NULL, 0, CAF_STAT_ERROR, "coarray copy from image %d to image %d: %s",
               src_image, dst_image, fh_strerror(rc));
}
