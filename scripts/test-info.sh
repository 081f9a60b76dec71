#!/usr/bin/env bash
# scripts/test-info.sh FIREHOSE_INFO
# firehose_info as a site admin runs it (no mpirun):
#  - the report has every field (library and ABI, MPI built against and found,
#    conduits, kernel single copy, /dev/shm, RLIMIT_MEMLOCK, attach limit) and every
#    setting of --settings-tsv with its default and source; exit 0;
#  - a setting from the environment shows as such;
#  - a bad value exits 1 with fh_init's message; an unknown option exits 2;
#  - -c round trip: sourcing its output and running it again gives the same values,
#    every one now from the environment.
set -euo pipefail
info=${1:?usage: test-info.sh FIREHOSE_INFO}
fail() { echo "test-info: FAIL: $*" >&2; exit 1; }
step() { echo "test-info: $*"; }
clean_env=(env -i PATH="$PATH" HOME="${HOME:-/tmp}")

out=$("${clean_env[@]}" "$info") || fail "firehose_info exited $? in a clean environment"
for field in "firehose 0.1" "(ABI " "conduits compiled in:" "MPI built against:" \
             "MPI found at run time:" "kernel single copy:" "/dev/shm:" "RLIMIT_MEMLOCK:" \
             "dynamic-window attach:" "settings (name = value [default; source; scope]"; do
  grep -qF -- "$field" <<<"$out" || { echo "$out" >&2; fail "the report lacks '$field'"; }
done
tsv=$("$info" --settings-tsv)
n=0
while IFS= read -r line; do
  # (Tabs as IFS would merge an empty default with its neighbours.)
  IFS=$'\x1f' read -r name default scope help <<<"${line//$'\t'/$'\x1f'}"
  [ -n "$help" ] && [ -n "$scope" ] || fail "--settings-tsv row for $name is incomplete"
  grep -qE "^  $name +=.*\[default $(printf '%s' "$default" | sed 's/[][\.*^$/]/\\&/g'); default;" <<<"$out" ||
    { grep "$name" <<<"$out" >&2; fail "the report does not show $name at its default $default from the default"; }
  n=$((n + 1))
done <<<"$tsv"
[ "$n" -gt 20 ] || fail "only $n settings in --settings-tsv"
step "report: every field, $n settings at their defaults"

out=$("${clean_env[@]}" FH_BARRIER=tree "$info") || fail "exit $? with FH_BARRIER=tree"
grep -qE '^  FH_BARRIER +=  *tree .*; environment;' <<<"$out" || { grep FH_BARRIER <<<"$out" >&2; fail "FH_BARRIER=tree not shown as from the environment"; }
step "a setting from the environment is shown with its source"

set +e
bad=$("${clean_env[@]}" FH_HEAP_SIZE=abc "$info" 2>&1); rc=$?
set -e
[ "$rc" = 1 ] || fail "FH_HEAP_SIZE=abc: exit $rc, expected 1"
grep -q 'UNUSABLE: FH_ERR_INVALID_ARG: environment variable FH_HEAP_SIZE="abc"' <<<"$bad" ||
  { echo "$bad" | tail -5 >&2; fail "FH_HEAP_SIZE=abc: not reported as fh_init reports it"; }
set +e
"$info" --bogus >/dev/null 2>&1; rc=$?
set -e
[ "$rc" = 2 ] || fail "an unknown option exits $rc, expected 2"
step "bad value: exit 1 with fh_init's message; unknown option: exit 2"

first=$("${clean_env[@]}" "$info" -c)
again=$("${clean_env[@]}" bash -c 'set -a; eval "$1"; set +a; "$2" -c' _ "$first" "$info") || fail "sourcing -c output broke firehose_info"
[ "$first" = "$again" ] || { diff <(echo "$first") <(echo "$again") >&2; fail "-c output does not survive being sourced"; }
out=$("${clean_env[@]}" bash -c 'set -a; eval "$1"; set +a; "$2"' _ "$first" "$info") || fail "the report failed after sourcing -c output"
# (An empty value means the default: FH_STALL_ABORT='' stays "default".)
nonempty=$(grep -vc "=''$" <<<"$first" || true)
from_env=$(grep -c '; environment; ' <<<"$out" || true)
[ "$from_env" = "$nonempty" ] || fail "after sourcing -c, $from_env of the $nonempty set settings are from the environment"
step "-c: sourced and read back unchanged ($n settings)"
echo "PASS test-info"
