"""The consolidated summary of benchmarks/mmasim_diff.py's stored runs (``--summary``): per MMA-Sim case its latest
stored run of each seed (runs of different seeds draw disjoint samples and add up), dot products generated and
outputs compared, agreements per variant, each class of disagreement with a link to its first reproducer and the
side the hardware data or documents support, and the count of unexplained disagreements, computed from the CSVs
with the rules of benchmarks/_mmasim_report.py."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from _mmasim_report import CAUSES, FINDINGS, explain, explanation_sections, failure_finding

_REPRO = re.compile(r"^- (?P<case>.+?) variant=(?P<variant>\w+) \[(?P<cls>.*)\] x\d+: ")
_SHAPE = (re.compile(r"\.m(\d+)n(\d+)k\d+"), re.compile(r"_(\d+)x(\d+)x\d+"))
_VARIANTS = ("mmasim", "measured")


def _tile(case: str) -> int:
    """Outputs per MMA-Sim call (one tile, m x n) from the case's name."""
    for pattern in _SHAPE:
        m = pattern.search(case)
        if m:
            return int(m.group(1)) * int(m.group(2))
    raise ValueError(f"no tile shape in {case!r}")


def load_run(csv_path: str) -> dict[tuple[str, str], dict]:
    """Per (MMA-Sim case, seed) of one stored run: status, preset, provenance and per variant generated, compared,
    agree, MMA-Sim errors and classes {class: count}. Runs before the ``generated``/``compared`` metrics stored
    ``samples`` (the outputs compared; their generated count adds the tiles MMA-Sim raised on) and no seed (0)."""
    from tcemu._results import read_wide

    runs: dict[tuple[str, str], dict] = {}
    for row in read_wide(csv_path):
        if row["benchmark"] != "mmasim_diff":  # (mmasim_diff_schemes.csv holds another check)
            continue
        case, seed = row["mmasim"], row.get("seed", "0")
        entry = runs.setdefault((case, seed), {"case": case, "seed": seed, "path": Path(csv_path),
                                               "date": row["date"], "commit": row["commit"],
                                               "status": row.get("status", "compared"), "variants": {}})
        if "status" in row:
            continue
        errors = int(row["mmasim_errors"])
        compared = int(row.get("compared", row.get("samples", 0)))
        generated = int(row["generated"]) if "generated" in row else compared + errors * _tile(case)
        classes = {}
        for item in filter(None, row.get("classes", "").split(" | ")):
            cls, count = item.rsplit(": ", 1)
            classes[cls] = int(count)
        entry["variants"][row["method"].removeprefix("variant=")] = {
            "generated": generated, "compared": compared, "agree": int(row["agree"]), "errors": errors,
            "classes": classes}
    return runs


def latest_runs(csv_paths: list[str]) -> dict[str, list[dict]]:
    """Per case its latest stored run of each seed (by date; on one date the one with more outputs compared), or
    its latest status where that says it is not modelled."""
    best: dict[tuple[str, str], dict] = {}
    for path in csv_paths:
        for key, entry in load_run(path).items():
            size = max((v["compared"] for v in entry["variants"].values()), default=0)
            if key not in best or (entry["date"], size) > (best[key]["date"], best[key]["_size"]):
                best[key] = {**entry, "_size": size}
    out: dict[str, list[dict]] = defaultdict(list)
    for (case, _), entry in sorted(best.items()):
        out[case].append(entry)
    for case, entries in out.items():
        newest = max(entries, key=lambda e: e["date"])
        out[case] = [newest] if newest["status"] != "compared" else [e for e in entries if e["status"] == "compared"]
    return dict(out)


def _repro_lines(md_path: Path) -> dict[tuple[str, str, str], int]:
    """(case, variant, class) -> the line of its first reproducer in a run's markdown."""
    out: dict[tuple[str, str, str], int] = {}
    if md_path.exists():
        for i, line in enumerate(md_path.read_text().splitlines(), 1):
            m = _REPRO.match(line)
            if m:
                out.setdefault((m["case"], m["variant"], m["cls"]), i)
    return out


def _combined(entries: list[dict]) -> dict[str, dict]:
    """Per variant the sums over a case's runs (disjoint seeds)."""
    out = {}
    for v in _VARIANTS:
        parts = [e["variants"][v] for e in entries]
        classes: dict[str, int] = defaultdict(int)
        for p in parts:
            for cls, n in p["classes"].items():
                classes[cls] += n
        out[v] = {k: sum(p[k] for p in parts) for k in ("generated", "compared", "agree", "errors")}
        out[v]["classes"] = dict(classes)
    return out


