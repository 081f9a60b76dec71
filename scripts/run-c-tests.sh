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
echo "c-tests ($MPI)"
echo "c-tests: $pass passed, $fail failed"
[ "$fail" = 0 ]
