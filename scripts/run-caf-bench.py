#!/usr/bin/env python3
"""libcaf_firehose against OpenCoarrays on the same coarray program (bench/caf/bench_caf.f90).

Usage: run-caf-bench.py OUTDIR "MPIEXEC FLAGS" "MPIFC" "FIREHOSE CAF LINK FLAGS" [REPS]

Builds the source twice (gfortran -fcoarray=lib + libcaf_firehose, and + OpenCoarrays'
libcaf_openmpi as Debian's `caf` wrapper links it), then runs the two binaries
interleaved, REPS times each at 2 and 4 images, and prints the median microseconds
per operation of each and the ratio OpenCoarrays / firehose (> 1: firehose faster).
"""
import os
import shlex
import statistics
import subprocess
import sys

SRC = "bench/caf/bench_caf.f90"
OC_LIB = "/usr/lib/x86_64-linux-gnu/open-coarrays/openmpi/lib/libcaf_openmpi.a"


def build(fc, out, link):
    cmd = shlex.split(fc) + ["-fcoarray=lib", "-O2", SRC, "-o", out] + shlex.split(link)
    subprocess.run(cmd, check=True)


def run(mpiexec, np, exe):
    cmd = shlex.split(mpiexec) + ["-np", str(np), exe]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"{exe} failed at {np} images")
    res = {}
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            res[parts[0]] = float(parts[1])
    return res


def main():
    out, mpiexec, fc, fh_link = sys.argv[1:5]
    reps = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    os.makedirs(out, exist_ok=True)
    if not os.path.exists(OC_LIB):
        print(f"run-caf-bench: {OC_LIB} missing (apt-get install libcoarrays-openmpi-dev); skipped")
        return
    exes = {"firehose": os.path.join(out, "bench_caf_fh"), "opencoarrays": os.path.join(out, "bench_caf_oc")}
    build(fc, exes["firehose"], fh_link)
    build(fc, exes["opencoarrays"], OC_LIB)
    lines = []
    for np in (2, 4):
        samples = {k: {} for k in exes}
        for _ in range(reps):
            for lib, exe in exes.items():  # interleaved: the machine's load hits both alike
                for op, us in run(mpiexec, np, exe).items():
                    samples[lib].setdefault(op, []).append(us)
        lines.append(f"\n{np} images (median of {reps} interleaved runs, microseconds per operation)")
        lines.append(f"{'operation':26} {'firehose':>12} {'OpenCoarrays':>13} {'OC/firehose':>12}")
        for op in samples["firehose"]:
            f = statistics.median(samples["firehose"][op])
            o = statistics.median(samples["opencoarrays"].get(op, [float("nan")]))
            lines.append(f"{op:26} {f:12.3f} {o:13.3f} {o / f if f > 0 else float('inf'):11.1f}x")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(out, "caf.txt"), "w") as fh:
        fh.write(text + "\n")


if __name__ == "__main__":
    main()
