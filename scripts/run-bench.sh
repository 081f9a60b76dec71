#!/usr/bin/env bash
# Run the firehose benchmarks: scripts/run-bench.sh <bindir> <outdir>
#
# Every bench_* program in <bindir> runs on 2 ranks under $MPIEXEC (default
# "mpirun.openmpi --oversubscribe"), $BENCH_RUNS times (default 5: on a small shared
# machine results move between launches, e.g. with where the two ranks land).
# Run i writes <outdir>/run<i>/<name>.csv and <name>.txt (its full report); the
# report of run 1 is also printed. Then:
#   <outdir>/<name>.csv  all runs merged (the benchmark's columns plus "run")
#   <outdir>/summary.txt per (benchmark, size): medians over the runs of the fh and
#                        baseline times and of the ratio, with the ratio's min..max,
#                        and the headline ratios against their targets.
# A missed target does not fail the run (it is a measurement); a benchmark that
# crashes or hangs (timeout $BENCH_TIMEOUT s, default 300) does.
#
# bench_firehose (issue 3) is not part of that loop: it runs $FH_BENCH_RUNS times
# (default 3; about 1.5-2 minutes in all) with its own modes, results in
# <outdir>/firehose/run<i>/ and, merged over the runs (plus a "run" column), in
# <outdir>/firehose/:
#   sweep  seed 000 Fig. 3, all four FH_REGISTRATION strategies and raw MPI
#          interleaved in one launch, on $FH_BENCH_NP ranks
#          (default 2: rank 0 is the target, rank 1 the initiator; 3 = two initiators,
#          but then 3 busy ranks share 2 cores), with
#          FH_FIREHOSE_M=$FH_BENCH_M (32M) and FH_FIREHOSE_MAXVICTIM_M=$FH_BENCH_MAXVICTIM
#          (8M; FH_FIREHOSE_MAXVICTIM_R=$FH_BENCH_MAXVICTIM_R, 8 regions) ->
#          fh_sweep.csv (merged over the runs), the figure ($BENCH_FIG,
#          default <outdir>/firehose/fig3.svg) and sweep_summary.md (medians) from
#          scripts/plot_fig3.py
#   hit    8-byte put/get through a hot firehose vs MPI on the same memory (2 ranks)
#   miss   miss cost vs AM round trip + pin, once per pinning unit in
#          $FH_BENCH_MISS_UNITS (default "region:1M region:64K page"), 2 ranks
# BENCH_FIREHOSE=0 skips it, BENCH_FIREHOSE=only runs nothing else. Its 8-byte hit
# and miss ratios join summary.txt and headline.txt.
#
# bench_smp (issue 4, Firehose-SMP: threads of a rank sharing one context under
# MPI_THREAD_MULTIPLE) is not part of the generic loop either: one launch per mode,
# each repeating its measurement inside (see bench/bench_smp.c), results in
# <outdir>/smp/ (<mode>.txt = the printed report, smp_*.csv):
#   fig8   seed 000 Fig. 8, 2 ranks, FH_FIREHOSE_MODE=page FH_FIREHOSE_M=32K (f = 8
#          pages): T = 1, 2, 4, 8 threads of rank 0 doing 32 KiB puts, 10 runs of 1 s
#          per T: puts/s per thread and aggregate, slowest/fastest thread (target
#          >= 0.7), fraction of requests in deadlock avoidance
#   gups   seed 000 Fig. 7, $SMP_BENCH_GUPS_NP ranks (default 4 = 2 nodes of 2 ranks):
#          firehose misses per node, shared table (1 process x 2 threads) vs one
#          table per process (2 processes x 1 thread)
#   hit    $SMP_BENCH_HIT_NP ranks (default 9): CPU ns per 8-byte fh_put hit with 8
#          threads (each its own peer) / 1 thread (target <= 1.5), MPI baseline too
# <outdir>/smp/summary.txt collects the tables. BENCH_SMP=0 skips it,
# BENCH_SMP=only runs nothing else; BENCH_SMP_MODES (default "fig8 gups hit")
# picks modes. About 2 minutes in all.
#
# bench_rpipe (issue 5, rmalloc/rpipe of seed 003) runs in its own section too,
# $RPIPE_BENCH_RUNS times (default 5), each run one launch per mode (see
# bench/bench_rpipe.c), results in <outdir>/rpipe/run<i>/<label>.txt and .csv and,
# merged over the runs (plus a "run" column), in <outdir>/rpipe/:
#   lat     2 ranks: ping-pong latency, 8 B .. 1 MiB, rpipe push and pull (a fresh
#           rmalloc per message) against 2 x MPI_Put + flush with a polled flag
#           ("2PUT"), MPI_Send/MPI_Recv and per-message lock/put/unlock +
#           lock/accumulate/unlock -> bench_rpipe_lat.csv; targets: push <= 1.0 x 2PUT
#           at every size, push < 1.0 x Send/Recv up to 4 KiB
#   policy  2 ranks: next/first/best/worst fit on one randomized trace (seed 003),
#           pipe widths 256 KiB and 128 KiB: time per message vs next fit,
#           fragmentation, rmalloc waits, free syncs -> bench_rpipe_policy.csv,
#           bench_rpipe_policy_detail.csv
#   random  at each rank count of $RPIPE_BENCH_RANDOM_NPS (default "2 4 8"): every
#           rank sends small messages to random peers over full-duplex pipes to all,
#           vs the same trace with MPI_Isend/MPI_Iprobe -> bench_rpipe_random_np<N>.csv
#   calls   2 ranks: the software per 8 B message on each side without waits, rpipe
#           writer vs eager MPI_Send, reader vs MPI_Recv -> bench_rpipe_calls.csv
# <outdir>/rpipe/summary.txt has the medians over the runs, headline.txt the targets.
# BENCH_RPIPE=0 skips it, BENCH_RPIPE=only runs nothing else; BENCH_RPIPE_MODES
# (default "lat policy random calls") picks modes. The library heap it needs (lat: about
# 16 MiB per rank) fits the default FH_HEAP_SIZE (32M); bench_rpipe lat sets
# FH_HEAP_SIZE=48M itself when it is unset. About 10 s per run on an idle machine.
#
# bench_sync (issue 6, seed 004's NIC-style synchronisation) runs in its own section,
# $SYNC_BENCH_RUNS times (default 3), each run one launch per mode and rank count (see
# bench/bench_sync.c; every launch interleaves firehose and its MPI baselines and
# reports medians of many reps), results in <outdir>/sync/run<i>/<label>/ (out.txt =
# the printed report, bench_sync_*.csv) and, merged over the runs (plus a "run"
# column), in <outdir>/sync/:
#   atomic  2 ranks, and again with FH_SHM=0: fh_atomic_fetch_add/cas_u64 vs
#           MPI_Fetch_and_op / MPI_Compare_and_swap + flush on MPI_Win_allocate,
#           MPI_Win_create and MPI_Win_allocate_shared windows (target <= 1.10)
#   lock    at each rank count of $SYNC_BENCH_LOCK_NPS (default 8): acquire +
#           critical section + release with 1..np contenders vs a CAS spin lock and an
#           MPI_Win_lock(EXCLUSIVE) mutex (target: fh >= 2x faster than the mutex at
#           4..8 contenders), and seed 004 Fig. 5.8 (compute the lock's home gets done)
#   barrier at each rank count of $SYNC_BENCH_NPS (default "2 4 8"): fh_barrier vs
#           MPI_Barrier (<= 1.2; tree and mpi algorithms for information) and the
#           split-phase barrier with one late rank (CPU left to the others)
#   coll    at each of $SYNC_BENCH_NPS: fh_broadcast / fh_allreduce vs MPI_Bcast /
#           MPI_Allreduce at 8 B .. 16 MiB (<= 1.2), postal tree vs binomial tree
# <outdir>/sync/summary.txt has the medians over the runs, headline.txt the targets
# and the split-phase table. BENCH_SYNC=0 skips it, BENCH_SYNC=only runs nothing else;
# BENCH_SYNC_MODES (default "atomic lock barrier coll") picks modes. About 40-50 s per
# run on an idle 2-core machine.
set -u
bindir=${1:?usage: run-bench.sh <bindir> <outdir>}
outdir=${2:?usage: run-bench.sh <bindir> <outdir>}
MPIEXEC=${MPIEXEC:-mpirun.openmpi --oversubscribe}
TIMEOUT=${BENCH_TIMEOUT:-300}
RUNS=${BENCH_RUNS:-5}
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)

