#!/usr/bin/env bash
# Run the firehose benchmarks: scripts/run-bench.sh <bindir> <outdir>
# Every bench_* program in <bindir> runs on 2 ranks under $MPIEXEC (default
# "mpirun.openmpi --oversubscribe") and writes <outdir>/<name>.csv; the reports go
# to stdout and to <outdir>/<name>.txt. Ends with the headline ratios against
# their targets (informational: a missed target does not fail the run; a crashed
# or hung benchmark does).
set -u
bindir=${1:?usage: run-bench.sh <bindir> <outdir>}
outdir=${2:?usage: run-bench.sh <bindir> <outdir>}
MPIEXEC=${MPIEXEC:-mpirun.openmpi --oversubscribe}
TIMEOUT=${BENCH_TIMEOUT:-300}
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)

echo "firehose benchmarks: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nproc) cores, load average$(uptime | sed 's/.*load average//')"
echo "launcher: $MPIEXEC -np 2; results in $outdir"
fail=0; ran=0
for b in "$bindir"/bench_*; do
  [ -x "$b" ] || continue
  name=$(basename "$b")
  echo
  echo "################ $name"
  start=$(date +%s)
  # shellcheck disable=SC2086 # MPIEXEC holds a command and its flags
  if timeout "$TIMEOUT" $MPIEXEC -np 2 "$b" "$outdir" > >(tee "$outdir/$name.txt"); then
    echo "($name: $(( $(date +%s) - start )) s)"
  else
    rc=$?
    echo "FAIL: $name exited with status $rc" >&2
    fail=$((fail+1))
  fi
  ran=$((ran+1))
done
if [ "$ran" = 0 ]; then echo "no bench_* programs in $bindir" >&2; exit 1; fi

# Headline numbers against the targets.
echo
echo "################ summary (ratio = firehose time / raw MPI time; lower is better)"
summ() { # csv benchmark size target label
  awk -F, -v b="$2" -v s="$3" -v t="$4" -v l="$5" '
    $1 == b && $2 == s { found = 1
      printf "  %-44s %8.3f us vs %8.3f us  ratio %5.2f  target <= %s: %s\n", l, $3, $4, $5, t,
             ($5 <= t ? "met" : "MISSED") }
    END { if (!found) printf "  %-44s (not measured)\n", l }' "$1"
}
rma=$outdir/bench_rma.csv; am=$outdir/bench_am.csv
if [ -f "$rma" ]; then
  summ "$rma" put_registered 8 1.10 "8 B fh_put (registered) vs MPI_Put+flush"
  summ "$rma" put_heap 8 1.10 "8 B fh_put (heap) vs MPI_Put+flush"
  summ "$rma" get_registered 8 1.10 "8 B fh_get (registered) vs MPI_Get+flush"
  summ "$rma" get_heap 8 1.10 "8 B fh_get (heap) vs MPI_Get+flush"
fi
if [ -f "$am" ]; then
  summ "$am" am_short_rtt 8 1.3 "AM short round trip vs MPI_Send/Recv"
fi
[ "$fail" = 0 ] || { echo "$fail benchmark(s) failed" >&2; exit 1; }
