#!/usr/bin/env bash
# Install what building and testing firehose needs (Debian/Ubuntu). As root this runs
# apt-get for whatever is missing; otherwise it names the packages to install.
set -euo pipefail
need=()
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_cmd mpicc.openmpi   || need+=(libopenmpi-dev openmpi-bin)
have_cmd mpicc.mpich     || need+=(mpich libmpich-dev)
have_cmd gfortran        || need+=(gfortran)
have_cmd pkg-config      || need+=(pkg-config)
have_cmd cmake           || need+=(cmake)
have_cmd man             || need+=(man-db)
have_cmd clang           || need+=(clang)
ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || need+=(libclang-dev)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
echo "firehose: missing packages: ${need[*]}"
if [ "$(id -u)" = 0 ] && have_cmd apt-get; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o DPkg::Lock::Timeout=300 \
    libopenmpi-dev openmpi-bin mpich libmpich-dev gfortran libclang-dev clang pkg-config cmake man-db
else
  echo "firehose: please install them, e.g.:"
  echo "  sudo apt-get install -y libopenmpi-dev openmpi-bin mpich libmpich-dev gfortran libclang-dev clang pkg-config cmake man-db"
  exit 1
fi
if ! have_cmd cargo; then
  echo "firehose: cargo (Rust toolchain) not found; install it from https://rustup.rs" >&2
  exit 1
fi
