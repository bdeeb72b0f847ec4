"""Continue a training of the distilled PET over several calls, through metatrain's own restart.

Each call of :func:`tcemu.mlip.distill.train.train` leaves metatrain's full checkpoint of where it stopped (model,
optimizer and scheduler state, epoch, best model so far) as ``restart.ckpt`` in its output folder. A later call
with ``resume=that folder`` runs ``mtt train options.yaml --restart restart.ckpt`` with the previous call's
``options.yaml``: metatrain rebuilds the cosine schedule from ``num_epochs`` (the chain's total, unchanged), loads
the scheduler's step count and the optimizer state, and goes on at the epoch after the checkpoint's, so the chain
follows the schedule of one uninterrupted run, but for the first batch after each restart (torch's ``LambdaLR``
takes its first step before its state is loaded: that batch gets the schedule's first learning rate, 0 with the
warm-up). Its batches are the same too (metatrain orders them per epoch from the epoch number).
"""

from __future__ import annotations

import csv
import json
import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["RESTART_FILE", "Previous", "checkpoint_complete", "checkpoint_epochs", "merge_train_csv", "previous"]

#: metatrain's checkpoint of where a call stopped, in its output folder (with optimizer state: not shipped).
RESTART_FILE = "restart.ckpt"


@dataclass
class Previous:
    """What a continued call takes from the previous call's output folder (copied into this call's work folder)."""

    folder: Path
    restart: Path  # the copy of its restart.ckpt
    options: Path  # its options.yaml: the template of the continued run
    epochs_total: int  # num_epochs of its options: the chain's total
    learning_rate: float
    epochs_done: int  # epochs in its restart checkpoint
    train_csv: Path | None
    calls: list[dict] = field(default_factory=list)  # the chain so far (its pet_distilled.json)

    def check(self, epochs: int | None, learning_rate: float | None) -> None:
        """Refuse a total or a learning rate other than the chain's (the schedule is built on them) and a
        finished chain."""
        if epochs not in (None, self.epochs_total) or learning_rate not in (None, self.learning_rate):
            raise ValueError(f"{self.folder} trains {self.epochs_total} epochs at a peak learning rate of "
                             f"{self.learning_rate}: a continued run keeps both (its schedule is built on them)")
        if self.epochs_done >= self.epochs_total:
            raise ValueError(f"{self.folder} has trained all its {self.epochs_total} epochs: nothing to continue")


def checkpoint_epochs(path: Path) -> int:
    """Epochs a metatrain checkpoint has done (its ``epoch`` is the 0-based index of the last one)."""
    import torch

    epoch = torch.load(path, map_location="cpu", weights_only=False, mmap=True).get("epoch")
    return 0 if epoch is None else int(epoch) + 1


def checkpoint_complete(path: Path) -> bool:
    """Whether ``torch.save`` has finished ``path``: its zip directory, written last, is there."""
    try:
        with zipfile.ZipFile(path):
            return True
    except (OSError, zipfile.BadZipFile):
        return False


def previous(folder: Path, work: Path) -> Previous:
    """Read the previous call's output folder; its restart checkpoint, options and curves are copied to ``work``
    first, so that a call may continue into the same folder."""
    from omegaconf import OmegaConf

    folder = Path(folder)
    for name in (RESTART_FILE, "options.yaml"):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"{folder / name} not found: --resume takes the output folder of an earlier "
                                    f"`python -m tcemu.mlip.distill train`")
    restart = Path(shutil.copy(folder / RESTART_FILE, work / "previous_restart.ckpt"))
    options = Path(shutil.copy(folder / "options.yaml", work / "previous_options.yaml"))
    train_csv = folder / "train.csv"
    train_csv = Path(shutil.copy(train_csv, work / "previous_train.csv")) if train_csv.is_file() else None
    training = OmegaConf.to_container(OmegaConf.load(options))["architecture"]["training"]
    summary = folder / "pet_distilled.json"
    calls = json.loads(summary.read_text())["training"].get("chain", {}).get("calls", []) if summary.is_file() else []
    return Previous(folder=folder, restart=restart, options=options, epochs_total=int(training["num_epochs"]),
                    learning_rate=float(training["learning_rate"]), epochs_done=checkpoint_epochs(restart),
                    train_csv=train_csv, calls=calls)


def merge_train_csv(earlier: Path | None, later: Path | None, dst: Path) -> None:
    """metatrain's ``train.csv`` of the whole chain: the earlier calls' epochs before the first of ``later``
    (epochs after the restart checkpoint were trained again), then ``later``'s."""
    tables = []
    for path in (earlier, later):
        if path is not None and Path(path).is_file():
            with Path(path).open(newline="") as f:
                tables.append(list(csv.reader(f)))
    if not tables:
        return
    head, rows = tables[-1][:2], tables[-1][2:]
    if len(tables) == 2:
        first = min((int(float(r[0])) for r in rows if r), default=None)
        kept = [r for r in tables[0][2:] if r and (first is None or int(float(r[0])) < first)]
        rows = kept + rows
    with dst.open("w", newline="") as f:
        csv.writer(f).writerows(head + rows)
