#!/usr/bin/env bash
# Loop the plain-MPI programs (c-tests/interop_*) and the memory-churn test at 8 ranks
# (2 under MPICH, whose busy-polling ranks starve each other when oversubscribed),
# $LOOPS times each, with node-shared heaps (FH_SHM=1: kernel single copy) and without
# (FH_SHM=0: firehose moves, the off-node path). A hang is a failure (timeout 120 s),
# and output is capped: the failure mode this guards against can be an endless log.
# Usage: LOOPS=20 MPIEXEC="mpirun --oversubscribe" scripts/loop-interop.sh <bindir>
set -u
dir=$1
loops=${LOOPS:-20}
np=8
[ "${MPI:-}" = mpich ] && np=2
pass=0; fail=0; failed=()
for t in "$dir"/interop_* "$dir"/test_churn; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  for shm in 1 0; do
    xs=()
    [ "${MPI:-}" = mpich ] || xs=(-x FH_SHM)
    start=$(date +%s); bad=0
    for i in $(seq 1 "$loops"); do
      if ! out=$(FH_SHM=$shm timeout 120 $MPIEXEC "${xs[@]}" -np $np "$t" 2>&1 | head -c 20000; exit "${PIPESTATUS[0]}"); then
        bad=1
        echo "FAIL $name np=$np FH_SHM=$shm (run $i of $loops)"; echo "$out" | tail -25 | sed 's/^/     | /'
        break
      fi
    done
    if [ $bad = 0 ]; then
      pass=$((pass+1)); printf 'ok   %-22s np=%s FH_SHM=%s x%s (%ss)\n' "$name" $np $shm "$loops" "$(( $(date +%s) - start ))"
    else
      fail=$((fail+1)); failed+=("$name FH_SHM=$shm")
    fi
  done
done
echo "interop loops ($loops x, ${MPI:-openmpi}): $pass passed, $fail failed"
[ "$fail" = 0 ]
