#!/usr/bin/env bash
# scripts/check-man.sh SETTINGS_TSV      (from the repository root; make check-man)
# The committed man pages are current and clean:
#  (a) man/man1, man/man3 and man/man7 are exactly what scripts/gen-man.py makes
#      from include/firehose.h, src/ffi/*.rs, the templates man/*.in and the
#      settings table SETTINGS_TSV (firehose_info --settings-tsv);
#  (b) every function declared in the header has a page (found here by a grep of
#      the header, independently of gen-man.py's parser);
#  (c) every page renders with `man --warnings=w` at 80 columns without a single
#      warning (in the C.UTF-8 locale, whatever the caller's).
set -euo pipefail
settings=${1:?usage: scripts/check-man.sh SETTINGS_TSV}
fail() { echo "check-man: FAIL: $*" >&2; exit 1; }
[ -f include/firehose.h ] && [ -f scripts/gen-man.py ] ||
  { echo "check-man: run it from the repository root" >&2; exit 2; }
[ -r "$settings" ] || { echo "check-man: cannot read the settings table '$settings'" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# (a) regenerate and compare
python3 scripts/gen-man.py "$tmp/man" --settings "$settings" >/dev/null ||
  fail "scripts/gen-man.py failed (above)"
if ! diff -ru -x '*.in' man "$tmp/man" >"$tmp/diff" 2>&1; then
  head -n 60 "$tmp/diff" >&2
  [ "$(wc -l <"$tmp/diff")" -le 60 ] || echo "... ($(wc -l <"$tmp/diff") lines of diff)" >&2
  fail "man pages are out of date: run 'make man' and commit them"
fi

# (b) every function of the header has a page
proto='^(static inline )?[A-Za-z_][A-Za-z0-9_ ]*[ *][a-z_][a-z0-9_]*\('
mapfile -t funcs < <(grep -E "$proto" include/firehose.h | grep -v '^typedef' |
                     sed -E 's/^[^(]*[ *]([a-z_][a-z0-9_]*)\(.*/\1/' | sort -u)
[ "${#funcs[@]}" -gt 100 ] || fail "found only ${#funcs[@]} functions in include/firehose.h"
missing=()
for f in "${funcs[@]}"; do
  [ -f "man/man3/$f.3" ] || missing+=("$f")
done
[ "${#missing[@]}" = 0 ] || fail "no man page for: ${missing[*]}"

# (c) every page renders without warnings
if locale -a 2>/dev/null | grep -qiE '^c\.utf-?8$'; then loc=C.UTF-8; else loc=C; fi
pages=(man/man1/*.1 man/man3/*.3 man/man7/*.7)
bad=0
for page in "${pages[@]}"; do
  warn=$(LC_ALL=$loc MANWIDTH=80 MANPAGER=cat man --warnings=w -l "$page" 2>&1 >/dev/null) || true
  if [ -n "$warn" ]; then
    echo "check-man: $page:" >&2
    sed 's/^/  /' <<<"$warn" >&2
    bad=$((bad + 1))
  fi
done
[ "$bad" = 0 ] || fail "$bad page(s) render with warnings (above)"
echo "man: ${#pages[@]} pages match the header and render without warnings"
