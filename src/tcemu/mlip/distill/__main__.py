"""``python -m tcemu.mlip.distill``: make the distillation data, train the distilled PET, evaluate a checkpoint."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tcemu.mlip.distill", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("data", help="build and label the structures (CHGNet teacher, seeded)")
    d.add_argument("--out", required=True, help="folder for train/val/test.extxyz.gz and manifest.json")
    d.add_argument("--tiny", action="store_true", help="a few structures (seconds to minutes): pipeline checks")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--no-cache", action="store_true", help="do not keep or reuse finished groups in OUT/cache")
    t = sub.add_parser("train", help="train the PET with mtt train inside a time budget; ship, evaluate, plot")
    t.add_argument("--data", required=True, help="folder made by the data command")
    t.add_argument("--out", required=True, help="output folder (checkpoint, metadata, logs, CSVs, plot)")
    t.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    t.add_argument("--budget-s", type=float, default=450.0, help="wall-clock seconds for the whole command")
    t.add_argument("--epochs", type=int, default=None, help="fixed epochs (default: sized from a calibration run)")
    t.add_argument("--status", default="h200", help="h200 (the shipped model) or cpu-smoke (a pipeline check)")
    t.add_argument("--eval-limit", type=int, default=None, help="evaluate at most this many structures per split")
    t.add_argument("--learning-rate", type=float, default=None, help="peak learning rate (default: the options file's)")
    t.add_argument("--relax-steps", type=int, default=400, help="step limit of the CO relaxation in the evaluation")
    t.add_argument("--resume", default=None, metavar="PREV_OUT",
                   help="continue the training of an earlier call's output folder (its restart.ckpt and options)")
    t.add_argument("--call-epochs", type=int, default=None,
                   help="stop this call after this many epochs (continue later with --resume)")
    g = sub.add_parser("plot", help="redraw training_curves.png from a train output folder")
    g.add_argument("folder")
    m = sub.add_parser("summary", help="print a pet_distilled.json as the markdown of docs/mlip.md")
    m.add_argument("json", nargs="?", default=None, help="default: the package's pet_distilled.json")
    args = p.parse_args(argv)
    if args.cmd == "data":
        from tcemu.mlip.distill.dataset import DistillDataConfig, generate

        cfg = (DistillDataConfig.tiny if args.tiny else DistillDataConfig)(seed=args.seed)
        m = generate(cfg, args.out, cache=not args.no_cache)
        print(f"{m['n_structures']} structures, {m['n_atoms']} atoms, {m['wall_s']:.0f} s -> {args.out}")
    elif args.cmd == "train":
        from pathlib import Path

        from tcemu.mlip.distill.train import TrainConfig, summary_lines, train

        cfg = TrainConfig(data=Path(args.data), out=Path(args.out), device=args.device, budget_s=args.budget_s,
                          epochs=args.epochs, status=args.status, eval_limit=args.eval_limit,
                          relax_steps=args.relax_steps, learning_rate=args.learning_rate,
                          resume=Path(args.resume) if args.resume else None, call_epochs=args.call_epochs)
        print("\n".join(summary_lines(train(cfg))))
    elif args.cmd == "plot":
        import json
        from pathlib import Path

        from tcemu.mlip.distill.evaluate import plot_training

        folder = Path(args.folder)
        summary = json.loads((folder / "pet_distilled.json").read_text())
        print(plot_training(folder / "train.csv", summary, folder / "training_curves.png"))
    elif args.cmd == "summary":
        import json
        from pathlib import Path

        from tcemu.mlip import distilled
        from tcemu.mlip.distill.evaluate import summary_markdown

        path = Path(args.json) if args.json else distilled._data_file(distilled.METADATA_FILE)
        print(summary_markdown(json.loads(path.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