def summarize(csv_paths: list[str], out_md: str) -> dict[str, int]:
    """Write the consolidated summary of ``csv_paths`` to ``out_md``; returns its counts (``unexplained``: the
    disagreements no rule explains)."""
    runs = latest_runs(csv_paths)
    compared = {c: e for c, e in sorted(runs.items()) if e[0]["status"] == "compared"}
    totals: dict[str, int] = defaultdict(int)
    by_reason: dict[str, list[str]] = defaultdict(list)
    sides: dict[str, str] = {}
    unexplained: list[str] = []
    repros: dict[Path, dict] = {}
    rows, failures = [], []
    for case, entries in compared.items():
        comb = _combined(entries)
        names = " + ".join(f"{e['path'].stem}" + (f" (seed {e['seed']})" if e["seed"] != "0" else "")
                           for e in entries)
        ms, me = comb["mmasim"], comb["measured"]
        rows.append(f"| {case} | {names} | {ms['generated']} | {ms['compared']} | {ms['agree']} | {me['agree']} | "
                    f"{ms['errors']} |")
        totals["ran"] += ms["compared"] > 0
        if ms["errors"]:
            failures.append((case, ms["errors"], names))
        for v, data in comb.items():
            totals[f"compared_{v}"] += data["compared"]
            totals[f"disagree_{v}"] += data["compared"] - data["agree"]
            totals[f"clean_{v}"] += data["agree"] == data["compared"] and data["compared"] > 0
            for cls, count in sorted(data["classes"].items()):
                item = f"- {case} variant={v} [{cls}] x{count}: {_reference(case, v, cls, entries, repros)}"
                why = explain(case, v, cls)
                if why is None:
                    totals["unexplained"] += count
                    unexplained.append(item)
                else:
                    totals["explained"] += count
                    by_reason[why[0]].append(item)
                    sides[why[0]] = why[1]
    totals["unexplained_failures"] = sum(failure_finding(c) is None for c, _, _ in failures)
    lines = _header(csv_paths, runs, compared, totals)
    lines += ["| case | stored runs | generated | compared | agree (mmasim) | agree (measured) | MMA-Sim errors "
              "(tiles) |", "|---|---|---:|---:|---:|---:|---:|", *rows]
    lines.append("\n## Disagreement classes, what decides them, and the side the records support\n")
    findings = {" and ".join(k): v for k, v in FINDINGS.items()}
    for reason, items in sorted(by_reason.items()):
        text = CAUSES.get(reason) or findings.get(reason, "")
        lines += [f"### {reason}\n", f"{text}.\n", f"Supported: {sides[reason]}.\n", *items, ""]
    lines.append("## Unexplained disagreements\n")
    lines += unexplained or ["None: every class above matches a rule of `EXPLAINED` in benchmarks/_mmasim_report.py."]
    lines.append("\n## MMA-Sim failures (tiles it raised on: generated, not compared)\n")
    for case, tiles, names in failures:
        key = failure_finding(case)
        lines.append(f"- {case}: {tiles} tiles ({names}); "
                     + (f"Findings, `{key}`: {findings[key]}" if key else "unexplained"))
    lines.append("\n## Not modelled by tcemu\n")
    lines += [f"- {c}: {e[0]['status']}" for c, e in sorted(runs.items()) if e[0]["status"] != "compared"]
    Path(out_md).write_text("\n".join(lines) + "\n")
    return dict(totals)


def _reference(case: str, variant: str, cls: str, entries: list[dict], cache: dict) -> str:
    """A link to the first reproducer of a class in the markdown of the case's runs."""
    for e in entries:
        md = e["path"].with_suffix(".md")
        line = cache.setdefault(md, _repro_lines(md)).get((case, variant, cls))
        if line:
            return f"[{md.name}#L{line}]({md.name}#L{line})"
    return "no reproducer line found"


def _header(csv_paths, runs, compared, totals) -> list[str]:
    shown = sorted({(e["path"].name, e["date"][:10], e["commit"]) for es in compared.values() for e in es})
    n_runs = len(compared)
    return ["# tcemu vs MMA-Sim @ c785138: summary of the stored runs\n",
            "Written by `python benchmarks/mmasim_diff.py --summary` from "
            f"{', '.join(Path(p).name for p in csv_paths)}: per case its latest stored run of each seed (runs of "
            "different seeds draw disjoint samples and are added). Runs shown: "
            + "; ".join(f"{f} ({d}, tcemu {c})" for f, d, c in shown) + ".\n",
            f"{len(runs)} MMA-Sim cases: {n_runs} modelled by tcemu, {len(runs) - n_runs} not; MMA-Sim ran on "
            f"{totals['ran']} of the {n_runs} (the others raise on every input). Outputs compared: "
            f"{totals['compared_mmasim']}. Every output bit agrees in {totals['clean_mmasim']} of {totals['ran']} "
            f"cases with `variant=\"mmasim\"` ({totals['disagree_mmasim']} outputs differ) and in "
            f"{totals['clean_measured']} with the default ({totals['disagree_measured']} differ). Of the "
            f"{totals['explained'] + totals['unexplained']} disagreements (both variants), {totals['explained']} are "
            f"in explained classes; **unexplained: {totals['unexplained']}**; MMA-Sim failures without a finding: "
            f"{totals['unexplained_failures']}.\n"]


def rewrite_explanations(md_path: str, csv_paths: list[str]) -> None:
    """Replace the Findings and causes of a stored run's markdown with the current text, and say which of its
    cases a later stored run of ``csv_paths`` supersedes (its tables and reproducers, the data, stay)."""
    path = Path(md_path)
    text = path.read_text()
    head, sep, rest = text.partition("\n## Findings\n")
    if not sep:
        raise ValueError(f"{md_path}: no Findings section")
    tail = rest[rest.index("\n## Not modelled by tcemu\n"):]
    cases = [c for c in re.findall(r"^\| ([^|]+?) \| ", head, re.M) if c != "case"]  # the table's rows
    runs = latest_runs(csv_paths)
    moved = [c for c in cases if all(e["path"].stem != path.stem for e in runs.get(c, []))]
    later = sorted({e["path"].stem for c in moved for e in runs.get(c, [])})
    lines = explanation_sections(cases)
    if moved:
        lines[1:1] = [f"- {len(moved)} of this run's cases have a later stored run ({', '.join(later)}), which the "
                      "summary (mmasim_diff_summary.md) shows instead; this file's rows for them are tcemu's answers "
                      "at its commit: " + ", ".join(moved)]
    path.write_text(head.rstrip("\n") + "\n" + "\n".join(lines) + "\n" + tail)
