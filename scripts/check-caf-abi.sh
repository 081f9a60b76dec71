#!/bin/sh
# Every _gfortran_caf_* entry point the installed gfortran can emit must be exported by
# libcaf_firehose. Usage: check-caf-abi.sh LIBCAF_SO [GFORTRAN]
set -eu
lib=$1
fc=${2:-gfortran}
f951=$($fc -print-prog-name=f951)
want=$(strings "$f951" | grep -o '_gfortran_caf_[a-z_]*' | sort -u)
have=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep '^_gfortran_caf_' | sort -u)
missing=$(printf '%s\n' "$want" | while read -r s; do
  printf '%s\n' "$have" | grep -qx "$s" || printf '%s\n' "$s"
done)
n=$(printf '%s\n' "$want" | wc -l)
if [ -n "$missing" ]; then
  echo "libcaf_firehose lacks entry points $($fc -dumpversion) can emit:"
  printf '  %s\n' $missing
  exit 1
fi
echo "caf ABI: all $n entry points gfortran $($fc -dumpversion) can emit are exported"