benches=()
for b in "$bindir"/bench_*; do
  # bench_firehose and bench_smp take a mode argument and run in their own
  # sections below.
  [ "${BENCH_FIREHOSE:-1}" = only ] && break
  [ "${BENCH_SMP:-1}" = only ] && break
  [ "${BENCH_RPIPE:-1}" = only ] && break
  [ "${BENCH_SYNC:-1}" = only ] && break
  [ "${BENCH_INTEROP:-1}" = only ] && break
  case "$(basename "$b")" in bench_firehose | bench_smp | bench_rpipe | bench_sync | bench_interop) continue ;; esac
  [ -x "$b" ] && benches+=("$b")
done
[ ${#benches[@]} -gt 0 ] || [ -x "$bindir/bench_firehose" ] || [ -x "$bindir/bench_smp" ] || [ -x "$bindir/bench_rpipe" ] ||
  [ -x "$bindir/bench_sync" ] || [ -x "$bindir/bench_interop" ] ||
  { echo "run-bench: no bench_* programs in $bindir" >&2; exit 1; }

echo "firehose benchmarks: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nproc) cores, load average$(uptime | sed 's/.*load average//')"
[ ${#benches[@]} -gt 0 ] && echo "launcher: $MPIEXEC -np 2; $RUNS runs of: $(for b in "${benches[@]}"; do printf '%s ' "$(basename "$b")"; done)"
echo "results: $outdir"
fail=0
: >"$outdir/load.txt"
[ ${#benches[@]} -gt 0 ] || RUNS=0 # BENCH_FIREHOSE=only
for ((i = 1; i <= RUNS; i++)); do
  rdir=$outdir/run$i
  mkdir -p "$rdir"
  # Other work on the machine skews results (see docs/PERFORMANCE.md): record it.
  echo "run $i: loadavg $(cut -d' ' -f1-4 /proc/loadavg) at start" >>"$outdir/load.txt"
  for b in "${benches[@]}"; do
    name=$(basename "$b")
    start=$(date +%s)
    if [ "$i" = 1 ]; then
      echo; echo "################ $name (run 1 of $RUNS)"
      # shellcheck disable=SC2086 # MPIEXEC holds a command and its flags
      timeout "$TIMEOUT" $MPIEXEC -np 2 "$b" "$rdir" > >(tee "$rdir/$name.txt")
    else
      # shellcheck disable=SC2086
      timeout "$TIMEOUT" $MPIEXEC -np 2 "$b" "$rdir" >"$rdir/$name.txt" 2>"$rdir/$name.err"
    fi
    rc=$?
    if [ "$rc" != 0 ]; then
      echo "FAIL: $name (run $i) exited with status $rc" >&2
      [ -f "$rdir/$name.err" ] && tail -20 "$rdir/$name.err" >&2
      fail=$((fail+1))
    else
      [ "$i" = 1 ] || echo "run $i: $name ok ($(( $(date +%s) - start )) s, loadavg $(cut -d' ' -f1 /proc/loadavg))"
    fi
  done
done

# Merge the runs' CSVs.
for b in "${benches[@]}"; do
  name=$(basename "$b")
  out=$outdir/$name.csv
  rm -f "$out"
  for ((i = 1; i <= RUNS; i++)); do
    f=$outdir/run$i/$name.csv
    [ -f "$f" ] || continue
    [ -f "$out" ] || echo "$(head -1 "$f"),run" >"$out"
    tail -n +2 "$f" | sed "s/\$/,$i/" >>"$out"
  done
done

# ------------------------------------------------------------ firehose (issue 3)
fh_bin=$bindir/bench_firehose
fdir=$outdir/firehose
if [ -x "$fh_bin" ] && [ "${BENCH_FIREHOSE:-1}" != 0 ] && [ "${BENCH_SMP:-1}" != only ] &&
   [ "${BENCH_RPIPE:-1}" != only ] && [ "${BENCH_SYNC:-1}" != only ] && [ "${BENCH_INTEROP:-1}" != only ]; then
  here=$(cd "$(dirname "$0")" && pwd)
  np=${FH_BENCH_NP:-2}
  fruns=${FH_BENCH_RUNS:-3}
  # M = 32 MiB in 1 MiB regions (32 units), MAXVICTIM = 8 MiB (8 units; region mode
  # counts it in regions): 40 attachments, under Open MPI's 64 per dynamic window.
  # FH_CMA=0: node peers' plain memory goes through firehose (as off-node peers'
  # would), not the kernel's single copy, so these are firehose's numbers.
  fh_env=(FH_FIREHOSE_M="${FH_BENCH_M:-32M}" FH_FIREHOSE_MAXVICTIM_M="${FH_BENCH_MAXVICTIM:-8M}"
          FH_FIREHOSE_MAXVICTIM_R="${FH_BENCH_MAXVICTIM_R:-8}" FH_CMA=0)
  rm -rf "$fdir"
  mkdir -p "$fdir"
  fh_start=$(date +%s)
  fh_run() { # run label outdir args... (report in <outdir>/<label>.txt; run 1 also printed)
    local run=$1 label=$2 dir=$3 rc
    shift 3
    mkdir -p "$dir"
    if [ "$run" = 1 ]; then
      echo; echo "################ bench_firehose $label (run 1 of $fruns)  [$*]"
      timeout "$TIMEOUT" env "${fh_env[@]}" "$@" > >(tee "$dir/$label.txt") 2> >(tee "$dir/$label.err" >&2)
    else
      timeout "$TIMEOUT" env "${fh_env[@]}" "$@" >"$dir/$label.txt" 2>"$dir/$label.err"
    fi
    rc=$?
    if [ "$rc" != 0 ]; then
      echo "FAIL: bench_firehose $label (run $run) exited with status $rc" >&2
      tail -20 "$dir/$label.err" >&2
      fail=$((fail+1))
    else
      [ "$run" = 1 ] || echo "run $run: bench_firehose $label ok (loadavg $(cut -d' ' -f1 /proc/loadavg))"
    fi
  }
  for ((i = 1; i <= fruns; i++)); do
    rdir=$fdir/run$i
    echo "firehose run $i: loadavg $(cut -d' ' -f1-4 /proc/loadavg) at start" >>"$outdir/load.txt"
    # shellcheck disable=SC2086 # MPIEXEC holds a command and its flags
    fh_run "$i" sweep "$rdir" $MPIEXEC -np "$np" "$fh_bin" sweep "$rdir"
    # shellcheck disable=SC2086
    fh_run "$i" hit "$rdir" FH_REGISTRATION=firehose $MPIEXEC -np 2 "$fh_bin" hit "$rdir"
    for u in ${FH_BENCH_MISS_UNITS:-region:1M region:64K page}; do
      mode=${u%%:*}; size=${u#*:}; [ "$size" = "$u" ] && size=
      label=miss_${mode}${size:+_$size}
      # shellcheck disable=SC2086
      fh_run "$i" "$label" "$rdir/$label" FH_REGISTRATION=firehose FH_FIREHOSE_MODE="$mode" \
        ${size:+FH_FIREHOSE_MAXREGION_SIZE=$size} $MPIEXEC -np 2 "$fh_bin" miss "$rdir/$label"
    done
  done
  # Merge over runs (and miss units): the program's columns plus "run".
  fh_merge() { # out files...
    local out=$1 f r
    shift
    rm -f "$out"
    for f in "$@"; do
      [ -f "$f" ] || continue
      r=${f#"$fdir"/run}; r=${r%%/*}
      [ -f "$out" ] || echo "$(head -1 "$f"),run" >"$out"
      tail -n +2 "$f" | sed "s/\$/,$r/" >>"$out"
    done
  }
  fh_merge "$fdir/fh_sweep.csv" "$fdir"/run*/fh_sweep.csv
  fh_merge "$fdir/bench_firehose_hit.csv" "$fdir"/run*/bench_firehose_hit.csv
  fh_merge "$fdir/bench_firehose_miss.csv" "$fdir"/run*/miss_*/bench_firehose_miss.csv
  fh_merge "$fdir/bench_firehose_miss_parts.csv" "$fdir"/run*/miss_*/bench_firehose_miss_parts.csv
  if [ -f "$fdir/fh_sweep.csv" ]; then
    python3 "$here/plot_fig3.py" -o "${BENCH_FIG:-$fdir/fig3.svg}" --table "$fdir/sweep_summary.md" \
      "$fdir/fh_sweep.csv" || fail=$((fail+1))
  fi
  {
    echo "firehose sweep (seed 000 Fig. 3), medians over $fruns runs:"
    cat "$fdir/sweep_summary.md" 2>/dev/null
    echo
    echo "firehose miss components (every run):"
    column -s, -t "$fdir/bench_firehose_miss_parts.csv" 2>/dev/null | sed 's/^/  /'
  } >"$fdir/summary.txt"
  echo; cat "$fdir/summary.txt"
  echo "bench_firehose: $(( $(date +%s) - fh_start )) s in all"
fi

# ------------------------------------------------------------ firehose-SMP (issue 4)
smp_bin=$bindir/bench_smp
sdir=$outdir/smp
if [ -x "$smp_bin" ] && [ "${BENCH_SMP:-1}" != 0 ] && [ "${BENCH_FIREHOSE:-1}" != only ] &&
   [ "${BENCH_RPIPE:-1}" != only ] && [ "${BENCH_SYNC:-1}" != only ] && [ "${BENCH_INTEROP:-1}" != only ]; then
  rm -rf "$sdir"
  mkdir -p "$sdir"
  smp_start=$(date +%s)
  echo "smp: loadavg $(cut -d' ' -f1-4 /proc/loadavg) at start" >>"$outdir/load.txt"
  smp_run() { # mode env-and-command... (report in <sdir>/<mode>.txt, also printed)
    local mode=$1 rc
    shift
    echo; echo "################ bench_smp $mode  [$*]"
    timeout "$TIMEOUT" "$@" > >(tee "$sdir/$mode.txt") 2>"$sdir/$mode.err"
    rc=$?
    if [ "$rc" != 0 ]; then
      echo "FAIL: bench_smp $mode exited with status $rc" >&2
      tail -20 "$sdir/$mode.err" >&2
      fail=$((fail+1))
    fi
  }
  for m in ${BENCH_SMP_MODES:-fig8 gups hit}; do
    case $m in
    # shellcheck disable=SC2086 # MPIEXEC holds a command and its flags
    fig8) smp_run fig8 env FH_CMA=0 FH_FIREHOSE_MODE=page FH_FIREHOSE_M=32K $MPIEXEC -np 2 "$smp_bin" fig8 "$sdir" ;;
    # shellcheck disable=SC2086
    gups) smp_run gups env FH_CMA=0 $MPIEXEC -np "${SMP_BENCH_GUPS_NP:-4}" "$smp_bin" gups "$sdir" ;;
    # shellcheck disable=SC2086
    hit) smp_run hit env FH_CMA=0 $MPIEXEC -np "${SMP_BENCH_HIT_NP:-9}" "$smp_bin" hit "$sdir" ;;
    *) echo "run-bench: unknown bench_smp mode '$m'" >&2; fail=$((fail+1)) ;;
    esac
  done
  {
    for m in ${BENCH_SMP_MODES:-fig8 gups hit}; do
      [ -s "$sdir/$m.txt" ] && { echo "bench_smp $m:"; cat "$sdir/$m.txt"; echo; }
    done
    echo "firehose-SMP targets:"
    if [ -f "$sdir/smp_fig8.csv" ]; then
      awk -F, 'NR > 1 && $1 > 1 { printf "  fig8 T=%-2s slowest/fastest thread %.3f (min over runs %.3f)  target >= 0.7: %s\n",
                                  $1, $6, $7, ($6 >= 0.7 ? "met" : "MISSED") }' "$sdir/smp_fig8.csv"
    fi
    if [ -f "$sdir/smp_hit.csv" ]; then
      awk -F, '$1 == "fh" && $2 > 1 { printf "  hit: fh_put CPU ns/op, %s threads / 1 thread %.3f  target <= 1.5: %s\n",
                                      $2, $8, ($8 <= 1.5 ? "met" : "MISSED") }
               $1 == "MPI" && $2 > 1 { printf "       (MPI_Put+flush alone, one window: %.3f;", $8 }
               $1 == "MPI-win/thread" && $2 > 1 { printf " a window per thread: %.3f)\n", $8 }' "$sdir/smp_hit.csv"
    fi
  } >"$sdir/summary.txt"
  echo "bench_smp: $(( $(date +%s) - smp_start )) s in all; summary: $sdir/summary.txt"
fi

# Medians over the runs. (mawk-compatible: no asort.)
summarise() { # merged csv files...
  awk -F, '
    function med(arr, k, c,    i, j, t, v) {
      for (i = 1; i <= c; i++) v[i] = arr[k, i] + 0
      for (i = 2; i <= c; i++) { t = v[i]; for (j = i - 1; j >= 1 && v[j] > t; j--) v[j + 1] = v[j]; v[j + 1] = t }
      lo = v[1]; hi = v[c]
      return c % 2 ? v[(c + 1) / 2] : (v[c / 2] + v[c / 2 + 1]) / 2
    }
    FNR == 1 { next }
    { k = $1 "," $2; if (!(k in n)) { order[++nk] = k; n[k] = 0 }
      i = ++n[k]; fh[k, i] = $3; ba[k, i] = $4; ra[k, i] = $5 }
    END {
      printf "%-34s %9s %6s %11s %11s %7s  %s\n", "benchmark", "size", "runs", "fh us", "baseline us", "ratio", "ratio min..max"
      for (x = 1; x <= nk; x++) {
        k = order[x]; c = n[k]; split(k, kk, ",")
        mf = med(fh, k, c); mb = med(ba, k, c); mr = med(ra, k, c)
        printf "%-34s %9s %6d %11.3f %11.3f %7.2f  %.2f..%.2f\n", kk[1], kk[2], c, mf, mb, mr, lo, hi
      }
    }' "$@"
}
target() { # summary-file benchmark size target label
  awk -v b="$2" -v s="$3" -v t="$4" -v l="$5" '
    $1 == b && $2 == s { found = 1
      printf "  %-42s %7.3f us vs %7.3f us  ratio %5.2f (runs: %s)  target <= %s: %s\n", l, $4, $5, $6, $7, t,
             ($6 <= t ? "met" : "MISSED") }
    END { if (!found) printf "  %-42s (not measured)\n", l }' "$1"
}

# ------------------------------------------------------------ rpipe (issue 5)
rp_bin=$bindir/bench_rpipe
rpdir=$outdir/rpipe
if [ -x "$rp_bin" ] && [ "${BENCH_RPIPE:-1}" != 0 ] && [ "${BENCH_FIREHOSE:-1}" != only ] &&
   [ "${BENCH_SMP:-1}" != only ] && [ "${BENCH_SYNC:-1}" != only ] && [ "${BENCH_INTEROP:-1}" != only ]; then
  rm -rf "$rpdir"
  mkdir -p "$rpdir"
  rp_start=$(date +%s)
  rpruns=${RPIPE_BENCH_RUNS:-5}
  rp_run() { # run label dir np mode (report in <dir>/<label>.txt; run 1 also printed)
    local run=$1 label=$2 dir=$3 np=$4 mode=$5 rc
    mkdir -p "$dir"
    if [ "$run" = 1 ]; then
      echo; echo "################ bench_rpipe $mode, $np ranks (run 1 of $rpruns)"
      # shellcheck disable=SC2086 # MPIEXEC holds a command and its flags
      timeout "$TIMEOUT" $MPIEXEC -np "$np" "$rp_bin" "$mode" "$dir" > >(tee "$dir/$label.txt") \
        2> >(tee "$dir/$label.err" >&2)
    else
      # shellcheck disable=SC2086
      timeout "$TIMEOUT" $MPIEXEC -np "$np" "$rp_bin" "$mode" "$dir" >"$dir/$label.txt" 2>"$dir/$label.err"
    fi
    rc=$?
    if [ "$rc" != 0 ]; then
      echo "FAIL: bench_rpipe $label (run $run) exited with status $rc" >&2
      tail -20 "$dir/$label.err" >&2
      fail=$((fail+1))
    else
      [ "$run" = 1 ] || echo "run $run: bench_rpipe $label ok (loadavg $(cut -d' ' -f1 /proc/loadavg))"
    fi
  }
  for ((i = 1; i <= rpruns; i++)); do
    echo "rpipe run $i: loadavg $(cut -d' ' -f1-4 /proc/loadavg) at start" >>"$outdir/load.txt"
    for m in ${BENCH_RPIPE_MODES:-lat policy random calls}; do
      case $m in
      lat | policy | calls) rp_run "$i" "$m" "$rpdir/run$i" 2 "$m" ;;
      random)
        for np in ${RPIPE_BENCH_RANDOM_NPS:-2 4 8}; do
          rp_run "$i" "random_np$np" "$rpdir/run$i" "$np" random
        done ;;
      *) echo "run-bench: unknown bench_rpipe mode '$m'" >&2; fail=$((fail+1)) ;;
      esac
    done
  done
  # Merge over the runs: the program's columns plus "run".
  rp_csvs=()
  for f in "$rpdir"/run*/bench_rpipe_*.csv; do
    [ -f "$f" ] || continue
    name=$(basename "$f")
    out=$rpdir/$name
    if [ ! -f "$out" ]; then
      for r in "$rpdir"/run*/"$name"; do
        ri=${r#"$rpdir"/run}; ri=${ri%%/*}
        [ -f "$out" ] || echo "$(head -1 "$r"),run" >"$out"
        tail -n +2 "$r" | sed "s/\$/,$ri/" >>"$out"
      done
      case $name in *_detail.csv) ;; *) rp_csvs+=("$out") ;; esac
    fi
  done
  if [ ${#rp_csvs[@]} -gt 0 ]; then
    summarise "${rp_csvs[@]}" >"$rpdir/summary.txt"
    {
      echo "rpipe targets (rpipe time / baseline time, median over $rpruns runs; lower is better):"
      for s in 8 64 512 4096 65536 1048576; do
        target "$rpdir/summary.txt" rpipe_push_vs_2put $s 1.0 "push $s B vs 2PUT (MPI_Put data+flag)"
      done
      for s in 8 64 512 4096; do
        target "$rpdir/summary.txt" rpipe_push_vs_sendrecv $s 1.0 "push $s B vs MPI_Send/Recv"
      done
    } >"$rpdir/headline.txt"
    if [ -f "$rpdir/bench_rpipe_policy_detail.csv" ]; then
      {
        echo
        echo "rpipe allocation policies (every run; ratio = time per message / next fit's in the same run):"
        column -s, -t "$rpdir/bench_rpipe_policy_detail.csv" | sed 's/^/  /'
      } >>"$rpdir/headline.txt"
    fi
  fi
  echo "bench_rpipe: $(( $(date +%s) - rp_start )) s in all; summary: $rpdir/summary.txt"
fi

# ------------------------------------------------------------ sync (issue 6)
sy_bin=$bindir/bench_sync
sydir=$outdir/sync
if [ -x "$sy_bin" ] && [ "${BENCH_SYNC:-1}" != 0 ] && [ "${BENCH_FIREHOSE:-1}" != only ] &&
   [ "${BENCH_SMP:-1}" != only ] && [ "${BENCH_RPIPE:-1}" != only ] && [ "${BENCH_INTEROP:-1}" != only ]; then
  rm -rf "$sydir"
  mkdir -p "$sydir"
  sy_start=$(date +%s)
  syruns=${SYNC_BENCH_RUNS:-3}
  sy_run() { # run label dir np mode [VAR=value...] (report in <dir>/<label>/out.txt; run 1 also printed)
    local run=$1 label=$2 dir=$3/$2 np=$4 mode=$5 rc
    shift 5
    mkdir -p "$dir"
    if [ "$run" = 1 ]; then
      echo; echo "################ bench_sync $mode, $np ranks${*:+ ($*)} (run 1 of $syruns)"
      # shellcheck disable=SC2086 # MPIEXEC holds a command and its flags
      timeout "$TIMEOUT" env "$@" $MPIEXEC -np "$np" "$sy_bin" "$mode" "$dir" > >(tee "$dir/out.txt") \
        2> >(tee "$dir/err.txt" >&2)
    else
      # shellcheck disable=SC2086
      timeout "$TIMEOUT" env "$@" $MPIEXEC -np "$np" "$sy_bin" "$mode" "$dir" >"$dir/out.txt" 2>"$dir/err.txt"
    fi
    rc=$?
    if [ "$rc" != 0 ]; then
      echo "FAIL: bench_sync $label (run $run) exited with status $rc" >&2
      tail -20 "$dir/err.txt" >&2
      fail=$((fail+1))
    else
      [ "$run" = 1 ] || echo "run $run: bench_sync $label ok (loadavg $(cut -d' ' -f1 /proc/loadavg))"
    fi
  }
  for ((i = 1; i <= syruns; i++)); do
    echo "sync run $i: loadavg $(cut -d' ' -f1-4 /proc/loadavg) at start" >>"$outdir/load.txt"
    for m in ${BENCH_SYNC_MODES:-atomic lock barrier coll}; do
      case $m in
      atomic)
        sy_run "$i" atomic "$sydir/run$i" 2 atomic
        sy_run "$i" atomic_shm0 "$sydir/run$i" 2 atomic FH_SHM=0 ;;
      lock)
        for np in ${SYNC_BENCH_LOCK_NPS:-8}; do sy_run "$i" "lock_np$np" "$sydir/run$i" "$np" lock; done ;;
      barrier | coll)
        for np in ${SYNC_BENCH_NPS:-2 4 8}; do sy_run "$i" "${m}_np$np" "$sydir/run$i" "$np" "$m"; done ;;
      *) echo "run-bench: unknown bench_sync mode '$m'" >&2; fail=$((fail+1)) ;;
      esac
    done
  done
  # Merge over the runs and launches: the program's columns plus "run".
  sy_csvs=()
  for name in bench_sync_atomic bench_sync_lock bench_sync_fig58 bench_sync_barrier bench_sync_split bench_sync_coll; do
    out=$sydir/$name.csv
    rm -f "$out"
    for f in "$sydir"/run*/*/"$name.csv"; do
      [ -f "$f" ] || continue
      ri=${f#"$sydir"/run}; ri=${ri%%/*}
      [ -f "$out" ] || echo "$(head -1 "$f"),run" >"$out"
      tail -n +2 "$f" | sed "s/\$/,$ri/" >>"$out"
    done
    [ -f "$out" ] && [ "$name" != bench_sync_split ] && sy_csvs+=("$out")
  done
  if [ ${#sy_csvs[@]} -gt 0 ]; then
    summarise "${sy_csvs[@]}" >"$sydir/summary.txt"
    {
      echo "sync targets (fh time / baseline time, median over $syruns runs; lower is better):"
      target "$sydir/summary.txt" atomic_fadd 8 1.10 "fh_atomic_fetch_add vs MPI_Fetch_and_op (allocate)"
      target "$sydir/summary.txt" atomic_cas_vs_create 8 1.10 "fh_atomic_cas vs MPI_Compare_and_swap (create)"
      target "$sydir/summary.txt" atomic_cas_vs_shared 8 1.10 "fh_atomic_cas vs MPI_Compare_and_swap (shared)"
      target "$sydir/summary.txt" atomic_fadd_shm0 8 1.10 "FH_SHM=0 fetch_add vs MPI_Fetch_and_op (allocate)"
      target "$sydir/summary.txt" atomic_fadd_vs_create_shm0 8 1.10 "FH_SHM=0 fetch_add vs MPI_Fetch_and_op (create)"
      target "$sydir/summary.txt" atomic_cas_vs_create_shm0 8 1.10 "FH_SHM=0 cas vs MPI_Compare_and_swap (create)"
      for np in ${SYNC_BENCH_LOCK_NPS:-8}; do
        for k in 2 4 6 8; do
          [ "$k" -le "$np" ] || continue
          target "$sydir/summary.txt" "lock_vs_mutex_np$np" "$k" 0.5 "lock, $k contenders: fh / MPI_Win_lock mutex"
        done
      done
      for np in ${SYNC_BENCH_NPS:-2 4 8}; do
        target "$sydir/summary.txt" "barrier_np$np" 0 1.2 "fh_barrier vs MPI_Barrier, $np ranks"
      done
      for np in ${SYNC_BENCH_NPS:-2 4 8}; do
        for s in 8 1024 65536 1048576 16777216; do
          target "$sydir/summary.txt" "bcast_np$np" "$s" 1.2 "fh_broadcast $s B vs MPI_Bcast, $np ranks"
        done
      done
      for np in ${SYNC_BENCH_NPS:-2 4 8}; do
        for s in 8 1024 65536 1048576 16777216; do
          target "$sydir/summary.txt" "allreduce_np$np" "$s" 1.2 "fh_allreduce $s B vs MPI_Allreduce, $np ranks"
        done
      done
      echo "  (lock rows: ratio <= 0.5 means fh is >= 2x faster than the mutex. Fig. 5.8 rows in summary.txt:"
      echo "   fig58_home_chunk_vs_* = time per home compute chunk under the fh lock / under the other; < 1 is better.)"
      if [ -f "$sydir/bench_sync_split.csv" ]; then
        echo
        echo "split-phase barrier with one late rank (every run; app_over_reference: 1 = the others computed as"
        echo "much as they could without a barrier):"
        column -s, -t "$sydir/bench_sync_split.csv" | sed 's/^/  /'
      fi
    } >"$sydir/headline.txt"
  fi
  echo "bench_sync: $(( $(date +%s) - sy_start )) s in all; summary: $sydir/summary.txt"
fi

csvs=()
for b in "${benches[@]}"; do [ -f "$outdir/$(basename "$b").csv" ] && csvs+=("$outdir/$(basename "$b").csv"); done
for f in "$fdir/bench_firehose_hit.csv" "$fdir/bench_firehose_miss.csv"; do [ -f "$f" ] && csvs+=("$f"); done
if [ ${#csvs[@]} -gt 0 ]; then
  summarise "${csvs[@]}" >"$outdir/summary.txt"
  {
    echo
    echo "################ headline ratios (firehose time / raw MPI time, median over the runs: $RUNS per generic benchmark, ${fruns:-0} of bench_firehose; lower is better)"
    if [ ${#benches[@]} -gt 0 ]; then
      target "$outdir/summary.txt" put_registered 8 1.10 "8 B fh_put (registered) vs MPI_Put+flush"
      target "$outdir/summary.txt" put_heap 8 1.10 "8 B fh_put (heap) vs MPI_Put+flush"
      target "$outdir/summary.txt" get_registered 8 1.10 "8 B fh_get (registered) vs MPI_Get+flush"
      target "$outdir/summary.txt" get_heap 8 1.10 "8 B fh_get (heap) vs MPI_Get+flush"
      target "$outdir/summary.txt" am_short_rtt 8 1.3 "AM short round trip vs MPI_Send/Recv"
    fi
    target "$outdir/summary.txt" put_hit_malloc 8 1.10 "8 B fh_put firehose hit vs MPI_Put+flush"
    target "$outdir/summary.txt" get_hit_malloc 8 1.10 "8 B fh_get firehose hit vs MPI_Get+flush"
    for u in 1048576 65536 4096; do
      target "$outdir/summary.txt" "miss_put_unit$((u / 1024))K" $u 1.0 "fh_put miss ($((u / 1024)) KiB unit) vs AM RTT+pin"
      target "$outdir/summary.txt" "miss_get_unit$((u / 1024))K" $u 1.0 "fh_get miss ($((u / 1024)) KiB unit) vs AM RTT+pin"
    done
  } >"$outdir/headline.txt"
  echo
  echo "################ medians over the runs (all rows: $outdir/summary.txt)"
  cat "$outdir/summary.txt"
  cat "$outdir/headline.txt"
fi
if [ -f "$sdir/summary.txt" ]; then
  echo
  echo "################ firehose-SMP (bench_smp; tables: $sdir/summary.txt)"
  sed -n '/^firehose-SMP targets:/,$p' "$sdir/summary.txt"
fi
if [ -f "$rpdir/summary.txt" ]; then
  echo
  echo "################ rpipe (bench_rpipe; medians over the runs; all rows: $rpdir/summary.txt)"
  cat "$rpdir/summary.txt"
  cat "$rpdir/headline.txt"
fi
if [ -f "$sydir/summary.txt" ]; then
  echo
  echo "################ sync (bench_sync; medians over the runs; all rows: $sydir/summary.txt)"
  cat "$sydir/summary.txt"
  cat "$sydir/headline.txt"
fi

# bench_interop (issue 13, MPI interoperability): the kernel's single copy to a node
# peer's plain memory vs MPI RMA on an attached window (2 ranks); the AMs a first
# access to registered memory costs (FH_SHM=1 and 0); and the cost of serving the
# library inside blocking MPI calls (interposed call vs PMPI_*) at 2, 4, 8 ranks.
# $INTEROP_BENCH_RUNS launches of each (default 3); results in <outdir>/interop/.
iodir=$outdir/interop
if [ -x "$bindir/bench_interop" ] && [ "${BENCH_INTEROP:-1}" != 0 ] && [ "${BENCH_FIREHOSE:-1}" != only ] &&
   [ "${BENCH_SMP:-1}" != only ] && [ "${BENCH_RPIPE:-1}" != only ] && [ "${BENCH_SYNC:-1}" != only ]; then
  mkdir -p "$iodir"
  : >"$iodir/summary.txt"
  for spec in "cma 2" "first 2 FH_SHM=1" "first 2 FH_SHM=0" "first 8 FH_SHM=0" "progress 2" "progress 4" "progress 8"; do
    set -- $spec
    mode=$1 np=$2; shift 2
    for ((run = 1; run <= ${INTEROP_BENCH_RUNS:-3}; run++)); do
      rdir=$iodir/run$run; mkdir -p "$rdir"
      label="$mode np=$np${*:+ $*}"
      xs=(); for v in "$@"; do xs+=(-x "${v%%=*}"); done
      # shellcheck disable=SC2086
      if ! out=$(env "$@" timeout "$TIMEOUT" $MPIEXEC "${xs[@]}" -np "$np" "$bindir/bench_interop" "$mode" "$rdir" 2>&1); then
        echo "FAIL: bench_interop $label (run $run)" >&2; echo "$out" | tail -20 >&2; fail=$((fail+1)); continue
      fi
      echo "$out" | sed "s/^/[$label run $run] /" >>"$iodir/summary.txt"
    done
  done
  echo
  echo "################ interop (bench_interop; every launch: $iodir/summary.txt)"
  grep -v "^\[.*\] bench_interop" "$iodir/summary.txt"
fi
echo "load average at the end$(uptime | sed 's/.*load average//')"
[ "$fail" = 0 ] || { echo "run-bench: $fail benchmark run(s) failed" >&2; exit 1; }
