/* dlopen_consumer.c -- an MPI program that does not link libfirehose: it loads the
 * library given as argv[1] with dlopen() after MPI_Init, resolves the functions it
 * needs with dlsym(), and runs a ring put/get and one active-message round trip.
 * (How a plugin-based runtime or a language binding would use firehose.)
 *
 * Only the header's types and constants are used; every call goes through a
 * function pointer. Prints "PASS dlopen" on rank 0; any failure aborts the job. */
#include <mpi.h>
#define FH_NO_MPI_INLINE 1 /* no fh_init inline: it would call library symbols */
#include "firehose.h"
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*fh_init_comm_f_fn)(int comm_f, const fh_config_t *cfg, fh_ctx_t **ctx_out);
typedef int (*fh_rank_fn)(const fh_ctx_t *ctx);
typedef int (*fh_size_fn)(const fh_ctx_t *ctx);
typedef void *(*fh_malloc_fn)(fh_ctx_t *ctx, size_t nbytes);
typedef int (*fh_put_fn)(fh_ctx_t *ctx, int rank, void *dst, const void *src, size_t nbytes);
typedef int (*fh_get_fn)(fh_ctx_t *ctx, void *dst, int rank, const void *src, size_t nbytes);
typedef int (*fh_am_register_fn)(fh_ctx_t *ctx, unsigned index, fh_am_handler_t fn, void *user);
typedef int (*fh_am_request_short_fn)(fh_ctx_t *ctx, int rank, unsigned index, const uint64_t *args, size_t nargs);
typedef int (*fh_am_reply_short_fn)(fh_token_t *tok, unsigned index, const uint64_t *args, size_t nargs);
typedef int (*fh_poll_fn)(fh_ctx_t *ctx);
typedef const char *(*fh_strerror_fn)(int status);
typedef int (*fh_finalize_fn)(fh_ctx_t *ctx);
typedef unsigned (*fh_version_fn)(void);

static struct {
  fh_init_comm_f_fn init_comm_f;
  fh_rank_fn rank;
  fh_size_fn size;
  fh_malloc_fn malloc_;
  fh_put_fn put;
  fh_get_fn get;
  fh_am_register_fn am_register;
  fh_am_request_short_fn am_request_short;
  fh_am_reply_short_fn am_reply_short;
  fh_poll_fn poll;
  fh_strerror_fn strerror_;
  fh_finalize_fn finalize;
  fh_version_fn version;
} fh;

static int me = -1;

#define FAIL(...)                                                              \
  do {                                                                         \
    fprintf(stderr, "[rank %d] dlopen_consumer FAIL (line %d): ", me, __LINE__); \
    fprintf(stderr, __VA_ARGS__);                                              \
    fprintf(stderr, "\n");                                                     \
    fflush(stderr);                                                            \
    MPI_Abort(MPI_COMM_WORLD, 1);                                              \
  } while (0)

