/* test_coll_types.c -- reductions on the element types and operations a Fortran
 * runtime needs, as a user writes them from firehose.h: 8- and 16-bit integers
 * (signed and unsigned), complex float and double (FH_SUM, FH_PROD), and logical
 * and/or (FH_LAND, FH_LOR: nonzero is true, the result 1 or 0) on integers of every
 * width. Every rank's input is a function of (rank, index), so each rank computes
 * the expected result itself, folding the inputs in rank order. fh_allreduce and
 * fh_reduce (every root), counts from 1 to past the 64 KiB chunk. Operations a type
 * does not define (FH_MIN on complex, FH_LAND on double) are FH_ERR_INVALID_ARG.
 * Rank 0 prints "test_coll_types: OK". */
#include <mpi.h>
#include <firehose.h>
#include <complex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int me = -1, np;
#define FAIL(...)                                                              \
  do {                                                                         \
    char m_[512];                                                              \
    fh_last_error(m_, sizeof m_);                                              \
    fprintf(stderr, "[rank %d] test_coll_types FAIL (line %d): ", me, __LINE__); \
    fprintf(stderr, __VA_ARGS__);                                              \
    fprintf(stderr, " [last error: %s]\n", m_);                                \
    MPI_Abort(MPI_COMM_WORLD, 1);                                              \
  } while (0)
