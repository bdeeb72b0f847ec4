"""Several GPUs: one ``tcemu validate`` process per GPU over a share of the cases, then one merged summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

__all__ = ["run_sharded", "merge"]


def run_sharded(args, cases: tuple[str, ...]) -> int:
    n = args.gpus
    procs = []
    for i in range(n):
        share = cases[i::n]
        if not share:
            continue
        out = os.path.join(args.out, f"gpu{i}")
        cmd = [sys.executable, "-m", "tcemu.cli.main", "validate", "--out", out, "--samples", str(int(args.samples)),
               "--seed", str(args.seed), "--workers", str(args.workers or max(1, (os.cpu_count() or 2) // n - 1)),
               "--no-progress", "--cases", *share]
        if args.families:
            cmd += ["--families", *args.families]
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(i))
        procs.append((out, subprocess.Popen(cmd, env=env)))
    rcs = [p.wait() for _, p in procs]
    merge([o for o, _ in procs], args.out)
    return max(rcs) if rcs else 1


def merge(dirs: list[str], out: str) -> dict:
    summaries = [json.load(open(os.path.join(d, "h200_validation_summary.json"))) for d in dirs]
    merged = dict(summaries[0])
    merged["cases"] = [c for s in summaries for c in s["cases"]]
    merged["total_samples"] = sum(s["total_samples"] for s in summaries)
    merged["total_mismatches"] = sum(s["total_mismatches"] for s in summaries)
    merged["seconds"] = max(s["seconds"] for s in summaries)
    merged["gpus"] = len(summaries)
    with open(os.path.join(out, "h200_validation_summary.json"), "w") as fh:
        json.dump(merged, fh, indent=1)
    for name in ("h200_validation_mismatches.npz", "h200_validation_replay.npz"):
        arrays = {}
        for d in dirs:
            p = os.path.join(d, name)
            if os.path.exists(p):
                z = np.load(p)
                arrays.update({k: z[k] for k in z.files})
        np.savez_compressed(os.path.join(out, name), **arrays)
    return merged
