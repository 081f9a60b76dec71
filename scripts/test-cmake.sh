#!/usr/bin/env bash
# scripts/test-cmake.sh "<make>" "<mpiexec and flags>" MPI
# The CMake package the way a CMake project uses it:
#  - make install PREFIX=$tmp; the man pages are there and man finds them;
#    configure tests/cmake (C and Fortran; the project finds
#    its MPI first, then find_package(firehose 0.1)) against it, build and run both
#    consumers at 2 ranks, once with firehose::firehose and once with
#    firehose::firehose_static (checking with ldd which library each binary loads);
#  - relocation: make install DESTDIR=$stage PREFIX=/opt/fh, move the tree elsewhere,
#    build against the moved copy; no installed CMake file names the checkout;
#  - versions: a request for 0.<newer> or for another major is refused;
#  - a project that found another MPI (MPICH's wrappers under an Open MPI build) gets
#    the package's reason at configure time.
# Exits non-zero on the first failure, saying what failed.
set -euo pipefail
MAKE_CMD=${1:-make}
MPIEXEC=${2:-mpirun.openmpi --oversubscribe}
MPI=${3:-openmpi}
cd "$(dirname "$0")/.."
root=$PWD

command -v cmake >/dev/null || { echo "test-cmake: cmake not found (scripts/deps.sh installs it)" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/firehose-cmake.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test-cmake: FAIL: $*" >&2; exit 1; }
step() { echo "test-cmake: $*"; }
if [ "$MPI" = mpich ]; then wrappers=(mpicc.mpich mpif90.mpich); other=(mpicc.openmpi mpif90.openmpi)
else wrappers=(mpicc.openmpi mpif90.openmpi); other=(mpicc.mpich mpif90.mpich); fi
mpi_args=(-DMPI_C_COMPILER="$(command -v "${wrappers[0]}")" -DMPI_Fortran_COMPILER="$(command -v "${wrappers[1]}")")

install_to() { # log prefix [DESTDIR]
  # shellcheck disable=SC2086 # MAKE_CMD may carry flags
  if ! $MAKE_CMD install PREFIX="$2" DESTDIR="${3:-}" MPI="$MPI" >"$tmp/$1.log" 2>&1; then
    tail -30 "$tmp/$1.log" >&2; fail "make install PREFIX=$2 DESTDIR=${3:-} failed"
  fi
}
configure() { # builddir prefix extra-args...
  local b=$1 p=$2
  shift 2
  cmake -S tests/cmake -B "$b" -DCMAKE_PREFIX_PATH="$p" "$@" >"$b.log" 2>&1
}
build_run() { # builddir prefix label target
  local b=$1 p=$2 label=$3 target=$4 out
  configure "$b" "$p" "${mpi_args[@]}" -DFIREHOSE_TARGET="$target" || { tail -30 "$b.log" >&2; fail "$label: configure failed"; }
  cmake --build "$b" >>"$b.log" 2>&1 || { tail -30 "$b.log" >&2; fail "$label: build failed"; }
  for exe in consumer_c consumer_f; do
    deps=$(ldd "$b/$exe")
    if [ "$target" = firehose::firehose ]; then
      grep -q "libfirehose.so.* => $p/lib/" <<<"$deps" || { echo "$deps" >&2; fail "$label: $exe does not load libfirehose from $p/lib"; }
    elif grep -q libfirehose <<<"$deps"; then
      echo "$deps" >&2; fail "$label: $exe still needs libfirehose.so"
    fi
    # shellcheck disable=SC2086 # MPIEXEC holds a command and its flags
    out=$(timeout 120 $MPIEXEC -np 2 "$b/$exe" 2>&1) || { echo "$out" | tail -20 >&2; fail "$label: $exe failed at 2 ranks"; }
    grep -q '^PASS' <<<"$out" || { echo "$out" | tail -20 >&2; fail "$label: $exe did not print PASS"; }
    step "$label: $exe: $(grep '^PASS' <<<"$out")"
  done
}

step "make install PREFIX=$tmp/prefix"
install_to install "$tmp/prefix"
for f in lib/cmake/firehose/firehoseConfig.cmake lib/cmake/firehose/firehoseConfigVersion.cmake lib/libfirehose_fortran.a; do
  [ -f "$tmp/prefix/$f" ] || fail "$f was not installed"
done
# The installed man pages: the checked ones (make check-man renders every one), and
# man finds them by name under the prefix.
diff -r man/man3 "$tmp/prefix/share/man/man3" >/dev/null || fail "installed man3 pages differ from man/man3"
for page in fh_put:3 firehose:7 firehose_info:1; do
  MANPATH="$tmp/prefix/share/man" man -w "${page#*:}" "${page%:*}" >/dev/null 2>&1 ||
    fail "man does not find ${page%:*}(${page#*:}) under $tmp/prefix/share/man"
done
step "man pages installed: man finds fh_put(3), firehose(7), firehose_info(1)"
build_run "$tmp/shared" "$tmp/prefix" "shared" firehose::firehose
build_run "$tmp/static" "$tmp/prefix" "static" firehose::firehose_static

step "relocation: make install DESTDIR=$tmp/stage PREFIX=/opt/fh, then moved to $tmp/moved"
install_to stage /opt/fh "$tmp/stage"
mv "$tmp/stage/opt/fh" "$tmp/moved"
if grep -rl -e "$root" -e /opt/fh "$tmp/moved/lib/cmake"; then fail "an installed CMake file names the checkout or the staging prefix"; fi
build_run "$tmp/relocated" "$tmp/moved" "relocated" firehose::firehose

for v in 0.2 1.0; do
  if configure "$tmp/v$v" "$tmp/prefix" "${mpi_args[@]}" -DFIREHOSE_VERSION="$v"; then
    fail "find_package(firehose $v) accepted version $(grep -m1 -o 'firehose_VERSION "[^"]*' "$tmp/prefix/lib/cmake/firehose/firehoseConfig.cmake")"
  fi
  grep -q "compatible with requested version" "$tmp/v$v.log" || { tail -20 "$tmp/v$v.log" >&2; fail "find_package(firehose $v) failed without the version reason"; }
done
step "versions: 0.2 and 1.0 requests refused (SameMajorVersion, not newer than installed)"

if command -v "${other[0]}" >/dev/null; then
  if configure "$tmp/other" "$tmp/prefix" -DMPI_C_COMPILER="$(command -v "${other[0]}")" \
      -DMPI_Fortran_COMPILER="$(command -v "${other[1]}")"; then
    fail "a project using ${other[0]} configured against firehose built for $MPI"
  fi
  grep -q "firehose was built against $MPI" "$tmp/other.log" || { tail -20 "$tmp/other.log" >&2; fail "the MPI mismatch was refused without the package's reason"; }
  step "another MPI (${other[0]}): refused at configure time with the reason"
fi
echo "PASS test-cmake"
