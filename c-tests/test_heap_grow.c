/* The heap grows as a stranger would find out: fh_malloc more than FH_HEAP_SIZE (one
 * block larger than the whole heap, then many that fill it several times over), and
 * every other rank reaches the new memory with puts, gets and atomics; on one node
 * the new segments are mapped by the node peers that use them; registering,
 * unregistering or invalidating segment memory is refused; blocks are freed and
 * reused; freeing an address inside a block is refused. Run with the default heap
 * and with FH_HEAP_SIZE=1M FH_SHM=0 (scripts/run-c-tests.sh). */
#include "common.h"

#define SMALL (256 * 1024)
#define NSMALL 24

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  struct fh_ctx_t *ctx = NULL;
  CHECK_OK(fh_init_world(NULL, &ctx));
  int me = fh_rank(ctx), np = fh_size(ctx);
  fh_test_rank = me;
  int right = (me + 1) % np;
  const char *hs = getenv("FH_HEAP_SIZE");
  size_t heap = hs && strchr(hs, 'M') ? (size_t)atoi(hs) << 20 : (size_t)32 << 20;
  size_t big_len = heap + heap / 2; /* more than the whole first region */
  unsigned char *big = fh_malloc(ctx, big_len);
  CHECK(big != NULL, "fh_malloc of %zu bytes with a %zu-byte heap", big_len, heap);
  CHECK((uintptr_t)big % 64 == 0, "64-byte aligned");
  unsigned char *small[NSMALL];
  for (int i = 0; i < NSMALL; i++) {
    small[i] = fh_malloc(ctx, SMALL);
    CHECK(small[i] != NULL, "small block %d", i);
    memset(small[i], 0, SMALL);
  }
  memset(big, 0, big_len);
  void **bigs = malloc(sizeof(void *) * (size_t)np), **smalls = malloc(sizeof(void *) * (size_t)np * NSMALL);
  CHECK_OK(fh_allgather(ctx, &big, sizeof big, bigs));
  CHECK_OK(fh_allgather(ctx, small, sizeof small, smalls));
  MPI_Barrier(MPI_COMM_WORLD);

  /* puts into the right neighbour's new memory: the start and the end of the big
   * block, and every small one */
  unsigned char *src = malloc(SMALL);
  memset(src, me + 1, SMALL);
  unsigned char *rb = bigs[right];
  CHECK_OK(fh_put(ctx, right, rb, src, 4096));
  CHECK_OK(fh_put(ctx, right, rb + big_len - 4096, src, 4096));
  for (int i = 0; i < NSMALL; i++)
    CHECK_OK(fh_put(ctx, right, (unsigned char *)smalls[(size_t)right * NSMALL + (size_t)i] + SMALL - 64, src, 64));
  MPI_Barrier(MPI_COMM_WORLD);
  int left = (me + np - 1) % np;
  CHECK(big[0] == left + 1 && big[4095] == left + 1 && big[big_len - 1] == left + 1, "puts into the grown heap");
  for (int i = 0; i < NSMALL; i++) CHECK(small[i][SMALL - 1] == left + 1, "put into small block %d", i);
  unsigned char back[64];
  CHECK_OK(fh_get(ctx, back, right, rb + big_len - 64, 64));
  CHECK(back[0] == me + 1, "get from the grown heap");

  /* A vectored put of three pieces inside the segment, and a vectored get of them
   * back (on one node: memory copies through the mapped segment). */
  unsigned char vsrc[96], vback[96];
  for (int i = 0; i < 96; i++) vsrc[i] = (unsigned char)(me * 7 + i);
  unsigned char *vd = rb + big_len / 2;
  fh_memvec_t dv[3] = {{vd, 32}, {vd + 4096, 32}, {vd + 8192, 32}};
  fh_memvec_t sv[1] = {{vsrc, 96}};
  CHECK_OK(fh_putv(ctx, right, 3, dv, 1, sv));
  fh_memvec_t bv[2] = {{vback, 50}, {vback + 50, 46}};
  CHECK_OK(fh_getv(ctx, 2, bv, right, 3, dv));
  CHECK(memcmp(vsrc, vback, 96) == 0, "vectored put and get in the grown heap");

  /* Where the node shares heaps and the kernel lets node peers reach each other (the
   * kernel copy is on, or FH_CMA=0 says the segments are still mapped), the new
   * segments are shared too: the right neighbour's segments we just used are
   * mapped here (fh_config_print says how many). */
  int rc = 0;
  char *cfg = fh_test_config_text(ctx, &rc);
  CHECK_OK(rc);
  const char *shm = getenv("FH_SHM"), *max_s = getenv("FH_SHM_MAX_RANKS");
  int max = max_s ? atoi(max_s) : 0; /* node mappings of at most `max` consecutive ranks */
  int same_mapping = max <= 0 || me / max == right / max;
  int shared_node = np > 1 && !(shm && strcmp(shm, "0") == 0) &&
                    (strstr(cfg, "kernel single copy to node peers: on") != NULL ||
                     strstr(cfg, "node peers still map each other's heap segments") != NULL);
  const char *line = strstr(cfg, "heap segments shared with node peers: ");
  CHECK(line != NULL, "fh_config_print has no heap segments line:\n%s", cfg);
  int ours = -1, theirs = -1;
  if (sscanf(line, "heap segments shared with node peers: on (%d of ours, %d of theirs", &ours, &theirs) == 2) {
    CHECK(shared_node, "segments shared without a shared node: %.120s", line);
    CHECK(ours >= 1 && (theirs >= 1 || !same_mapping), "the grown heap is not shared with node peers: %.120s", line);
  } else {
    CHECK(!shared_node, "segments not shared on a shared node: %.120s", line);
  }
  free(cfg);

  /* atomics on a word of rank 0's big block, from every rank */
  uint64_t *w = (uint64_t *)((unsigned char *)bigs[0] + heap);
  for (int k = 0; k < 100; k++) CHECK_OK(fh_atomic_add_u64(ctx, 0, w, 1));
  CHECK_OK(fh_barrier(ctx));
  uint64_t total = 0;
  CHECK_OK(fh_atomic_fetch_u64(ctx, 0, w, &total));
  CHECK(total == 100u * (uint64_t)np, "atomics on a grown heap word: %llu", (unsigned long long)total);
  CHECK_OK(fh_barrier(ctx));

  /* Segment memory stays registered, as the first region does: registering,
   * unregistering or invalidating it is refused, and it still works afterwards. */
  char msg[256];
  CHECK(fh_mem_register(ctx, big + heap, 4096) == FH_ERR_INVALID_ARG, "fh_mem_register on a segment");
  fh_last_error(msg, sizeof msg);
  CHECK(strstr(msg, "library heap") != NULL, "the refusal names the heap: %s", msg);
  CHECK(fh_mem_unregister(ctx, big, big_len) == FH_ERR_INVALID_ARG, "fh_mem_unregister on a segment");
  CHECK(fh_mem_invalidate(ctx, big + 64, 64) == FH_ERR_INVALID_ARG, "fh_mem_invalidate on a segment");
  /* The first region the same way (fh_mem_invalidate of it said FH_OK). */
  CHECK(fh_mem_invalidate(ctx, small[0], SMALL) == FH_ERR_INVALID_ARG, "fh_mem_invalidate on the first region");
  CHECK(fh_mem_unregister(ctx, small[0], SMALL) == FH_ERR_INVALID_ARG, "fh_mem_unregister on the first region");
  CHECK(fh_mem_register(ctx, small[0], SMALL) == FH_ERR_INVALID_ARG, "fh_mem_register on the first region");
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK_OK(fh_put(ctx, right, rb + 64, src, 64));
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(big[64] == left + 1, "a segment still takes puts after the refusals");

  /* A segment whose registration fails is not handed out, and not listed for the
   * node peers either: fill this rank's registrations, then ask for more than any
   * segment holds. */
  int ours_before = -1, ours_after = -2, dummy;
  cfg = fh_test_config_text(ctx, &rc);
  line = strstr(cfg, "heap segments shared with node peers: on (");
  if (line) sscanf(line, "heap segments shared with node peers: on (%d of ours, %d", &ours_before, &dummy);
  free(cfg);
  enum { MAXREG = 256 };
  void *regs[MAXREG];
  int nreg = 0;
  for (; nreg < MAXREG; nreg++) {
    regs[nreg] = aligned_alloc(4096, 4096);
    if (fh_mem_register(ctx, regs[nreg], 4096) != FH_OK) {
      free(regs[nreg]);
      break;
    }
  }
  CHECK(nreg < MAXREG, "registrations have a limit (got %d)", nreg);
  CHECK(fh_malloc(ctx, 2 * big_len) == NULL, "a segment that cannot be registered is not handed out");
  fh_last_error(msg, sizeof msg);
  CHECK(strstr(msg, "growing the heap failed") != NULL, "the error says why: %s", msg);
  cfg = fh_test_config_text(ctx, &rc);
  line = strstr(cfg, "heap segments shared with node peers: on (");
  if (line) sscanf(line, "heap segments shared with node peers: on (%d of ours, %d", &ours_after, &dummy);
  CHECK(!line || ours_after == ours_before, "an unregistered segment was listed: %d -> %d", ours_before, ours_after);
  free(cfg);
  for (int i = 0; i < nreg; i++) {
    CHECK_OK(fh_mem_unregister(ctx, regs[i], 4096));
    free(regs[i]);
  }
  CHECK_OK(fh_barrier(ctx));

  /* free and reuse; a pointer into a block is refused */
  fh_free(ctx, small[3] + 64);
  char why[256];
  fh_last_error(why, sizeof why);
  CHECK(strstr(why, "not a live") != NULL, "freeing an inner address is refused: %s", why);
  for (int i = 0; i < NSMALL; i += 2) fh_free(ctx, small[i]);
  for (int i = 0; i < NSMALL; i += 2) {
    small[i] = fh_malloc(ctx, SMALL);
    CHECK(small[i] != NULL, "reallocation %d", i);
  }
  for (int i = 0; i < NSMALL; i++) fh_free(ctx, small[i]);
  fh_free(ctx, big);
  unsigned char *again = fh_malloc(ctx, big_len);
  CHECK(again != NULL, "the big block again");
  fh_free(ctx, again);
  CHECK_OK(fh_barrier(ctx));
  CHECK_OK(fh_finalize(ctx));
  if (me == 0) printf("test_heap_grow: %d ranks passed (heap %zu bytes, block %zu)\n", np, heap, big_len);
  free(src); free(bigs); free(smalls);
  MPI_Finalize();
  return 0;
}
