"""One GPU session, start to finish: build, smoke checks, probe, inference, validation (preset and measured).

    python -m tcemu.numerics.hardware.campaign --out OUT --samples 1e7

Steps (each logged, each failure reported without stopping the next step):

1. build the kernels once, read the device (GPU name, driver, CUDA, nvcc, torch versions);
2. smoke: SASS opcodes of every kernel, fragment layouts on small integers  -> ``h200_smoke.json``;
3. probe: every vector family on every case                                -> ``h200_probe_raw.npz``;
4. inference on all CPU cores, preset comparison                           -> ``h200-probe.json``, ``h200-probe.md``;
5. a "measured" model per case: the preset with the probe's answers where they differ (``measured_params``);
6. validation of the preset and, in the same pass, of the measured model   -> ``h200_validation_*``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from .measured import measured_params

__all__ = ["measured_params", "main"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--samples", type=float, default=1e7)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--skip-validation", action="store_true")
    ap.add_argument("--fake", default=None, metavar="JSON",
                    help="CPU test: the 'hardware' is the model with these preset overrides, e.g. '{}'")
    ap.add_argument("--cases", nargs="*", default=None)
    ap.add_argument("--skip-probe", action="store_true",
                    help="validate only; the corrected model comes from data/h200_measured.json")
    ap.add_argument("--skip-smoke", action="store_true")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    logf = open(os.path.join(args.out, "campaign.log"), "a")

    def log(*a):
        msg = " ".join(str(x) for x in a)
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    def step(name, fn):
        t0 = time.perf_counter()
        try:
            r = fn()
            log(f"[{name}] done in {time.perf_counter() - t0:.1f} s")
            return r
        except Exception:  # noqa: BLE001 - every step is attempted; failures go to the log
            log(f"[{name}] FAILED after {time.perf_counter() - t0:.1f} s\n{traceback.format_exc()}")
            return None

    from .cases import CASES, VALIDATION_CASES
    from .probe import collect, probe_report, save_raw
    from .report import probe_markdown, validation_markdown
    from .runner import Runner
    from .smoke import check_layouts
    from .validate import ValidationConfig, run_validation

    if args.fake is not None:
        from .fake import ModelRunner

        runner = ModelRunner(json.loads(args.fake))
        runner.check_sass = lambda: {c.name: {"ok": True, "opcodes": []} for c in CASES}
    else:
        runner = step("build", lambda: Runner(verbose=True))
    if runner is None:
        return 2
    device = step("device", lambda: runner.device) or {}
    log(json.dumps(device))

    def smoke():
        sass = runner.check_sass()
        lay = check_layouts(runner)
        with open(os.path.join(args.out, "h200_smoke.json"), "w") as fh:
            json.dump({"device": device, "sass": sass, "layouts": lay}, fh, indent=1)
        for n in sass:
            log(f"  {n:<22} sass {'ok' if sass[n]['ok'] else 'BAD'} {','.join(sass[n]['opcodes'])[:80]} "
                f"layout {'ok' if lay[n]['ok'] else 'BAD'}")

    if not args.skip_smoke:
        step("smoke", smoke)
    from .cases import get_case

    cases = [get_case(n) for n in args.cases] if args.cases else list(CASES)
    raw = None if args.skip_probe else step("probe-collect", lambda: collect(runner, cases, log=log))
    if raw is not None:
        step("probe-save", lambda: save_raw(os.path.join(args.out, "h200_probe_raw.npz"), raw, device))
    rep = None
    if raw is not None:
        rep = step("probe-infer", lambda: probe_report(raw, device, log=log, workers=os.cpu_count() or 1))
    if rep is not None:
        def write_probe():
            from .report import compact_probe

            with open(os.path.join(args.out, "h200-probe.json"), "w") as fh:
                json.dump(compact_probe(rep, measured_params(rep)[1]), fh, indent=1, default=str)
            with open(os.path.join(args.out, "h200-probe.md"), "w") as fh:
                fh.write(probe_markdown(rep))

        step("probe-write", write_probe)
    variants = {}
    if rep is not None:
        mp = step("measured-params", lambda: measured_params(rep))
        if mp is not None:
            variants["measured"] = mp[0]
            log("measured model changes: " + json.dumps(mp[1]))
            with open(os.path.join(args.out, "campaign.log"), "a") as fh:
                fh.write(json.dumps({"measured_changes": mp[1]}) + "\n")
    if args.skip_probe:
        from .measured import measured_table

        variants["measured"] = step("measured-params", measured_table) or {}
    if not args.skip_validation:
        vcases = tuple(c.name for c in VALIDATION_CASES if c in cases)
        cfg = ValidationConfig(cases=vcases, samples=int(args.samples),
                               workers=args.workers, progress=True)
        summary = step("validation", lambda: run_validation(runner, cfg, args.out, log=log, variants=variants))
        if summary is not None:
            log(validation_markdown(summary))
    logf.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
