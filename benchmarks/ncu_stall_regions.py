"""Warp-stall samples of an Nsight Compute SASS source page, summed over address ranges (the partitions of a
warp-specialised kernel), so that one can see which partition waits for which.

Input: ``ncu --import REPORT --page source --csv --print-source sass > FILE.csv`` (optionally gzipped).
Ranges are the low 20 bits of the SASS addresses, ``name=start-end`` in hex, read off the listing
(``--list`` prints the instructions with their execution counts and samples, to find the loops).

    python benchmarks/ncu_stall_regions.py benchmarks/results/ncu_tgw_tf32x3_h200_source_sass.csv.gz \\
        "splitter loop=f6e00-f9350" "mma loop=faa10-fb3a0" "mma retry polls=fd960-fd9b0"
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io


def load(path: str) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the source page; the first line (kernel name) is skipped."""
    raw = gzip.open(path, "rt") if path.endswith(".gz") else open(path)
    with raw as fh:
        rows = list(csv.reader(io.StringIO(fh.read())))
    return rows[1], rows[2:]


def _num(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv")
    p.add_argument("ranges", nargs="*", help="name=start-end (hex, low 20 bits of the address)")
    p.add_argument("--list", action="store_true", help="print the instructions with samples or loads/stores")
    args = p.parse_args(argv)
    hdr, data = load(args.csv)
    col = {h: i for i, h in enumerate(hdr)}
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    samples = "Warp Stall Sampling (All Samples)"
    total = sum(_num(r[col[samples]]) for r in data)
    print(f"{len(data)} instructions, {total:.0f} warp-stall samples")
    if args.list:
        for r in data:
            s, ex = _num(r[col[samples]]), _num(r[col["Instructions Executed"]])
            if s or ex:
                top = max(stalls, key=lambda h: _num(r[col[h]]))
                print(f"{int(r[col['Address']], 16) & 0xFFFFF:05x} exec {ex:>10.0f} {s / total * 100:5.1f}% "
                      f"{r[col['Source']].strip()[:60]:60s} {top[6:] if s else ''}")
    for spec in args.ranges:
        name, _, span = spec.partition("=")
        lo, hi = (int(x, 16) for x in span.split("-"))
        rows = [r for r in data if lo <= (int(r[col["Address"]], 16) & 0xFFFFF) <= hi]
        s = sum(_num(r[col[samples]]) for r in rows)
        ex = sum(_num(r[col["Instructions Executed"]]) for r in rows)
        by = sorted(((sum(_num(r[col[h]]) for r in rows), h[6:]) for h in stalls), reverse=True)
        share = ", ".join(f"{h} {v / s * 100:.0f}%" for v, h in by[:6] if v) if s else "no samples"
        print(f"{name}: {len(rows)} instructions, {ex:.0f} warp-instructions executed, "
              f"{s / total * 100:.1f}% of samples ({share})")


if __name__ == "__main__":
    main()
