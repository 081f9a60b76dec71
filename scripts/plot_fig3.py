#!/usr/bin/env python3
"""Plot seed 000 Fig. 3 from bench_firehose sweep CSVs as a hand-written SVG.

Usage: scripts/plot_fig3.py [-o docs/fig3.svg] [--table summary.md] sweep.csv [more.csv ...]

--table also writes a Markdown table of the medians: per working set, each
strategy's MB/s, its ratio to the raw-MPI baseline of the same launch (median of
the per-launch ratios) and its hit rate.

Input rows (bench_firehose sweep): strategy,working_set_bytes,bandwidth_MBps,
hit_rate,status,ratio_vs_mpi,...,M_bytes,maxvictim_bytes,... Rows with strategy
"mpi-raw" are the raw-MPI baseline (MPI_Put + flush to an MPI_Win_create window over
the whole buffer) measured in the same launch, interleaved with the strategies.
Repeated (strategy, working set) rows, e.g. from several launches, are reduced to
their median. Failed points ("failed (NO_RESOURCE)") are drawn as crosses on the x
axis.

Top panel: aggregate bandwidth (MB/s) against working set (MiB, log2 scale);
bottom panel: firehose hit rate. Vertical markers at M and M + MAXVICTIM.
Python 3 standard library only.
"""
import csv
import math
import statistics
import sys
from xml.sax.saxutils import escape

STYLE = {  # strategy: (label, colour, dash)
    "firehose": ("firehose", "#1f5fbf", ""),
    "rendezvous-unpin": ("rendezvous, unpin", "#c0392b", ""),
    "rendezvous-keep": ("rendezvous, no unpin (keep)", "#2e8b57", "6,3"),
    "pin-everything": ("pin-everything", "#e67e22", "2,3"),
    "mpi-raw": ("raw MPI_Put+flush, MPI_Win_create over all (ideal)", "#222222", "8,4"),
}
ORDER = ["mpi-raw", "pin-everything", "rendezvous-keep", "firehose", "rendezvous-unpin"]


def num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return None


def load(paths):
    rows = []
    for p in paths:
        with open(p, newline="") as f:
            for r in csv.DictReader(f):
                if r.get("strategy") in (None, "", "strategy"):
                    continue
                rows.append(r)
    return rows


def nice_step(span, target=6):
    raw = span / target
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    for m in (1, 2, 2.5, 5, 10):
        if m * mag >= raw:
            return m * mag
    return 10 * mag


