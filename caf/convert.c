/* Kind and type conversion of one element, for assignments whose two sides differ
 * (`r8[2] = i4`, `c(1:4)[2] = 'ab'`). Numbers go through __int128 / long double /
 * _Float128; characters are cut or blank-padded and converted between kinds 1 and 4.
 */
#include "caf.h"

#include <string.h>

caf_elty_t elty_of(gfc_desc_t *d, int kind) {
  caf_elty_t t = {d->dtype.type, kind, d->dtype.elem_len};
  if (t.type == BT_CHARACTER && kind == 0) t.kind = 1;
  return t;
}

bool elty_same(caf_elty_t a, caf_elty_t b) {
  if (a.len != b.len) return false;
  if (a.type == BT_DERIVED || b.type == BT_DERIVED || a.type == BT_CLASS) return true;
  return a.type == b.type && a.kind == b.kind;
}

typedef struct { __int128 i; long double re, im; _Float128 q; bool is_int; } num_t;

static num_t read_num(const void *p, caf_elty_t t) {
  num_t v = {0};
  switch (t.type) {
  case BT_INTEGER:
  case BT_LOGICAL:
    v.is_int = true;
    switch (t.len) {
    case 1: v.i = *(const int8_t *)p; break;
    case 2: v.i = *(const int16_t *)p; break;
    case 4: v.i = *(const int32_t *)p; break;
    case 8: v.i = *(const int64_t *)p; break;
    default: memcpy(&v.i, p, 16); break;
    }
    if (t.type == BT_LOGICAL) v.i = v.i != 0;
    v.re = (long double)v.i;
    v.q = (_Float128)v.i;
    return v;
  case BT_REAL:
  case BT_COMPLEX: {
    size_t part = t.type == BT_COMPLEX ? t.len / 2 : t.len;
    const char *c = p;
    for (int k = 0; k < (t.type == BT_COMPLEX ? 2 : 1); k++) {
      long double x;
      if (part == 4) x = *(const float *)(c + k * part);
      else if (part == 8) x = *(const double *)(c + k * part);
      else if (t.kind == 10) x = *(const long double *)(c + k * part);
      else x = (long double)*(const _Float128 *)(c + k * part);
      if (k == 0) v.re = x;
      else v.im = x;
    }
    v.q = (part == 16 && t.kind == 16) ? *(const _Float128 *)p : (_Float128)v.re;
    v.i = (__int128)v.re;
    return v;
  }
  default: return v;
  }
}

static void write_num(void *p, caf_elty_t t, num_t v) {
  switch (t.type) {
  case BT_INTEGER:
  case BT_LOGICAL: {
    __int128 x = t.type == BT_LOGICAL ? (v.is_int ? v.i != 0 : v.re != 0) : v.i;
    switch (t.len) {
    case 1: *(int8_t *)p = (int8_t)x; break;
    case 2: *(int16_t *)p = (int16_t)x; break;
    case 4: *(int32_t *)p = (int32_t)x; break;
    case 8: *(int64_t *)p = (int64_t)x; break;
    default: memcpy(p, &x, 16); break;
    }
    return;
  }
  case BT_REAL:
  case BT_COMPLEX: {
    size_t part = t.type == BT_COMPLEX ? t.len / 2 : t.len;
    char *c = p;
    for (int k = 0; k < (t.type == BT_COMPLEX ? 2 : 1); k++) {
      long double x = k == 0 ? v.re : v.im;
      if (part == 4) *(float *)(c + k * part) = (float)x;
      else if (part == 8) *(double *)(c + k * part) = (double)x;
      else if (t.kind == 10) *(long double *)(c + k * part) = x;
      else *(_Float128 *)(c + k * part) = k == 0 && !v.is_int ? v.q : (_Float128)x;
    }
    return;
  }
  default: return;
  }
}

static void convert_chars(void *dst, caf_elty_t dt, const void *src, caf_elty_t st) {
  size_t dk = dt.kind == 4 ? 4 : 1, sk = st.kind == 4 ? 4 : 1;
  size_t dn = dt.len / dk, sn = st.len / sk;
  for (size_t i = 0; i < dn; i++) {
    uint32_t ch = ' ';
    if (i < sn) ch = sk == 4 ? ((const uint32_t *)src)[i] : ((const uint8_t *)src)[i];
    if (dk == 4) ((uint32_t *)dst)[i] = ch;
    else ((uint8_t *)dst)[i] = ch > 255 ? '?' : (uint8_t)ch;
  }
}

void convert_elem(void *dst, caf_elty_t dt, const void *src, caf_elty_t st) {
  if (elty_same(dt, st)) {
    memmove(dst, src, dt.len);
  } else if (dt.type == BT_CHARACTER && st.type == BT_CHARACTER) {
    convert_chars(dst, dt, src, st);
  } else if (dt.type == BT_DERIVED || st.type == BT_DERIVED || dt.type == BT_CHARACTER ||
             st.type == BT_CHARACTER) {
    memmove(dst, src, dt.len < st.len ? dt.len : st.len);
  } else {
    write_num(dst, dt, read_num(src, st));
  }
}
