#!/usr/bin/env python3
"""The peer comparison of issue 19 (make bench-peer, part of make bench): the same
operations through firehose (bench/peer/peer_fh.c, under mpirun) and through Open
MPI's OpenSHMEM (bench/peer/peer_shmem.c, under oshrun), run interleaved RUNS times
at 2, 4 and 8 ranks; medians of the microseconds each prints, and the ratio
firehose / OpenSHMEM (below 1: firehose faster). Writes <out>/peer.txt.

Usage: run-peer-bench.py <out> <fh binary> <shmem binary or ""> <mpiexec> <runs>
The OpenSHMEM program exits without shmem_finalize (it crashes here), so its exit
status is not checked, only that it printed every operation."""
import shlex
import statistics
import subprocess
import sys

OPS = ["barrier", "broadcast_8B", "sum_8B", "put_8B_quiet", "fetch_add_on_0", "lock_contended"]


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    got = {}
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in OPS:
            got[parts[0]] = float(parts[1])
    if set(got) != set(OPS):
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"{' '.join(cmd)}: printed {sorted(got)}, not every operation")
    return got


def main():
    out, fh, shmem, mpiexec, runs = sys.argv[1:6]
    lines = []
    if not shmem:
        lines.append("OpenSHMEM (oshcc) not installed: firehose's times only")
    for np in (2, 4, 8):
        res = {"fh": {o: [] for o in OPS}, "shmem": {o: [] for o in OPS}}
        for _ in range(int(runs)):
            for o, v in run(shlex.split(mpiexec) + ["-np", str(np), fh]).items():
                res["fh"][o].append(v)
            if shmem:
                osh = ["oshrun", "--oversubscribe", "-np", str(np), shmem]
                for o, v in run(osh).items():
                    res["shmem"][o].append(v)
        lines.append(f"\n{np} ranks (median of {runs} interleaved runs, microseconds per operation)")
        lines.append(f"{'operation':<18} {'firehose':>10} {'OpenSHMEM':>10} {'fh/shmem':>9}")
        for o in OPS:
            f = statistics.median(res["fh"][o])
            if shmem:
                s = statistics.median(res["shmem"][o])
                lines.append(f"{o:<18} {f:>10.3f} {s:>10.3f} {f / s:>8.2f}x")
            else:
                lines.append(f"{o:<18} {f:>10.3f}")
    text = "\n".join(lines) + "\n"
    print(text)
    with open(f"{out}/peer.txt", "w") as fp:
        fp.write(text)


if __name__ == "__main__":
    main()