def main(argv):
    out = "docs/fig3.svg"
    table = None
    paths = []
    i = 0
    while i < len(argv):
        if argv[i] == "-o":
            out = argv[i + 1]
            i += 2
        elif argv[i] == "--table":
            table = argv[i + 1]
            i += 2
        else:
            paths.append(argv[i])
            i += 1
    if not paths:
        sys.exit(__doc__)
    rows = load(paths)
    if not rows:
        sys.exit("plot_fig3: no rows in " + ", ".join(paths))

    ok = {}      # strategy -> ws -> [MB/s]
    hit = {}     # strategy -> ws -> [hit rate]
    ratio = {}   # strategy -> ws -> [ratio to the raw MPI of its launch]
    failed = {}  # strategy -> smallest failed ws
    M = V = None
    ranks = None
    methods = {r.get("method") for r in rows if r.get("method")}
    for r in rows:
        s, ws = r["strategy"], num(r["working_set_bytes"])
        if ws is None:
            continue
        if num(r.get("M_bytes")):
            M = num(r["M_bytes"])
        if r.get("maxvictim_bytes") not in (None, ""):
            V = num(r["maxvictim_bytes"])
        if r.get("ranks"):
            ranks = r["ranks"]
        if r["status"].startswith("failed"):
            failed[s] = min(ws, failed.get(s, ws))
            continue
        bw = num(r["bandwidth_MBps"])
        if bw is None:
            continue
        ok.setdefault(s, {}).setdefault(ws, []).append(bw)
        rt = num(r.get("ratio_vs_mpi"))
        if rt is not None and s != "mpi-raw":
            ratio.setdefault(s, {}).setdefault(ws, []).append(rt)
        h = num(r.get("hit_rate"))
        if h is not None and s != "mpi-raw":
            hit.setdefault(s, {}).setdefault(ws, []).append(h)

    series = {s: sorted((ws, statistics.median(v)) for ws, v in d.items()) for s, d in ok.items()}
    hits = {s: sorted((ws, statistics.median(v)) for ws, v in d.items()) for s, d in hit.items()}
    all_ws = [ws for d in series.values() for ws, _ in d] + list(failed.values())
    xmin, xmax = min(all_ws), max(all_ws)
    lx0, lx1 = math.floor(math.log2(xmin / 2**20)), math.ceil(math.log2(xmax / 2**20))
    if lx1 <= lx0:
        lx1 = lx0 + 1
    ymax = max([bw for d in series.values() for _, bw in d] + [1.0])
    ystep = nice_step(ymax * 1.05)
    ytop = ystep * math.ceil(ymax * 1.05 / ystep)

    W, H = 860, 720
    L, R = 90, 30
    T1, B1 = 60, 400   # bandwidth panel (top, bottom)
    T2, B2 = 440, 560  # hit-rate panel

    def X(ws):
        return L + (math.log2(ws / 2**20) - lx0) / (lx1 - lx0) * (W - L - R)

    def Y(bw):
        return B1 - bw / ytop * (B1 - T1)

    def Yh(h):
        return B2 - h * (B2 - T2)

    o = []
    a = o.append
    a('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
      'font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">' % (W, H, W, H))
    a('<rect width="100%" height="100%" fill="white"/>')
    title = "Random 64 KiB puts into unregistered memory (seed 000 Fig. 3)"
    sub = []
    if M:
        sub.append("M = %g MiB" % (M / 2**20))
    if V is not None:
        sub.append("MAXVICTIM = %g MiB" % (V / 2**20))
    if ranks:
        sub.append("%s ranks (rank 0 = target)" % ranks)
    a('<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>' % (L, escape(title)))
    a('<text x="%d" y="42" fill="#555">%s</text>' % (L, escape(", ".join(sub))))

    # Axes and grid, both panels.
    for (top, bot) in ((T1, B1), (T2, B2)):
        a('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#444"/>' % (L, top, W - L - R, bot - top))
        for e in range(lx0, lx1 + 1):
            x = X(2**e * 2**20)
            a('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>' % (x, top, x, bot))
            lab = ("%g" % 2**e) if e >= 0 else "1/%d" % 2**-e
            a('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (x, bot + 16, lab))
    y = 0.0
    while y <= ytop + 1e-9:
        a('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (L, Y(y), W - R, Y(y)))
        a('<text x="%d" y="%.1f" text-anchor="end">%s</text>' % (L - 6, Y(y) + 4, "{:,.0f}".format(y)))
        y += ystep
    for h in (0, 0.25, 0.5, 0.75, 1.0):
        a('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (L, Yh(h), W - R, Yh(h)))
        a('<text x="%d" y="%.1f" text-anchor="end">%d%%</text>' % (L - 6, Yh(h) + 4, round(h * 100)))
    a('<text x="%d" y="%d" text-anchor="middle">working set (MiB, log2 scale)</text>' % ((L + W - R) // 2, B2 + 36))
    a('<text transform="translate(22,%d) rotate(-90)" text-anchor="middle">bandwidth at rank 0 (MB/s)</text>' % ((T1 + B1) // 2))
    a('<text transform="translate(22,%d) rotate(-90)" text-anchor="middle">hit rate</text>' % ((T2 + B2) // 2))

    # M and M + MAXVICTIM markers.
    marks = []
    if M:
        marks.append((M, "M"))
        if V:
            marks.append((M + V, "M+MAXVICTIM"))
    for k, (ws, lab) in enumerate(marks):
        x = X(ws)
        for (top, bot) in ((T1, B1), (T2, B2)):
            a('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#7d3c98" stroke-width="1.2" stroke-dasharray="4,3"/>'
              % (x, top, x, bot))
        a('<text x="%.1f" y="%d" fill="#7d3c98" text-anchor="%s">%s</text>'
          % (x + (4 if k else -4), T1 + 14, "start" if k else "end", lab))

    # Lines.
    def poly(pts, colour, dash, width=2):
        d = ' stroke-dasharray="%s"' % dash if dash else ""
        a('<polyline fill="none" stroke="%s" stroke-width="%g"%s points="%s"/>'
          % (colour, width, d, " ".join("%.1f,%.1f" % p for p in pts)))

    strategies = [s for s in ORDER if s in series or s in failed] + \
        sorted(s for s in set(series) | set(failed) if s not in ORDER)
    for s in strategies:
        label, colour, dash = STYLE.get(s, (s, "#888888", ""))
        pts = series.get(s, [])
        if pts:
            poly([(X(ws), Y(bw)) for ws, bw in pts], colour, dash)
            for ws, bw in pts:
                a('<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>' % (X(ws), Y(bw), colour))
        if s in failed:
            x, yb = X(failed[s]), B1 - 8
            a('<path d="M%.1f,%.1f l8,8 m0,-8 l-8,8" stroke="%s" stroke-width="2.5"/>' % (x - 4, yb - 4, colour))
            a('<text x="%.1f" y="%.1f" fill="%s" font-size="10" text-anchor="middle">NO_RESOURCE</text>'
              % (x, yb - 10 - 11 * (strategies.index(s) % 3), colour))
        hp = hits.get(s, [])
        if hp:
            poly([(X(ws), Yh(h)) for ws, h in hp], colour, dash, 1.5)
            for ws, h in hp:
                a('<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>' % (X(ws), Yh(h), colour))

    # Legend, below the panels, two columns.
    n = len(strategies)
    rowsn = (n + 1) // 2
    ly = B2 + 62
    a('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#aaa"/>' % (L, ly - 16, W - L - R, 18 * rowsn + 26))
    for k, s in enumerate(strategies):
        label, colour, dash = STYLE.get(s, (s, "#888888", ""))
        lx = L + 10 + (k // rowsn) * ((W - L - R) // 2)
        yy = ly + 18 * (k % rowsn)
        d = ' stroke-dasharray="%s"' % dash if dash else ""
        a('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>' % (lx, yy - 4, lx + 28, yy - 4, colour, d))
        extra = " (refused from %g MiB)" % (failed[s] / 2**20) if s in failed else ""
        a('<text x="%d" y="%d">%s</text>' % (lx + 36, yy, escape(label + extra)))
    how = {"median-batch": "MB/s = 64 KiB / median per-put time",
           "bytes/time": "MB/s = bytes / time, summed over the initiators"}
    how = "; ".join(how.get(m, m) for m in sorted(methods)) or "MB/s = bytes / time"
    a('<text x="%d" y="%d" fill="#555" font-size="10">cross on the x axis = first working set refused '
      '(FH_ERR_NO_RESOURCE); %s; 10^6 B/s</text>' % (L + 10, ly + 18 * rowsn, escape(how)))
    a("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(o) + "\n")
    if table:
        write_table(table, strategies, ok, ratio, hit, failed, M, V)
    print("plot_fig3: wrote %s (%d strategies, %d rows)" % (out, len(strategies), len(rows)))


def write_table(path, strategies, ok, ratio, hit, failed, M, V):
    """Markdown: one row per working set; per strategy "MB/s (ratio) hit%"."""
    cols = [s for s in strategies if s != "mpi-raw"]
    all_ws = sorted({ws for d in ok.values() for ws in d} | set(failed.values()))
    runs = max([len(v) for s, d in ok.items() if s != "mpi-raw" for v in d.values()] + [0])
    lines = ["| working set | raw MPI MB/s | " + " | ".join(cols) + " |",
             "|---|---|" + "---|" * len(cols)]
    for ws in all_ws:
        mark = ""
        if M and abs(ws - M) < 1:
            mark = " (= M)"
        elif M and V and abs(ws - M - V) < 1:
            mark = " (= M+MAXVICTIM)"
        cells = ["%g MiB%s" % (ws / 2**20, mark)]
        base = ok.get("mpi-raw", {}).get(ws)
        cells.append("{:,.0f}".format(statistics.median(base)) if base else "")
        for s in cols:
            if s in failed and ws >= failed[s]:
                cells.append("failed (NO_RESOURCE)" if ws == failed[s] else "-")
                continue
            v = ok.get(s, {}).get(ws)
            if not v:
                cells.append("")
                continue
            c = "{:,.0f}".format(statistics.median(v))
            rt = ratio.get(s, {}).get(ws)
            if rt:
                c += " (%.2f)" % statistics.median(rt)
            h = hit.get(s, {}).get(ws)
            if h:
                c += " %.2f%%" % (100 * statistics.median(h))
            cells.append(c)
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Cells: aggregate MB/s at rank 0 (median over %d launch(es)), (ratio to raw MPI in the same "
                 "launch), hit rate." % runs)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
