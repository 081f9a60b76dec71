#!/bin/sh
# Coarray Fortran programs (tests/caf/*.f90) compiled with gfortran -fcoarray=lib
# against libcaf_firehose, run at 1, 2, 3 and 4 images, with FH_SHM=1 and FH_SHM=0.
# Usage: run-caf-tests.sh MPIFC "MPIEXEC FLAGS" BUILD_DIR "LINK FLAGS" [test ...]
set -u
FC=$1; RUN=$2; OUT=$3/caf-tests; LINK=$4; shift 4
mkdir -p "$OUT"
TESTS=${*:-$(ls tests/caf/*.f90)}
fail=0
FCFLAGS="-fcoarray=lib -O2 -g -Wall -Werror"
# The tests' shared check (tests/caf/lib): compiled once.
$FC $FCFLAGS -J"$OUT" -c tests/caf/lib/caf_check.f90 -o "$OUT/caf_check.o" || exit 1
for src in $TESTS; do
  name=$(basename "$src" .f90)
  $FC $FCFLAGS -I"$OUT" "$src" "$OUT/caf_check.o" -o "$OUT/$name" $LINK || { fail=1; continue; }
  # What the program must end with: caf_errstop ends with ERROR STOP 3 on image 2.
  want=0
  case $name in caf_errstop) want=3 ;; caf_bounds) want=1 ;; esac
  for np in 1 2 3 4; do
    for shm in 1 0; do
      [ "$name" = caf_errstop ] && [ "$np" = 1 ] && continue
      log="$OUT/$name.np$np.shm$shm.log"
      FH_SHM=$shm timeout 120 $RUN -x FH_SHM -np $np "$OUT/$name" > "$log" 2>&1
      rc=$?
      bad=0
      [ $rc -ne $want ] && bad=1
      grep -q FAIL "$log" && bad=1
      # The refusal names the image the access was for.
      [ "$name" = caf_bounds ] && ! grep -q "outside the coarray.* on image [0-9]" "$log" && bad=1
      if [ $bad = 1 ]; then
        echo "FAIL: $name np=$np FH_SHM=$shm (exit $rc, wanted $want)"
        tail -20 "$log"
        fail=1
      else
        echo "ok   $name np=$np FH_SHM=$shm"
      fi
    done
  done
  # A heap smaller than the coarrays: they live in the segments fh_malloc grows.
  if [ "$name" = caf_basic ]; then
    log="$OUT/$name.heap4M.log"
    if FH_HEAP_SIZE=4M timeout 120 $RUN -x FH_HEAP_SIZE -np 3 "$OUT/$name" > "$log" 2>&1 && ! grep -q FAIL "$log"; then
      echo "ok   $name np=3 FH_HEAP_SIZE=4M"
    else
      echo "FAIL: $name np=3 FH_HEAP_SIZE=4M"; tail -20 "$log"; fail=1
    fi
  fi
done
exit $fail
