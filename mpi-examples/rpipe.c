/* rpipe.c -- seed 003's "rpipe programming" listing, on firehose.
 *
 * Ranks pair up (0-1, 2-3, ...). In each pair the even rank writes and the odd rank
 * reads, over a half-duplex pipe whose heap lives on the reader:
 *
 *   writer: addr = rmalloc(pipe, sizeof(int)); ptr = rmem(pipe, addr);
 *           *ptr = SEND_VAL; rwrite(pipe, addr);
 *   reader: rread(pipe, &addr, &len); ptr = rmem(pipe, addr); use *ptr; rfree(addr);
 *
 * No receive is posted and no tag is matched: the int travels by one-sided RDMA
 * into the reader's heap, and the reader learns of it by polling its own memory.
 * Then the same pair sends a burst of messages of growing size (0 B .. 4 KiB) and
 * the reader checks every byte and the order. Run: mpirun -np 2 ./rpipe */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "example.h" /* CHECK, example_init, example_finalize */

#define PIPE_WIDTH (64 * 1024)
#define SEND_VAL 42
#define BURST 1000

int main(int argc, char **argv) {
  int rank, size;
  fh_ctx_t *ctx = example_init(&argc, &argv, &rank, &size);
  int iswriter = rank % 2 == 0;
  int peer = iswriter ? rank + 1 : rank - 1;
  if (peer >= size) { /* odd rank count: the last rank sits out */
    example_finalize(ctx);
    return 0;
  }

  /* create a half-duplex RMA pipe */
  rpipe_t *rp;
  CHECK(rpipe_open(ctx, peer, iswriter ? RPIPE_WRITER : RPIPE_READER, PIPE_WIDTH,
                   RPIPE_HALF_DUPLEX, RPIPE_NEXT_FIT, &rp));
  rpipe_addr_t addr;
  int *ptr;
  if (iswriter) {
    CHECK(rpipe_rmalloc(rp, sizeof(int), &addr)); /* remote allocate */
    ptr = rpipe_rmem(rp, addr);
    *ptr = SEND_VAL;
    CHECK(rpipe_rwrite(rp, addr));                 /* rpipe op */
  } else {
    size_t len;
    CHECK(rpipe_rread(rp, &addr, &len));
    ptr = rpipe_rmem(rp, addr);
    if (len != sizeof(int) || *ptr != SEND_VAL) {
      fprintf(stderr, "rank %d: got %zu bytes, value %d\n", rank, len, *ptr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    printf("rank %d: read %d from rank %d without posting a receive\n", rank, *ptr, peer);
    CHECK(rpipe_rfree(rp, addr));                  /* free remote memory: release at once */
  }

  /* A burst: message i has i*4 % 4097 bytes, every byte (i + k) & 0xff. */
  for (int i = 0; i < BURST; i++) {
    size_t n = (size_t)i * 4 % 4097;
    if (iswriter) {
      CHECK(rpipe_rmalloc(rp, n, &addr));
      unsigned char *p = rpipe_rmem(rp, addr);
      for (size_t k = 0; k < n; k++) p[k] = (unsigned char)(i + k);
      CHECK(rpipe_rwrite(rp, addr));
    } else {
      size_t len;
      CHECK(rpipe_rread(rp, &addr, &len));
      unsigned char *p = rpipe_rmem(rp, addr);
      if (len != n) {
        fprintf(stderr, "rank %d: message %d has %zu bytes, expected %zu\n", rank, i, len, n);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      for (size_t k = 0; k < n; k++)
        if (p[k] != (unsigned char)(i + k)) {
          fprintf(stderr, "rank %d: message %d byte %zu wrong\n", rank, i, k);
          MPI_Abort(MPI_COMM_WORLD, 1);
        }
      CHECK(rpipe_rfree(rp, addr));
    }
  }
  rpipe_stats_t st;
  CHECK(rpipe_stats(rp, &st));
  if (iswriter)
    printf("rank %d: wrote %llu messages (%llu bytes); heap full %llu times, %llu free syncs\n",
           rank, (unsigned long long)st.messages_written, (unsigned long long)st.bytes_written,
           (unsigned long long)st.rmalloc_waits, (unsigned long long)st.free_syncs);
  else
    printf("rank %d: read %llu messages in order, every byte checked\n", rank,
           (unsigned long long)st.messages_read);
  CHECK(rpipe_close(rp));
  example_finalize(ctx);
  return 0;
}