#define CALL(x)                                                                \
  do {                                                                         \
    int rc_ = (x);                                                             \
    if (rc_ != FH_OK) FAIL("%s returned %s", #x, fh_strerror(rc_));            \
  } while (0)

static uint64_t h(int r, size_t i, int salt) {
  uint64_t z = (uint64_t)r * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull + (uint64_t)salt * 77;
  z ^= z >> 31; z *= 0x94d049bb133111ebull; z ^= z >> 29;
  return z;
}

/* Element i of rank r's input, written at p (esz bytes). */
static void input(fh_dtype_t dt, fh_op_t op, int r, size_t i, void *p) {
  uint64_t v = h(r, i, dt * 16 + op);
  if (op == FH_LAND || op == FH_LOR) v = (v % 5 == 0) ? 0 : v; /* some false */
  switch (dt) {
  case FH_INT8: case FH_UINT8: memcpy(p, &v, 1); break;
  case FH_INT16: case FH_UINT16: memcpy(p, &v, 2); break;
  case FH_INT32: memcpy(p, &v, 4); break;
  case FH_INT64: memcpy(p, &v, 8); break;
  case FH_CFLOAT: { /* small integers (sum) or units 1, -1, i, -i (product): exact */
    static const float u[4][2] = {{1, 0}, {-1, 0}, {0, 1}, {0, -1}};
    float c[2] = {(float)(int)(v % 201) - 100, (float)(int)((v >> 8) % 201) - 100};
    if (op == FH_PROD) { c[0] = u[v % 4][0]; c[1] = u[v % 4][1]; }
    memcpy(p, c, 8);
    break;
  }
  default: {
    static const double u[4][2] = {{1, 0}, {-1, 0}, {0, 1}, {0, -1}};
    double c[2] = {(double)(int)(v % 20001) - 10000, (double)(int)((v >> 16) % 20001) - 10000};
    if (op == FH_PROD) { c[0] = u[v % 4][0]; c[1] = u[v % 4][1]; }
    memcpy(p, c, 16);
  }
  }
}

#define FOLD_INT(T)                                                            \
  do {                                                                         \
    T a, b;                                                                    \
    memcpy(&a, acc, sizeof a);                                                 \
    memcpy(&b, x, sizeof b);                                                   \
    T v = op == FH_SUM ? (T)(a + b) : op == FH_PROD ? (T)(a * b)               \
        : op == FH_MIN ? (a < b ? a : b) : op == FH_MAX ? (a > b ? a : b)      \
        : op == FH_BAND ? (T)(a & b) : op == FH_BOR ? (T)(a | b)               \
        : op == FH_BXOR ? (T)(a ^ b) : op == FH_LAND ? (T)(a && b) : (T)(a || b); \
    memcpy(acc, &v, sizeof v);                                                 \
  } while (0)

static void fold(fh_dtype_t dt, fh_op_t op, void *acc, const void *x) {
  switch (dt) {
  case FH_INT8: FOLD_INT(int8_t); break;
  case FH_UINT8: FOLD_INT(uint8_t); break;
  case FH_INT16: FOLD_INT(int16_t); break;
  case FH_UINT16: FOLD_INT(uint16_t); break;
  case FH_INT32: FOLD_INT(int32_t); break;
  case FH_INT64: FOLD_INT(int64_t); break;
  case FH_CFLOAT: {
    float complex a, b;
    memcpy(&a, acc, 8); memcpy(&b, x, 8);
    a = op == FH_SUM ? a + b : a * b;
    memcpy(acc, &a, 8);
    break;
  }
  default: {
    double complex a, b;
    memcpy(&a, acc, 16); memcpy(&b, x, 16);
    a = op == FH_SUM ? a + b : a * b;
    memcpy(acc, &a, 16);
  }
  }
}

static size_t esz(fh_dtype_t dt) {
  switch (dt) {
  case FH_INT8: case FH_UINT8: return 1;
  case FH_INT16: case FH_UINT16: return 2;
  case FH_INT32: return 4;
  case FH_INT64: case FH_CFLOAT: return 8;
  default: return 16;
  }
}

/* Equal results: bit for bit for integers; by value for complex parts (the tree may
 * combine in another grouping than this rank's sequential fold; with the exact
 * inputs used here only the sign of a zero can differ). */
static int same(fh_dtype_t dt, const unsigned char *a, const unsigned char *b, size_t n) {
  if (dt == FH_CFLOAT) {
    for (size_t i = 0; i < n / 4; i++) {
      float x, y;
      memcpy(&x, a + 4 * i, 4); memcpy(&y, b + 4 * i, 4);
      if (x != y) return 0;
    }
    return 1;
  }
  if (dt == FH_CDOUBLE) {
    for (size_t i = 0; i < n / 8; i++) {
      double x, y;
      memcpy(&x, a + 8 * i, 8); memcpy(&y, b + 8 * i, 8);
      if (x != y) return 0;
    }
    return 1;
  }
  return memcmp(a, b, n) == 0;
}

static void run(fh_ctx_t *ctx, fh_dtype_t dt, fh_op_t op, size_t count) {
  size_t e = esz(dt), n = count * e;
  unsigned char *in = malloc(n), *out = malloc(n + 16), *want = malloc(n), *x = malloc(e);
  if (!in || !out || !want || !x) FAIL("malloc");
  for (size_t i = 0; i < count; i++) {
    input(dt, op, me, i, in + i * e);
    input(dt, op, 0, i, want + i * e);
    for (int r = 1; r < np; r++) {
      input(dt, op, r, i, x);
      fold(dt, op, want + i * e, x);
    }
  }
  memset(out, 0xEE, n + 16);
  CALL(fh_allreduce(ctx, in, out, count, dt, op));
  if (!same(dt, out, want, n)) FAIL("fh_allreduce dt %d op %d count %zu: wrong result", dt, op, count);
  for (int k = 0; k < 16; k++)
    if (out[n + k] != 0xEE) FAIL("fh_allreduce wrote past the result");
  int root = (int)(count % (size_t)np);
  memset(out, 0xEE, n + 16);
  CALL(fh_reduce(ctx, root, in, out, count, dt, op));
  if (me == root && !same(dt, out, want, n))
    FAIL("fh_reduce dt %d op %d count %zu root %d: wrong result", dt, op, count, root);
  free(in); free(out); free(want); free(x);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  fh_ctx_t *ctx;
  CALL(fh_init(MPI_COMM_WORLD, NULL, &ctx));
  static const fh_dtype_t ints[] = {FH_INT8, FH_UINT8, FH_INT16, FH_UINT16};
  static const fh_op_t int_ops[] = {FH_SUM, FH_PROD, FH_MIN, FH_MAX, FH_BAND, FH_BOR, FH_BXOR, FH_LAND, FH_LOR};
  static const size_t counts[] = {1, 7, 1000, 70001};
  for (int t = 0; t < 4; t++)
    for (int o = 0; o < 9; o++)
      for (int c = 0; c < 4; c++) run(ctx, ints[t], int_ops[o], counts[c]);
  /* Logical operations on the wider integers too (Fortran logical kinds 4 and 8). */
  for (int c = 0; c < 4; c++) {
    run(ctx, FH_INT32, FH_LAND, counts[c]);
    run(ctx, FH_INT64, FH_LOR, counts[c]);
  }
  static const size_t ccounts[] = {1, 5, 5000, 9000};
  for (int c = 0; c < 4; c++) {
    run(ctx, FH_CFLOAT, FH_SUM, ccounts[c]);
    run(ctx, FH_CFLOAT, FH_PROD, ccounts[c]);
    run(ctx, FH_CDOUBLE, FH_SUM, ccounts[c]);
    run(ctx, FH_CDOUBLE, FH_PROD, ccounts[c]);
  }
  /* Operations a type does not define. */
  double d[4] = {0}, rd[4];
  int rc = fh_allreduce(ctx, d, rd, 2, FH_CDOUBLE, FH_MIN);
  if (rc != FH_ERR_INVALID_ARG) FAIL("FH_MIN on complex gave %s", fh_strerror(rc));
  rc = fh_allreduce(ctx, d, rd, 4, FH_DOUBLE, FH_LAND);
  if (rc != FH_ERR_INVALID_ARG) FAIL("FH_LAND on double gave %s", fh_strerror(rc));
  rc = fh_allreduce(ctx, d, rd, 2, FH_CFLOAT, FH_BXOR);
  if (rc != FH_ERR_INVALID_ARG) FAIL("FH_BXOR on complex gave %s", fh_strerror(rc));
  rc = fh_allreduce(ctx, d, rd, 2, FH_INT8, FH_LOR + 1);
  if (rc != FH_ERR_INVALID_ARG) FAIL("an unknown op gave %s", fh_strerror(rc));
  run(ctx, FH_INT16, FH_SUM, 3); /* and the next collective works */
  CALL(fh_finalize(ctx));
  if (me == 0) printf("test_coll_types: OK\n");
  MPI_Finalize();
  return 0;
}