#define CALL(call)                                                             \
  do {                                                                         \
    int rc_ = (call);                                                          \
    if (rc_ != FH_OK) FAIL("%s returned %d (%s)", #call, rc_, fh.strerror_(rc_)); \
  } while (0)

/* dlsym returns an object pointer; converting it to a function pointer is what
 * POSIX guarantees to work. The memcpy keeps the conversion explicit. */
static void resolve(void *lib, const char *name, void *slot, size_t slot_size) {
  dlerror();
  void *p = dlsym(lib, name);
  const char *err = dlerror();
  if (p == NULL || err != NULL) FAIL("dlsym(%s): %s", name, err ? err : "NULL");
  if (slot_size != sizeof p) FAIL("function pointer size mismatch for %s", name);
  memcpy(slot, &p, sizeof p);
}
#define RESOLVE(lib, field, name) resolve(lib, name, &fh.field, sizeof fh.field)

enum { H_REQ = 200, H_REP = 201 };
static volatile int reqs_handled, replies;
static volatile uint64_t reply_val;

static void on_req(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  (void)buf; (void)nbytes;
  uint64_t answer = nargs == 1 ? args[0] * 3 + (uint64_t)(uintptr_t)user : 0;
  reqs_handled++;
  int rc = fh.am_reply_short(tok, H_REP, &answer, 1);
  if (rc != FH_OK) FAIL("fh_am_reply_short returned %d", rc);
}
static void on_rep(fh_token_t *tok, void *buf, size_t nbytes, const uint64_t *args, size_t nargs, void *user) {
  (void)tok; (void)buf; (void)nbytes; (void)user;
  reply_val = nargs == 1 ? args[0] : 0;
  replies++;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  int n;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (argc < 2) FAIL("usage: %s /path/to/libfirehose.so", argv[0]);

  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) FAIL("dlopen(%s): %s", argv[1], dlerror());
  RESOLVE(lib, init_comm_f, "fh_init_comm_f");
  RESOLVE(lib, rank, "fh_rank");
  RESOLVE(lib, size, "fh_size");
  RESOLVE(lib, malloc_, "fh_malloc");
  RESOLVE(lib, put, "fh_put");
  RESOLVE(lib, get, "fh_get");
  RESOLVE(lib, am_register, "fh_am_register");
  RESOLVE(lib, am_request_short, "fh_am_request_short");
  RESOLVE(lib, am_reply_short, "fh_am_reply_short");
  RESOLVE(lib, poll, "fh_poll");
  RESOLVE(lib, strerror_, "fh_strerror");
  RESOLVE(lib, finalize, "fh_finalize");
  RESOLVE(lib, version, "fh_version");

  unsigned v = fh.version();
  if (v >> 16 != FH_VERSION_MAJOR)
    FAIL("library version %u.%u.%u does not match header major %d", v >> 16, (v >> 8) & 0xff, v & 0xff,
         FH_VERSION_MAJOR);
  const char *s = fh.strerror_(FH_ERR_ACCESS);
  if (!s || !strstr(s, "ACCESS")) FAIL("fh_strerror(FH_ERR_ACCESS) = \"%s\"", s ? s : "(null)");

  fh_ctx_t *ctx = NULL;
  CALL(fh.init_comm_f((int)MPI_Comm_c2f(MPI_COMM_WORLD), NULL, &ctx));
  if (fh.rank(ctx) != me || fh.size(ctx) != n) FAIL("fh_rank/fh_size %d/%d, MPI says %d/%d", fh.rank(ctx), fh.size(ctx), me, n);
  int right = (me + 1) % n, left = (me + n - 1) % n;

  /* Ring put into the right neighbour's fh_malloc memory, then get it back. */
  enum { WORDS = 512 };
  uint64_t *heap = fh.malloc_(ctx, WORDS * sizeof(uint64_t));
  if (!heap) FAIL("fh_malloc returned NULL");
  memset(heap, 0, WORDS * sizeof(uint64_t));
  uint64_t mine = (uint64_t)(uintptr_t)heap, *all = malloc(sizeof(uint64_t) * (size_t)n);
  MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
  uint64_t src[WORDS], back[WORDS];
  for (int i = 0; i < WORDS; i++) src[i] = ((uint64_t)me << 32) | (uint64_t)(i * 7 + 1);
  CALL(fh.put(ctx, right, (void *)(uintptr_t)all[right], src, sizeof src));
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < WORDS; i++)
    if (heap[i] != (((uint64_t)left << 32) | (uint64_t)(i * 7 + 1))) FAIL("word %d from rank %d is %#llx", i, left,
                                                                       (unsigned long long)heap[i]);
  memset(back, 0, sizeof back);
  CALL(fh.get(ctx, back, right, (void *)(uintptr_t)all[right], sizeof back));
  if (memcmp(back, src, sizeof src) != 0) FAIL("fh_get returned other data than was put");

  /* One AM round trip to the right neighbour. */
  CALL(fh.am_register(ctx, H_REQ, on_req, (void *)(uintptr_t)5));
  CALL(fh.am_register(ctx, H_REP, on_rep, NULL));
  MPI_Barrier(MPI_COMM_WORLD); /* handlers registered everywhere before anyone sends */
  uint64_t arg = 1000 + (uint64_t)me;
  CALL(fh.am_request_short(ctx, right, H_REQ, &arg, 1));
  while (replies < 1 || reqs_handled < 1) CALL(fh.poll(ctx));
  if (reply_val != arg * 3 + 5) FAIL("AM reply carried %llu, expected %llu", (unsigned long long)reply_val,
                                     (unsigned long long)(arg * 3 + 5));

  CALL(fh.finalize(ctx));
  free(all);
  if (dlclose(lib) != 0) FAIL("dlclose: %s", dlerror());
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 0) printf("PASS dlopen (%d ranks, firehose %u.%u.%u loaded from %s)\n", n, v >> 16, (v >> 8) & 0xff,
                      v & 0xff, argv[1]);
  MPI_Finalize();
  return 0;
}
