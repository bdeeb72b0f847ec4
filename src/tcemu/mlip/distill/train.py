"""Train the distilled PET with metatrain (``mtt train``) inside a wall-clock budget, and ship its checkpoint.

:func:`train` runs metatrain's own command line twice in a subprocess:

1. a calibration run (``calibration_epochs`` epochs, no final evaluation) that measures metatrain's start-up
   (reading the data, fitting the composition baseline and the scaler) and the time of one epoch;
2. the training run, with ``num_epochs`` sized so that start-up, the epochs and the evaluation after it fit the
   budget (metatrain's cosine learning-rate schedule then ends where the run ends). It is stopped at the deadline
   if it runs over anyway; the newest intermediate checkpoint is then taken, and the summary says so.

Then the best model (metatrain's ``best_model_state_dict``, lowest validation RMSE product) is written without
optimizer state as ``pet_distilled.ckpt`` (:func:`ship_checkpoint`), evaluated against the teacher's labels
(:mod:`tcemu.mlip.distill.evaluate`) and plotted. Everything lands in ``out``: the files of :data:`OUTPUT_FILES`,
none over 16 MB but ``restart.ckpt``, metatrain's checkpoint of where the training stopped.

A training longer than one call (the GPU machine's 600 s) runs as a chain: the first call fixes the total
``epochs`` (and the learning rate); each later call names the previous call's output folder as ``resume``
(``--resume PREV_OUT``) and continues from its ``restart.ckpt`` through metatrain's own restart, with the
previous call's options, toward the same total on the same learning-rate schedule (:mod:`.resume`). Every call
stops within its budget, ships and evaluates the best model so far, and records the chain in its summary.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from tcemu.mlip.distill.resume import checkpoint_complete

__all__ = ["MttRun", "OUTPUT_FILES", "TrainConfig", "mtt_command", "options_for", "run_mtt", "ship_checkpoint",
           "size_epochs", "train"]

#: Files :func:`train` leaves in its output folder.
OUTPUT_FILES = (
    "pet_distilled.ckpt",
    "pet_distilled.json",
    "options.yaml",
    "train.csv",
    "train.log",
    "errors.csv",
    "results.csv",
    "training_curves.png",
    "distill_train.log",
    "restart.ckpt",
)
#: The epoch lines metatrain logs (``Epoch:    3 | learning rate: ...``).
_EPOCH_LINE = re.compile(r"Epoch:\s*(\d+)\s*\|")


@dataclass(frozen=True)
class TrainConfig:
    """One training run.

    Attributes:
        data: folder with ``{train,val,test}.extxyz.gz`` (from :func:`tcemu.mlip.distill.dataset.generate`).
        out: output folder (:data:`OUTPUT_FILES`); a ``work`` folder beside them is removed at the end.
        device: ``"cuda"`` or ``"cpu"`` (metatrain's ``device``).
        budget_s: wall-clock seconds for everything after the call starts (calibration, training, evaluation).
        epochs: the training epochs; ``None`` sizes them from the calibration run.
        calibration_epochs: epochs of the calibration run (the second and later ones give the epoch time).
        reserve_s: seconds kept free after training for the checkpoint, the evaluation and the plot.
        max_epochs: an upper limit on the sized epochs.
        options: the metatrain options template (default: the package's ``options.yaml``).
        status: ``"h200"`` for the shipped model, ``"cpu-smoke"`` for a pipeline check (written into the metadata).
        eval_limit: structures per split evaluated (``None``: all).
        relax_steps: step limit of the CO relaxation in the evaluation.
        learning_rate: metatrain's peak learning rate (``None``: the template's).
        resume: the output folder of the previous call of a chain: continue its training (its ``restart.ckpt``,
            its options; no calibration). ``epochs`` and ``learning_rate``, if given, must be its.
        call_epochs: stop this call after this many epochs (at the first checkpoint after them), the rest left
            to a call with ``resume``; ``None``: only the budget stops it.
    """

    data: Path
    out: Path
    device: str = "cuda"
    budget_s: float = 450.0
    epochs: int | None = None
    calibration_epochs: int = 2
    reserve_s: float = 75.0
    max_epochs: int = 3000
    options: Path | None = None
    status: str = "h200"
    eval_limit: int | None = None
    relax_steps: int = 400
    learning_rate: float | None = None
    resume: Path | None = None
    call_epochs: int | None = None


@dataclass
class MttRun:
    """What one ``mtt train`` subprocess did: its exit, the wall times of its log lines, its files."""

    returncode: int | None
    wall_s: float
    startup_s: float  # process start to "Starting training"
    epoch_end_s: list[float] = field(default_factory=list)  # process start to each epoch's log line
    interrupted: bool = False
    run_dir: Path | None = None  # metatrain's outputs/<date>/<time>

    @property
    def epochs_done(self) -> int:
        return len(self.epoch_end_s)

    def epoch_s(self) -> float:
        """Seconds per epoch after the first (which pays for warm-up), or the first if there is only one."""
        t = self.epoch_end_s
        if len(t) >= 2:
            return (t[-1] - t[0]) / (len(t) - 1)
        if t:
            return t[0] - self.startup_s
        return math.nan


def _template(cfg: TrainConfig) -> Path:
    if cfg.options is not None:
        return Path(cfg.options)
    return Path(str(resources.files("tcemu.mlip.distill") / "options.yaml"))


def options_for(cfg: TrainConfig, work: Path, epochs: int, checkpoint_interval: int,
                template: Path | None = None) -> dict:
    """The template (default: :attr:`TrainConfig.options` or the package's) with this run's data paths, device,
    epochs and checkpoint interval filled in."""
    from omegaconf import OmegaConf

    opts = OmegaConf.to_container(OmegaConf.load(template or _template(cfg)))
    opts["device"] = cfg.device
    opts["final_eval"] = False  # our own evaluation follows (per group, through the shipped loader)
    training = opts["architecture"]["training"]
    training["num_epochs"] = int(epochs)
    training["checkpoint_interval"] = int(max(1, checkpoint_interval))
    if cfg.learning_rate is not None:
        training["learning_rate"] = float(cfg.learning_rate)
    for key, split in (("training_set", "train"), ("validation_set", "val"), ("test_set", "test")):
        opts[key]["systems"]["read_from"] = str(work / f"{split}.extxyz")
    return opts


def _write_options(opts: dict, path: Path) -> Path:
    from omegaconf import OmegaConf

    OmegaConf.save(OmegaConf.create(opts), path)
    return path


def mtt_command(options: Path, restart: Path | None = None) -> list[str]:
    """``mtt train OPTIONS -o model.pt [--restart CKPT]`` (metatrain's own command line), in this interpreter."""
    cmd = [sys.executable, "-m", "metatrain", "train", str(options), "-o", "model.pt"]
    return cmd + ["--restart", str(restart)] if restart is not None else cmd


def _checkpoints(workdir: Path) -> list[Path]:
    """metatrain's intermediate checkpoints (``outputs/<date>/<time>/model_<epoch>.ckpt``), oldest epoch first."""
    return sorted(workdir.glob("outputs/*/*/model_*.ckpt"), key=lambda p: int(p.stem.split("_")[1]))


def run_mtt(options: Path, workdir: Path, deadline: float, log_path: Path, log=print,
            command: list[str] | None = None, stop_after: int | None = None) -> MttRun:
    """``mtt train options`` (or ``command``) in ``workdir``, stopped at ``deadline`` (``time.monotonic()``), or
    after ``stop_after`` epochs once metatrain has written a complete checkpoint of that epoch or a later one.

    Every output line goes to ``log_path`` with its wall time; the times of metatrain's "Starting training" and
    epoch lines give the start-up and epoch times.
    """
    cmd = command or mtt_command(options)
    stop_epoch: list[int] = []  # metatrain's index of the epoch after which to stop
    t0 = time.monotonic()
    run = MttRun(returncode=None, wall_s=0.0, startup_s=math.nan)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1, env=env)

    def reader() -> None:
        with log_path.open("a") as f:
            for line in proc.stdout:  # type: ignore[union-attr]
                t = time.monotonic() - t0
                f.write(f"[{t:8.1f} s] {line}")
                f.flush()
                if "Starting training" in line and math.isnan(run.startup_s):
                    run.startup_s = t
                if m := _EPOCH_LINE.search(line):
                    run.epoch_end_s.append(t)
                    if stop_after is not None and len(run.epoch_end_s) == stop_after:
                        stop_epoch.append(int(m.group(1)))
                    if len(run.epoch_end_s) == 1 or len(run.epoch_end_s) % 10 == 0:
                        log(f"[distill train] epoch {m.group(1)} done at {t:.0f} s")
                if "ERROR" in line or "Traceback" in line:
                    log(f"[distill train] mtt: {line.rstrip()}")

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            proc.wait(timeout=max(0.01, min(0.5, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            pass
        if stop_epoch and proc.poll() is None and any(
                int(p.stem.split("_")[1]) >= stop_epoch[0] and checkpoint_complete(p) for p in _checkpoints(workdir)):
            log(f"[distill train] {stop_after} epochs done: stopping mtt train")
            break
    if proc.poll() is None:
        run.interrupted = True
        if not stop_epoch:
            log("[distill train] deadline reached: stopping mtt train")
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    thread.join(timeout=10)
    run.returncode = proc.returncode
    run.wall_s = time.monotonic() - t0
    dirs = sorted((workdir / "outputs").glob("*/*"), key=lambda p: p.stat().st_mtime)
    run.run_dir = dirs[-1] if dirs else None
    return run


def size_epochs(seconds: float, epoch_s: float, max_epochs: int, margin: float = 0.95) -> int:
    """Epochs that fit ``seconds`` at ``epoch_s`` each, with ``margin`` for variation; at least 1."""
    if not (epoch_s > 0 and math.isfinite(epoch_s)):
        raise ValueError(f"epoch time {epoch_s!r} s: the calibration run logged no usable epoch times")
    return int(max(1, min(max_epochs, math.floor(margin * seconds / epoch_s))))


def ship_checkpoint(src: Path, dst: Path, description: str, extra: dict[str, str]) -> dict:
    """Write the best model of a metatrain checkpoint without trainer state (about 4 bytes per parameter).

    ``metatrain.utils.io.load_model`` takes the best model (``best_model_state_dict``); ``PET.get_checkpoint``
    writes model state, hypers and dataset info only. Returns the model's size.
    """
    import torch

    import metatomic.torch as mta
    from metatrain.utils.io import load_model

    model = load_model(str(src))
    model.metadata = mta.ModelMetadata(name="tcemu pet-distilled", description=description,
                                       extra={k: str(v) for k, v in extra.items()})
    ckpt = model.get_checkpoint()
    torch.save(ckpt, dst)
    n = sum(p.numel() for p in model.parameters())
    return {"n_parameters": int(n), "weights_MB": round(4 * n / 1e6, 2), "file_MB": round(dst.stat().st_size / 1e6, 2),
            "hypers": {k: v for k, v in model.hypers.items() if not isinstance(v, dict)},
            "atomic_types": [int(z) for z in model.atomic_types]}


def _unpack(data: Path, work: Path) -> dict:
    manifest = json.loads((data / "manifest.json").read_text()) if (data / "manifest.json").is_file() else {}
    for split in ("train", "val", "test"):
        src = data / f"{split}.extxyz.gz"
        if not src.is_file():
            raise FileNotFoundError(f"{src} not found; make the data with `python -m tcemu.mlip.distill data --out {data}`")
        with gzip.open(src, "rb") as f, (work / f"{split}.extxyz").open("wb") as g:
            shutil.copyfileobj(f, g)
    return manifest


def _environment(device: str) -> dict:
    from importlib.metadata import version

    import torch

    env = {"python": platform.python_version(), "machine": platform.machine(), "device": device}
    for pkg in ("torch", "metatrain", "metatomic-torch", "ase", "numpy"):
        try:
            env[pkg] = version(pkg)
        except Exception:  # noqa: BLE001
            env[pkg] = "-"
    if device.startswith("cuda") and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
    else:
        env["cpu"] = platform.processor() or platform.machine()
        env["cpu_count"] = os.cpu_count()
    return env


def train(cfg: TrainConfig, log=print) -> dict:
    """Calibrate, train, ship, evaluate and plot (see the module docstring); returns the summary (``pet_distilled.json``)."""
    from tcemu.mlip.distill import evaluate, resume

    t_start = time.monotonic()
    deadline = t_start + cfg.budget_s
    out = Path(cfg.out)
    work = out / "work"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    driver_log = out / "distill_train.log"
    driver_log.write_text("")

    def say(msg: str) -> None:
        log(msg)
        with driver_log.open("a") as f:
            f.write(f"[{time.monotonic() - t_start:8.1f} s] {msg}\n")

    prev = resume.previous(Path(cfg.resume), work) if cfg.resume is not None else None
    if prev is not None:
        prev.check(cfg.epochs, cfg.learning_rate)
    manifest = _unpack(Path(cfg.data), work)
    say(f"[distill train] data {cfg.data}: {manifest.get('n_structures', '?')} structures, unpacked in "
        f"{time.monotonic() - t_start:.0f} s")
    calibration = None
    epochs = cfg.epochs
    if prev is not None:
        epochs = prev.epochs_total
        say(f"[distill train] continuing {prev.folder} ({prev.epochs_done} of {epochs} epochs done)")
    elif epochs is None:
        cal_dir = work / "calibration"
        cal_dir.mkdir()
        opts = options_for(cfg, work, cfg.calibration_epochs, checkpoint_interval=10**6)
        cal = run_mtt(_write_options(opts, cal_dir / "options.yaml"), cal_dir, deadline - cfg.reserve_s,
                      out / "train.log", say)
        if cal.returncode != 0 or cal.epochs_done < 1:
            raise RuntimeError(f"the calibration run of mtt train failed (exit {cal.returncode}); see {out / 'train.log'}")
        epoch_s = cal.epoch_s()
        startup = cal.startup_s if math.isfinite(cal.startup_s) else cal.epoch_end_s[0] - epoch_s
        remaining = deadline - time.monotonic() - cfg.reserve_s - startup
        epochs = size_epochs(remaining, epoch_s, cfg.max_epochs)
        calibration = {"startup_s": round(cal.startup_s, 1), "epoch_s": round(epoch_s, 2),
                       "wall_s": round(cal.wall_s, 1), "epochs": cal.epochs_done}
        say(f"[distill train] calibration: start-up {startup:.0f} s, {epoch_s:.2f} s per epoch -> "
            f"{epochs} epochs in the {remaining:.0f} s left")
    # a checkpoint every epoch up to 100 epochs: a call stopped at its deadline loses only the epoch under way
    opts = options_for(cfg, work, epochs, checkpoint_interval=max(1, epochs // 100),
                       template=prev.options if prev else None)
    options_path = _write_options(opts, out / "options.yaml")
    run = run_mtt(options_path, work, deadline - cfg.reserve_s / 2, out / "train.log", say,
                  command=mtt_command(options_path, prev.restart if prev else None), stop_after=cfg.call_epochs)
    final = work / "model.ckpt"  # written once the last epoch is done (before metatrain's TorchScript export)
    if final.is_file():
        source = final
        if run.returncode != 0:
            say(f"[distill train] mtt train exited with {run.returncode} after writing its final checkpoint")
    else:
        ckpts = _checkpoints(work)
        if ckpts and checkpoint_complete(ckpts[-1]):
            source = ckpts[-1]
        elif len(ckpts) > 1:  # the newest one was being written when the run was stopped
            source = ckpts[-2]
        elif prev is not None:
            source = prev.restart
        else:
            raise RuntimeError(f"mtt train left no checkpoint (exit {run.returncode}); see {out / 'train.log'}")
        say(f"[distill train] mtt train did not finish (exit {run.returncode}); using {source.name}")
    epochs_before = prev.epochs_done if prev else 0
    epochs_after = resume.checkpoint_epochs(source)
    if source.resolve() != (out / resume.RESTART_FILE).resolve():
        shutil.copy(source, out / resume.RESTART_FILE)
    new_csv = run.run_dir / "train.csv" if run.run_dir is not None else None
    resume.merge_train_csv(prev.train_csv if prev else None, new_csv, out / "train.csv")
    say(f"[distill train] {run.epochs_done} epochs in {run.wall_s:.0f} s (start-up {run.startup_s:.0f} s); "
        f"{epochs_after} of {epochs} epochs in {resume.RESTART_FILE}")
    call = {"out": str(out), "resumed_from": str(Path(cfg.resume) / resume.RESTART_FILE) if prev else None,
            "epochs_before": epochs_before, "epochs_after": epochs_after, "train_wall_s": round(run.wall_s, 1)}
    calls = (prev.calls if prev else []) + [call]

    description = ("PET distilled from CHGNet 0.3.0 labels of tcemu's benchmark systems (water, CO on Pt(111), "
                   "Co-Cr-Fe-Mn-Ni slabs) for validating emulated FP32; not a production potential")
    if cfg.status != "h200":
        description += f" [{cfg.status}: a pipeline check, not trained to use]"
    model = ship_checkpoint(source, out / "pet_distilled.ckpt", description,
                            {"teacher": manifest.get("teacher", "-"), "status": cfg.status})
    summary = {
        "name": "pet-distilled",
        "status": cfg.status,
        "description": description,
        "teacher": manifest.get("teacher", "-"),
        "model": model,
        "data": {k: manifest[k] for k in ("subset_of", "n_structures", "n_atoms", "counts", "files", "settings")
                 if k in manifest},
        "training": {
            "environment": _environment(cfg.device),
            "budget_s": cfg.budget_s,
            "calibration": calibration,
            "epochs_planned": epochs,
            "epochs_done": epochs_after,
            "epochs_this_call": run.epochs_done,
            "chain": {**call, "calls": calls, "train_wall_s": round(sum(c["train_wall_s"] for c in calls), 1)},
            "interrupted": run.interrupted or source != final,
            "checkpoint_source": source.name,
            "startup_s": round(run.startup_s, 1),
            "epoch_s": round(run.epoch_s(), 2),
            "train_wall_s": round(run.wall_s, 1),
            "options": opts["architecture"],
        },
    }
    summary_path = out / "pet_distilled.json"
    summary_path.write_text(json.dumps(summary, indent=1) + "\n")  # again below, with the evaluation
    say("[distill train] evaluating the shipped checkpoint against the labels")
    summary.update(evaluate.evaluate_all(out / "pet_distilled.ckpt", work, cfg.device, out / "errors.csv",
                                         limit=cfg.eval_limit, relax_steps=cfg.relax_steps, log=say,
                                         deadline=deadline - 10))
    summary["training"]["total_wall_s"] = round(time.monotonic() - t_start, 1)
    summary_path.write_text(json.dumps(summary, indent=1) + "\n")
    if (out / "train.csv").is_file():
        try:
            evaluate.plot_training(out / "train.csv", summary, out / "training_curves.png")
        except Exception as exc:  # noqa: BLE001 - e.g. no matplotlib: the CSV is there, plot it elsewhere
            say(f"[distill train] no plot ({type(exc).__name__}: {exc}); make it with "
                f"`python -m tcemu.mlip.distill plot {out}`")
    from tcemu._results import Provenance, write_results

    write_results(out / "results.csv", evaluate.results_rows(out), Provenance.current(cfg.device))
    shutil.rmtree(work, ignore_errors=True)
    say(f"[distill train] done in {time.monotonic() - t_start:.0f} s -> {out}")
    return summary


def summary_lines(summary: dict) -> list[str]:
    """A few lines for the terminal: epochs, time, test errors."""
    t = summary["training"]
    lines = [f"pet-distilled ({summary['status']}): {t['epochs_done']} epochs, {t['total_wall_s']:.0f} s, "
             f"{summary['model']['n_parameters'] / 1e6:.2f} M parameters ({summary['model']['file_MB']} MB file)"]
    for split in ("test", "val"):
        e = summary.get("errors", {}).get(split, {}).get("all")
        if e:
            lines.append(f"  {split}: energy MAE {e['energy_mae_meV_per_atom']:.1f} meV/atom, force RMSE "
                         f"{e['force_rmse_meV_per_A']:.0f} meV/A over {e['n_structures']} structures")
    return lines
