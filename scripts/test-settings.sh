#!/usr/bin/env bash
# Settings that differ between ranks (issue 14): for every setting, even ranks get
# one value and odd ranks another. A setting marked "same on every rank" must make
# fh_init fail on every rank with a message naming it; a "per rank" one must leave a
# working job. Every run is bounded by a timeout (a hang fails the test, not CI).
# Usage: test-settings.sh BINARY "MPIEXEC..." [NP]
set -u
bin=$1; mpiexec=$2; np=${3:-4}
pass=0; fail=0
scopes=$($mpiexec -np 1 "$bin" --scopes)
scope_of() { echo "$scopes" | grep -E "^  $1 " | grep -q "same on every rank" && echo job || echo rank; }
# Runs use FH_SHM=0 (firehose serves node peers too) unless the case sets FH_SHM.
run() {
  local var=$1 even=$2 odd=$3 want; want=$(scope_of "$var")
  local base=FH_SHM=0; [ "$var" = FH_SHM ] && base=FH_VERBOSE=0
  local out
  out=$(env "$base" timeout 60 $mpiexec -np "$np" sh -c \
    'r=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}; if [ $((r % 2)) = 0 ]; then v="$2"; else v="$3"; fi;
     export "$1=$v"; exec "$4"' sh "$var" "$even" "$odd" "$bin" 2>&1)
  local rc=$? works failed named
  works=$(echo "$out" | grep -c ': WORKS$')
  failed=$(echo "$out" | grep -c ': INIT_FAILED ')
  named=$(echo "$out" | grep ': INIT_FAILED ' | grep -c "$var")
  local ok=0
  if [ $rc = 0 ]; then
    if [ "$want" = job ] && [ "$failed" = "$np" ] && [ "$named" = "$np" ]; then ok=1; fi
    if [ "$want" = rank ] && [ "$works" = "$np" ]; then ok=1; fi
  fi
  if [ $ok = 1 ]; then
    pass=$((pass+1)); printf 'ok   %-28s %s/%s (%s)\n' "$var" "${even:-<empty>}" "${odd:-<empty>}" "$want"
    [ "$want" = job ] && echo "$out" | grep ': INIT_FAILED ' | head -1 | sed 's/^/     | /'
  else
    fail=$((fail+1)); printf 'FAIL %-28s %s/%s (%s; rc %s, %s works, %s failed, %s named it)\n' \
      "$var" "$even" "$odd" "$want" "$rc" "$works" "$failed" "$named"
    echo "$out" | tail -15 | sed 's/^/     | /'
  fi
}
run FH_PROGRESS poll thread
run FH_PROGRESS_INTERVAL 20 100
run FH_HEAP_SIZE 32M 4M
run FH_AM_MAX_MEDIUM 512 16M
run FH_AM_MAX_LONG 64M 1K
run FH_AM_CREDITS 8 64
run FH_AM_RECV_BUFFERS 32 4
run FH_PIN mlock none
run FH_MPI_THREAD single multiple
run FH_VERBOSE 0 1
run FH_FIREHOSE_M 256K 64M
run FH_FIREHOSE_MAXVICTIM_M 64K auto
run FH_FIREHOSE_MODE region page
run FH_FIREHOSE_MAXREGION_SIZE 1M 64K
run FH_FIREHOSE_MAXREGIONS auto 8
run FH_FIREHOSE_MAXVICTIM_R auto 2
run FH_FIREHOSE_PUTINMOVE_LIMIT 2K 0
run FH_REGISTRATION firehose pin-everything
run FH_STATS 0 1
run FH_SHM 1 0
run FH_SHM_MAX_RANKS 0 2
run FH_BARRIER dissemination tree
run FH_BARRIER node dissemination
run FH_WAIT_SLEEP auto 0
run FH_BCAST_LAMBDA auto 3
run FH_MPI_PROGRESS 1 0
run FH_STALL_WARN 10 30
run FH_STALL_ABORT "" 60
run FH_CMA 1 0
run FH_DEBUG_TABLES 0 1
run FH_VIS_ALGORITHM auto pack
run FH_VIS_ALGORITHM direct datatype
run FH_VIS_PACK_MAX 1K 0
# Every setting of the table is covered above.
for v in $(echo "$scopes" | sed -n 's/^  \(FH_[A-Z_0-9]*\) .*/\1/p'); do
  grep -q "^run $v " "$0" || { echo "FAIL $v has no case in $0"; fail=$((fail+1)); }
done
echo "settings: $pass passed, $fail failed"
[ "$fail" = 0 ]
