#!/usr/bin/env bash
# Run every C test binary in $1 under $MPIEXEC at each rank count of $NPS.
# A test binary exits 0 on success. Prints a closing "N passed, N failed" line.
set -u
dir=$1
pass=0; fail=0; failed=()
for t in "$dir"/*; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  nps=$NPS
  # These also run on a single rank (every access is to self).
  case " ${NP1_TESTS:-test_ring test_am test_am_long} " in *" $name "*) nps="1 $NPS" ;; esac
  for np in $nps; do
    # Tests that need a fixed rank count say so in their name: *_np2 runs at 2 only.
    case "$name" in *_np2) [ "$np" = 2 ] || continue ;; esac
    start=$(date +%s)
    if out=$(timeout 180 $MPIEXEC -np "$np" "$t" 2>&1); then
      pass=$((pass+1)); printf 'ok   %-28s np=%s (%ss)\n' "$name" "$np" "$(( $(date +%s) - start ))"
    else
      fail=$((fail+1)); failed+=("$name np=$np")
      printf 'FAIL %-28s np=%s\n' "$name" "$np"; echo "$out" | tail -30 | sed 's/^/     | /'
    fi
  done
done

# Runs with settings from the environment (skipped when the binary is missing or
# the rank count exceeds the largest of $NPS, so MPICH runs the 2-rank ones only).
# extra NAME NP MEMLOCK VAR=VALUE...   MEMLOCK: ulimit -l in KiB, or - to keep it.
# Open MPI gets each VAR with -x as well (needed on remote nodes; MPICH's launcher
# passes the whole environment).
extra() {
  local name=$1 np=$2 memlock=$3; shift 3
  local t="$dir/$name" v xs=()
  [ -x "$t" ] || return 0
  local max=0 x
  for x in $NPS; do [ "$x" -gt "$max" ] && max=$x; done
  [ "$np" -le "$max" ] || return 0
  [ "${MPI:-}" = mpich ] || for v in "$@"; do xs+=(-x "${v%%=*}"); done
  local label="$name np=$np $*"
  [ "$memlock" = - ] || label="$label ulimit -l $memlock"
  local start; start=$(date +%s)
  if out=$( { [ "$memlock" = - ] || ulimit -l "$memlock"; } &&
            env "$@" timeout 180 $MPIEXEC "${xs[@]}" -np "$np" "$t" 2>&1 ); then
    pass=$((pass+1)); printf 'ok   %s (%ss)\n' "$label" "$(( $(date +%s) - start ))"
  else
    fail=$((fail+1)); failed+=("$label")
    printf 'FAIL %s\n' "$label"; echo "$out" | tail -30 | sed 's/^/     | /'
  fi
}
# A run that must end with a given exit status: expect_exit NAME NP STATUS ARGS...
expect_exit() {
  local name=$1 np=$2 want=$3; shift 3
  local t="$dir/$name" rc
  [ -x "$t" ] || return 0
  out=$(timeout 180 $MPIEXEC -np "$np" "$t" "$@" 2>&1); rc=$?
  if [ "$rc" = "$want" ]; then
    pass=$((pass+1)); printf 'ok   %s np=%s %s (exit %s)\n' "$name" "$np" "$*" "$rc"
  else
    fail=$((fail+1)); failed+=("$name np=$np $*")
    printf 'FAIL %s np=%s %s: exit %s, wanted %s\n' "$name" "$np" "$*" "$rc" "$want"
    echo "$out" | tail -30 | sed 's/^/     | /'
  fi
}
# The heap grows past a small FH_HEAP_SIZE into registered segments; with the node
# cut into mappings of 2 ranks, only peers of one mapping map each other's segments.
extra test_heap_grow 4 - FH_HEAP_SIZE=4M FH_SHM=0
extra test_heap_grow 2 - FH_HEAP_SIZE=4M
extra test_heap_grow 4 - FH_SHM_MAX_RANKS=2
# Local addresses of peers' heap blocks and segments: none without the node mapping,
# some with the node cut in two (fh_put for the others), segments of a small heap.
extra test_local_addr 4 - FH_SHM=0
extra test_local_addr 8 - FH_SHM_MAX_RANKS=2
extra test_local_addr 4 - FH_HEAP_SIZE=4M
# Without the kernel copy (FH_CMA=0) node peers still map each other's heap segments.
extra test_local_addr 8 - FH_CMA=0
extra test_local_addr 8 - FH_SHM_MAX_RANKS=2 FH_CMA=0
extra test_heap_grow 4 - FH_CMA=0
# Misuse and refused accesses through the off-node path: a non-blocking access to a
# peer's unmapped page is refused by its completion there, by the call on the node.
extra test_errors 4 - FH_SHM=0
# Notify counters and word locks through MPI RMA (the off-node path).
extra test_signal 4 - FH_SHM=0
# Barriers and small collectives under skew at every rank count from 2 to 8 (2, 4
# and 8 come from the loop above), without node-shared heaps, and with the machine
# cut into several "nodes" (the node barrier's leaders then meet through MPI).
for n in 3 5 6 7; do extra test_node_sync "$n" -; done
extra test_node_sync 8 - FH_SHM=0
extra test_node_sync 8 - FH_SHM_MAX_RANKS=3
extra test_node_sync 5 - FH_SHM_MAX_RANKS=2
extra test_barrier 8 - FH_SHM_MAX_RANKS=3
extra test_coll_mismatch 8 - FH_SHM_MAX_RANKS=3
# The wait policy's sleep stage at 4x oversubscription (lock FIFO order included).
for t in test_lock test_barrier test_node_sync test_signal test_rpipe test_bcast_burst; do extra "$t" 8 - FH_WAIT_SLEEP=1; done
# Bursts of broadcasts whose roots run ahead through the node slots, and the tree.
extra test_bcast_burst 8 - FH_SHM=0
extra test_bcast_burst 5 - FH_SHM_MAX_RANKS=2
extra test_word_lock 4 - FH_SHM=0
# AMs: the flood with back-pressure through MPI only, with the node cut in two
# (ring to half the peers, MPI to the others), and without the kernel copy (longs from
# malloc'd memory then go through MPI); the AM suites through MPI only.
extra test_am_flood 8 - FH_SHM=0
extra test_am_flood 8 - FH_SHM_MAX_RANKS=4
extra test_am_flood 4 - FH_CMA=0
extra test_am 4 - FH_SHM=0
extra test_am_long 4 - FH_SHM=0
extra interop_am_storm 8 - FH_SHM=0
extra interop_pending 8 - FH_SHM=0
# fh_abort ends every rank (the others wait in a barrier) with the given status.
expect_exit test_split 2 7 abort
expect_exit test_split 4 7 abort
# Small M (64 KiB regions: M is 4 regions, MAXVICTIM 1): the working set, 4x
# limit_bytes, forces misses and evictions.
SMALL=(FH_FIREHOSE_M=256K FH_FIREHOSE_MAXVICTIM_M=64K FH_FIREHOSE_MAXREGION_SIZE=64K)
for np in 2 4 8; do extra test_firehose "$np" - "${SMALL[@]}"; done
extra test_firehose 4 - FH_FIREHOSE_MODE=page FH_FIREHOSE_M=256K FH_FIREHOSE_MAXVICTIM_M=64K
extra test_fh_access 2 - FH_FIREHOSE_MODE=page
# Each registration strategy; the keeping ones get an M the working set fits in.
extra test_firehose 2 - FH_REGISTRATION=firehose "${SMALL[@]}"
extra test_firehose 2 - FH_REGISTRATION=rendezvous-unpin "${SMALL[@]}"
extra test_firehose 2 - FH_REGISTRATION=rendezvous-keep FH_FIREHOSE_M=16M FH_TEST_WS=1M
extra test_firehose 2 - FH_REGISTRATION=pin-everything FH_FIREHOSE_M=16M FH_TEST_WS=1M
# Without node-shared heaps every heap access goes through MPI RMA (the path ranks on
# different nodes take).
extra test_rpipe 2 - FH_SHM=0
# An odd count leaves one rank out of the pair phases (all-to-all still has it).
extra test_rpipe 3 -
extra test_thread_level 4 - FH_SHM=0
extra test_rpipe_close_order 8 - FH_SHM=0
extra test_rpipe_ring 8 - FH_SHM=0
extra test_rpipe_inline 4 - FH_SHM=0
extra test_ring 4 - FH_SHM=0
extra test_firehose 2 - FH_SHM=0 "${SMALL[@]}"
# Atomics and locks: every operation an MPI compare-and-swap (the mixed-operation
# atomicity path), and with the progress thread.
for np in 2 4; do
  extra test_atomic "$np" - FH_SHM=0
  extra test_lock "$np" - FH_SHM=0
done
extra test_atomic 4 - FH_PROGRESS=thread
extra test_lock 4 - FH_PROGRESS=thread
# Keeping strategies with a small M run out with FH_ERR_NO_RESOURCE, cleanly.
extra test_fh_limits_np2 2 - FH_REGISTRATION=pin-everything "${SMALL[@]}"
extra test_fh_limits_np2 2 - FH_REGISTRATION=rendezvous-keep "${SMALL[@]}"
# A tiny RLIMIT_MEMLOCK with the library's defaults.
extra test_firehose 2 64
# Firehose-SMP: 4 threads per rank share one context (the main loop runs the
# defaults). Page mode with a small f (f = M / 4 KiB / (P-1) = 8 at 2 ranks, 4 at 4:
# one 32 KiB access needs 8 pages), then a 4-page local share (MAXVICTIM) that the
# threads' fh_local_pin calls fight over.
extra test_fh_threads 2 - FH_FIREHOSE_MODE=page FH_FIREHOSE_M=32K
extra test_fh_threads 4 - FH_FIREHOSE_MODE=page FH_FIREHOSE_M=48K
extra test_fh_threads 2 - FH_FIREHOSE_MODE=page FH_FIREHOSE_M=32K FH_FIREHOSE_MAXVICTIM_M=16K
extra test_fh_threads 4 - FH_FIREHOSE_MODE=page FH_FIREHOSE_M=48K FH_FIREHOSE_MAXVICTIM_M=16K
# Barriers with the other algorithms (and with atomics through MPI RMA, and with the
# progress thread advancing barriers concurrently); collectives on the binomial tree
# and through MPI RMA.
extra test_barrier 4 - FH_BARRIER=tree
extra test_barrier 8 - FH_BARRIER=tree
extra test_barrier 4 - FH_BARRIER=mpi
extra test_barrier 4 - FH_SHM=0
extra test_barrier 4 - FH_PROGRESS=thread
extra test_coll 4 - FH_BCAST_LAMBDA=1
extra test_coll 4 - FH_SHM=0
# Rank counts that are not powers of two ($NPS is 2 4 8).
extra test_coll 3 -
extra test_coll_types 3 -
extra test_coll_types 4 - FH_SHM=0
# Allreduce by recursive doubling across "nodes" (extras at 5, 6 and 7 ranks): the
# same bits as the tree (test_coll's determinism phase), user operations in rank
# order, and counts on both sides of a chunk that differ between ranks.
extra test_coll 8 - FH_SHM_MAX_RANKS=3
extra test_coll 5 - FH_SHM=0
extra test_coll_user 7 - FH_SHM_MAX_RANKS=2
extra test_coll_user 6 - FH_SHM=0
extra test_coll_mismatch 5 - FH_SHM=0
# Large reductions: staging windows (default), trees (FH_SHM=0), and trees because
# a 4 MiB heap has no room for the staging region.
extra test_coll_big 3 -
extra test_coll_big 4 - FH_SHM=0
extra test_coll_big 4 - FH_HEAP_SIZE=4M
# Non-contiguous RMA: 3 ranks, every access through MPI and firehose (FH_SHM=0), and
# firehose under pressure (tiny M: the sections' runs are pinned a few at a time).
extra test_vis 3 -
for np in 2 4 8; do extra test_vis "$np" - FH_SHM=0; done
extra test_vis 4 - FH_SHM=0 FH_FIREHOSE_MODE=page FH_FIREHOSE_M=64K FH_FIREHOSE_MAXVICTIM_M=16K
# Value forms, memset, access regions, handler-safe locks: through MPI and firehose,
# and with handlers on the progress thread.
extra test_extended 3 -
extra test_extended 4 - FH_SHM=0
extra test_extended 4 - FH_PROGRESS=thread
# The pack algorithm, forced and chosen by auto on the off-node path (no node
# mapping, no kernel copy), with the progress thread serving the targets.
extra test_vis 4 - FH_VIS_ALGORITHM=pack
extra test_vis 8 - FH_SHM=0 FH_CMA=0
extra test_vis 4 - FH_VIS_ALGORITHM=pack FH_SHM=0 FH_PROGRESS=thread
extra test_extended 4 - FH_VIS_ALGORITHM=pack FH_SHM=0
# The datatype algorithm (one MPI put/get with hindexed types) into the heap and
# registered memory on the MPI path; and auto never packing (datatype or direct).
extra test_vis 2 - FH_VIS_ALGORITHM=datatype FH_SHM=0 FH_CMA=0
extra test_vis 4 - FH_VIS_ALGORITHM=datatype FH_SHM=0
extra test_vis 4 - FH_SHM=0 FH_CMA=0 FH_VIS_PACK_MAX=0
# A wait in one context serves the others (through MPI: FH_SHM=0).
extra test_contexts 2 - FH_SHM=0
extra test_contexts 4 - FH_SHM=0
extra test_coll 5 -
extra test_barrier 3 -
extra test_barrier 5 -
extra test_barrier 6 - FH_BARRIER=tree

# Interoperability (issue 13). The plain-MPI programs on the off-node path (firehose
# moves served inside MPI_Barrier & co.); hostile targets and memory churn with
# firehose and with it reached through MPI RMA only (FH_CMA=0: no kernel copy, where
# the churn test skips what Open MPI cannot survive; README).
for t in interop_phases interop_am_storm interop_compute interop_rpipe_lock interop_waits; do
  extra "$t" 4 - FH_SHM=0
done
for np in 2 8; do extra test_hostile "$np" - FH_SHM=0; done
extra test_hostile 4 - FH_SHM=0 FH_CMA=0
extra test_churn 2 - FH_SHM=0
extra test_churn 8 - FH_SHM=0
extra test_churn 2 - FH_SHM=0 FH_CMA=0
extra test_churn 8 - FH_SHM=0 FH_CMA=0
# Node peers whose malloc memory firehose pins (FH_CMA=0): the owner's invalidations
# while its peer keeps accessing (each used to wait for the peer's whole loop).
extra test_churn 8 - FH_CMA=0
# Puts never waited for, still waiting for their firehose moves when the program
# calls fh_finalize (a put was lost 3 times in 10 launches before it waited for them).
for np in 2 8; do extra test_finalize_nbi "$np" - FH_CMA=0; done
extra test_finalize_nbi 4 - FH_SHM=0 FH_CMA=0
# AMs and their replies in flight at fh_finalize: off the node mapping and the kernel copy.
extra test_finalize_am 8 - FH_SHM=0
extra test_finalize_am 8 - FH_CMA=0
# Memory freed and allocated again without fh_mem_invalidate, reached through
# firehose (a transfer over the old mappings' small units needed more than f).
for np in 2 8; do extra test_remalloc "$np" - FH_SHM=0; done
extra test_remalloc 8 - FH_CMA=0

# Hardening (issue 14): misuse, mismatched collectives and shutdown on the off-node
# path too.
extra test_misuse_np2 2 - FH_SHM=0
extra test_coll_mismatch 4 - FH_SHM=0
extra test_shutdown 4 - FH_SHM=0
# The MPI barrier: a rank's fh_finalize must not complete its peers' barriers.
extra test_shutdown 8 - FH_BARRIER=mpi

echo "c-tests ($MPI)"
echo "c-tests: $pass passed, $fail failed"
[ "$fail" = 0 ]
