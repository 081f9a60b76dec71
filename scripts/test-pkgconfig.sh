#!/usr/bin/env bash
# scripts/test-pkgconfig.sh "<make>" "<mpicc>" "<mpiexec and flags>" "<mpif90>"
# Install firehose into a temporary prefix (make install PREFIX=$tmp DESTDIR=), then
#  - check the installed files: headers, Fortran module, libfirehose.so.<version>
#    with its .so.<major> / .so links, SONAME libfirehose.so.<major>, the .a, the .pc
#  - build tests/pkgconfig/consumer.c with the MPI compiler wrapper and ONLY
#    `pkg-config --cflags --libs firehose`, run it on 2 ranks
#  - build tests/cmake/consumer.f90 with the MPI Fortran wrapper, the module
#    directory and `pkg-config --libs firehose`, run it on 2 ranks
#  - build the C consumer again against libfirehose.a with `pkg-config --static --libs firehose`
#    (shared libmpi is fine), check with ldd that libfirehose.so is not needed, run it
#  - make uninstall PREFIX=$tmp and check that every installed file is gone.
# Exits non-zero on the first failure, saying what failed.
set -euo pipefail
MAKE_CMD=${1:-make}
MPICC=${2:-mpicc.openmpi}
MPIEXEC=${3:-mpirun.openmpi --oversubscribe}
MPIFC=${4:-mpif90.openmpi}
cd "$(dirname "$0")/.."

tmp=$(mktemp -d "${TMPDIR:-/tmp}/firehose-pc.XXXXXX")
work=$(mktemp -d "${TMPDIR:-/tmp}/firehose-pc-build.XXXXXX")
trap 'rm -rf "$tmp" "$work"' EXIT
fail() { echo "test-pkgconfig: FAIL: $*" >&2; exit 1; }
step() { echo "test-pkgconfig: $*"; }
CFLAGS_C="-O2 -Wall -Wextra -Werror -std=c11 -D_GNU_SOURCE"

step "make install PREFIX=$tmp"
# shellcheck disable=SC2086 # MAKE_CMD may carry flags
if ! $MAKE_CMD install PREFIX="$tmp" DESTDIR= >"$work/install.log" 2>&1; then
  tail -30 "$work/install.log" >&2
  fail "make install PREFIX=$tmp failed"
fi

export PKG_CONFIG_PATH="$tmp/lib/pkgconfig"
pkg-config --exists firehose || fail "pkg-config cannot find firehose in $PKG_CONFIG_PATH: $(pkg-config --print-errors --exists firehose 2>&1)"
version=$(pkg-config --modversion firehose)
major=${version%%.*}
step "installed firehose $version (major $major), built against $(pkg-config --variable=mpi firehose)"

# Installed files.
for f in include/firehose.h include/firehose/firehose.mod include/firehose/firehose.f90 \
         lib/libfirehose.a "lib/libfirehose.so.$version" lib/pkgconfig/firehose.pc; do
  [ -f "$tmp/$f" ] || fail "$f was not installed"
