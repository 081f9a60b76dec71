#!/usr/bin/env bash
# Every function declared in include/firehose.h must have a bind(C) interface in
# include/firehose.f90 (the static inline fh_init is C-only).
set -euo pipefail
missing=0
for f in $(grep -oE '^[a-z_ ]+\*? *(fh|rpipe)_[a-z0-9_]+\(' include/firehose.h | grep -oE '(fh|rpipe)_[a-z0-9_]+' | sort -u); do
  [ "$f" = fh_init ] && continue
  if ! grep -qi "bind(C, *name=\"$f\")" include/firehose.f90; then
    echo "include/firehose.f90: no bind(C) interface for $f" >&2
    missing=1
  fi
done
[ "$missing" = 0 ] && echo "fortran: every header function has an interface"
exit "$missing"
