#!/usr/bin/env bash
# Check include/firehose.f90 against include/firehose.h by signature: every function
# the header declares (the static inline fh_init is C-only) has a bind(C) interface
# with the same argument count, kinds, value/by-reference passing and result; the
# callback interfaces and bind(C) types are checked too. The mapping table and the
# rules are in scripts/check-fortran.py.
# Usage: scripts/check-fortran.sh [HEADER [F90]]   (defaults: include/firehose.{h,f90})
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# First prove the checker still catches broken interfaces (a wrong kind, a missing
# value, a missing argument, ...), then check the real module.
python3 "$here/check-fortran.py" --self-test "$@"
exec python3 "$here/check-fortran.py" "$@"