done
[ -L "$tmp/lib/libfirehose.so.$major" ] && [ -e "$tmp/lib/libfirehose.so.$major" ] || fail "lib/libfirehose.so.$major is not a working symlink"
[ -L "$tmp/lib/libfirehose.so" ] && [ -e "$tmp/lib/libfirehose.so" ] || fail "lib/libfirehose.so is not a working symlink"
soname=$(readelf -d "$tmp/lib/libfirehose.so.$version" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
[ "$soname" = "libfirehose.so.$major" ] || fail "SONAME is '$soname', expected libfirehose.so.$major"
step "files ok: header, Fortran module, .a, .so.$version -> SONAME $soname, links, .pc"

run2() { # binary label
  local out
  # shellcheck disable=SC2086 # MPIEXEC holds a command and its flags
  if ! out=$(timeout 120 $MPIEXEC -np 2 "$1" 2>&1); then
    echo "$out" | tail -20 >&2
    fail "$2 consumer failed to run"
  fi
  grep -q '^PASS' <<<"$out" || { echo "$out" | tail -20 >&2; fail "$2 consumer did not print PASS"; }
  step "$2: $(grep '^PASS' <<<"$out")"
}

# 1. Shared: nothing but pkg-config.
cflags=$(pkg-config --cflags firehose)
libs=$(pkg-config --libs firehose)
step "shared build: $MPICC consumer.c $cflags $libs"
# shellcheck disable=SC2086
$MPICC $CFLAGS_C tests/pkgconfig/consumer.c -o "$work/consumer_shared" $cflags $libs || fail "shared build failed"
# (Outputs are captured before grep -q: with pipefail, grep -q closing the pipe
# early would make the producer's SIGPIPE fail the test.)
deps=$(ldd "$work/consumer_shared")
grep -q "libfirehose.so.$major => $tmp/lib/" <<<"$deps" || {
  echo "$deps" >&2; fail "consumer_shared does not load libfirehose.so.$major from $tmp/lib"; }
run2 "$work/consumer_shared" "shared"

# 1b. Fortran, the README's line: the module directory plus pkg-config's libraries
#     (-lfirehose_fortran brings the module's own procedures, e.g. fh_strerror_str).
fmoddir=$(pkg-config --variable=fmoddir firehose)
step "Fortran build: $MPIFC -I$fmoddir consumer.f90 $libs"
# shellcheck disable=SC2086
$MPIFC -I"$fmoddir" tests/cmake/consumer.f90 -o "$work/consumer_f" $libs || fail "Fortran build failed"
run2 "$work/consumer_f" "Fortran"

# 2. Static firehose: the same pkg-config line with --static; -lfirehose is made to
#    resolve to libfirehose.a (the rest, MPI included, stays shared).
slibs=$(pkg-config --static --libs firehose)
slibs_a=$(echo " $slibs " | sed 's| -lfirehose | -Wl,-Bstatic -lfirehose -Wl,-Bdynamic |')
step "static build: $MPICC consumer.c $cflags $slibs_a"
# shellcheck disable=SC2086
if ! $MPICC $CFLAGS_C tests/pkgconfig/consumer.c -o "$work/consumer_static" $cflags $slibs_a 2>"$work/static.log"; then
  cat "$work/static.log" >&2
  fail "static build against libfirehose.a failed (Libs.private in pkgconfig/firehose.pc.in may lack a library)"
fi
deps=$(ldd "$work/consumer_static")
if grep -q libfirehose <<<"$deps"; then
  echo "$deps" >&2; fail "consumer_static still needs libfirehose.so"
fi
syms=$(nm "$work/consumer_static")
grep -q ' T fh_init_comm_f$' <<<"$syms" || fail "consumer_static does not contain fh_init_comm_f"
step "static binary does not need libfirehose.so (ldd), contains the library code (nm)"
run2 "$work/consumer_static" "static"

# 2b. Co-array Fortran: libcaf_firehose through pkg-config firehose-caf, and through the
#     fhcaf / fhcafrun wrappers (make install writes both into $prefix/bin).
for f in "lib/libcaf_firehose.so.$version" lib/libcaf_firehose.a lib/pkgconfig/firehose-caf.pc bin/fhcaf bin/fhcafrun; do
  [ -e "$tmp/$f" ] || fail "$f was not installed"
done
caflibs=$(pkg-config --libs firehose-caf)
step "coarray build: $MPIFC -fcoarray=lib consumer_caf.f90 $caflibs"
# shellcheck disable=SC2086
$MPIFC -fcoarray=lib tests/pkgconfig/consumer_caf.f90 -o "$work/consumer_caf" $caflibs || fail "coarray build with pkg-config failed"
run2 "$work/consumer_caf" "coarray (pkg-config)"
"$tmp/bin/fhcaf" tests/pkgconfig/consumer_caf.f90 -o "$work/consumer_fhcaf" || fail "fhcaf failed"
out=$(timeout 120 "$tmp/bin/fhcafrun" --oversubscribe -np 3 "$work/consumer_fhcaf" 2>&1) || { echo "$out" >&2; fail "fhcafrun failed"; }
grep -q '^PASS coarray consumer on 3 images' <<<"$out" || { echo "$out" >&2; fail "fhcafrun: no PASS"; }
step "coarray (fhcaf / fhcafrun): $(grep '^PASS' <<<"$out")"

# 3. Uninstall removes everything install put there.
step "make uninstall PREFIX=$tmp"
# shellcheck disable=SC2086
$MAKE_CMD uninstall PREFIX="$tmp" DESTDIR= >"$work/uninstall.log" 2>&1 || { tail -30 "$work/uninstall.log" >&2; fail "make uninstall failed"; }
left=$(find "$tmp" \( -type f -o -type l \) | sed "s|^$tmp/||")
[ -z "$left" ] || fail "make uninstall left files behind: $left"
step "uninstall removed every installed file"
echo "PASS test-pkgconfig"
