/* Built with Open MPI's mpicc but linked against a libfirehose built for MPICH:
 * fh_init must fail with FH_ERR_MPI and a message naming both MPIs, not crash. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include "firehose.h"

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  fh_ctx_t *ctx = NULL;
  int rc = fh_init(MPI_COMM_WORLD, NULL, &ctx);
  char msg[1024];
  fh_last_error(msg, sizeof msg);
  int ok = rc == FH_ERR_MPI && strstr(msg, "mpich") && strstr(msg, "openmpi") && ctx == NULL;
  printf("fh_init returned %d (%s)\n  message: %s\n%s mismatch\n", rc, fh_strerror(rc), msg,
         ok ? "PASS" : "FAIL");
  MPI_Finalize();
  return ok ? 0 : 1;
}
