/* The peer comparison's common part: the operations both sides time, the same way.
 * Each operation: a warm-up, then REPS back-to-back calls between two barriers; the
 * time per call is PE/rank 0's loop time / REPS, and the program prints
 * "<op> <microseconds>" lines (rank 0 only). scripts/run-peer-bench.py runs the
 * firehose and the OpenSHMEM programs interleaved and compares the lines. */
#ifndef PEER_H
#define PEER_H
#include <stdio.h>
#include <time.h>

#define REPS 2000
#define WARM 200

static inline double peer_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Time REPS runs of `body` (after WARM untimed ones) between two `bar`s and print
 * the time per run on rank `me` 0. */
#define PEER_TIME(name, me, bar, body)                                         \
  do {                                                                         \
    for (int i_ = 0; i_ < WARM; i_++) { body; }                               \
    bar;                                                                       \
    double t0_ = peer_now();                                                   \
    for (int i_ = 0; i_ < REPS; i_++) { body; }                               \
    double t_ = (peer_now() - t0_) / REPS;                                     \
    bar;                                                                       \
    if ((me) == 0) printf("%s %.3f\n", name, t_ * 1e6);                        \
  } while (0)
#endif
