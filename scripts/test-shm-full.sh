#!/usr/bin/env bash
# A node whose /dev/shm is (almost) full (issue 14, messages): fh_init must say how
# much the node-shared heaps need and how much is free, and, when MPI's own shared
# memory transport cannot create a window either, that /dev/shm is the reason. Runs
# the job in a private mount namespace with a 1 MiB tmpfs on /dev/shm (needs root and
# unshare; otherwise it says so and passes).
# Usage: test-shm-full.sh BINARY "MPIEXEC..."
set -u
bin=$1; mpiexec=$2
if ! unshare -m true 2>/dev/null; then
  echo "test-shm-full: skipped (needs root and unshare -m for a private /dev/shm)"
  exit 0
fi
out=$(timeout 60 unshare -m sh -c 'mount -t tmpfs -o size=1M tmpfs /dev/shm && exec "$@"' sh \
      $mpiexec -np 2 "$bin" 2>&1)
ok=1
for want in "node-shared heaps need" "/dev/shm has only"; do
  if ! echo "$out" | grep -q "$want"; then
    echo "FAIL test-shm-full: no '$want' in the output:"; echo "$out" | tail -20 | sed 's/^/     | /'
    ok=0
  fi
done
[ $ok = 1 ] && echo "ok   test-shm-full: /dev/shm of 1 MiB is named in fh_init's messages"
[ $ok = 1 ]
