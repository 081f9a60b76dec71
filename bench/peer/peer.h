/* The peer comparison's common part: the operations both sides time, the same way.
 * Each operation: a warm-up, then REPS back-to-back calls (REPS_BCAST for the
 * broadcast) between two barriers; the time per call is PE/rank 0's loop time / the
 * count, and the program prints "<op> <microseconds>" lines (rank 0 only).
 * scripts/run-peer-bench.py runs the firehose and the OpenSHMEM programs interleaved
 * and compares the lines. */
#ifndef PEER_H
#define PEER_H
#include <stdio.h>
#include <time.h>

#define REPS 2000
/* For the broadcast, whose root runs at most 64 calls ahead of its slowest reader, so
 * that its loop time is the whole job's: 2000 calls took about a millisecond at 8
 * ranks on 2 cores, less than one scheduler time slice, and one preemption decided
 * the row. (Not for the put and the fetch-add: each rank's loop is its own, and a
 * loop longer than a slice measures how 8 busy ranks share 2 cores, not the call.) */
#define REPS_BCAST 20000
#define WARM 200

static inline double peer_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Time `reps` runs of `body` (after WARM untimed ones) between two `bar`s and print
 * the time per run on rank `me` 0. */
#define PEER_TIME_N(name, me, bar, reps, body)                                 \
  do {                                                                         \
    for (int i_ = 0; i_ < WARM; i_++) { body; }                               \
    bar;                                                                       \
    double t0_ = peer_now();                                                   \
    for (int i_ = 0; i_ < (reps); i_++) { body; }                             \
    double t_ = (peer_now() - t0_) / (reps);                                   \
    bar;                                                                       \
    if ((me) == 0) printf("%s %.3f\n", name, t_ * 1e6);                        \
  } while (0)
#define PEER_TIME(name, me, bar, body) PEER_TIME_N(name, me, bar, REPS, body)
#endif
