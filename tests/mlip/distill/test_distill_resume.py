"""A training continued over several calls: the previous call's folder, the chain's curves, the checks, and
(slow) one epoch of mtt train, then a call that continues it to two through metatrain's restart."""

import json
import math
import sys
import time

import pytest

from tcemu.mlip.distill import resume
from tcemu.mlip.distill.train import OUTPUT_FILES, TrainConfig, mtt_command, options_for, run_mtt


def _previous_folder(folder, epoch, num_epochs=5, lr=1e-3):
    import torch
    from omegaconf import OmegaConf

    folder.mkdir(parents=True, exist_ok=True)
    torch.save({"epoch": epoch, "optimizer_state_dict": {}}, folder / resume.RESTART_FILE)
    opts = options_for(TrainConfig(data=folder, out=folder, device="cpu", learning_rate=lr), folder / "w",
                       num_epochs, 1)  # an earlier call's options.yaml
    OmegaConf.save(OmegaConf.create(opts), folder / "options.yaml")
    (folder / "train.csv").write_text("Epoch,loss\n,\n0,3.0\n1,2.0\n2,1.5\n")
    call = {"out": str(folder), "resumed_from": None, "epochs_before": 0, "epochs_after": epoch + 1,
            "train_wall_s": 10.0}
    (folder / "pet_distilled.json").write_text(json.dumps({"training": {"chain": {**call, "calls": [call]}}}))
    return folder


def test_previous_reads_the_chain_and_checks_epochs_and_learning_rate(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    prev = resume.previous(_previous_folder(tmp_path / "a", epoch=1), work)
    assert (prev.epochs_done, prev.epochs_total, prev.learning_rate) == (2, 5, 1e-3)
    assert prev.restart.parent == work and len(prev.calls) == 1
    prev.check(None, None)
    prev.check(5, 1e-3)
    with pytest.raises(ValueError, match="keeps both"):
        prev.check(8, None)
    with pytest.raises(ValueError, match="keeps both"):
        prev.check(None, 3e-4)
    done = resume.previous(_previous_folder(tmp_path / "b", epoch=4), work)
    with pytest.raises(ValueError, match="nothing to continue"):
        done.check(None, None)
    with pytest.raises(FileNotFoundError, match="--resume"):
        resume.previous(tmp_path / "missing", work)


def test_continued_run_uses_the_previous_options_and_restart(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    prev = resume.previous(_previous_folder(tmp_path / "a", epoch=1, num_epochs=25, lr=1e-3), work)
    cfg = TrainConfig(data=tmp_path, out=tmp_path, device="cpu")
    opts = options_for(cfg, work, prev.epochs_total, 1, template=prev.options)
    assert opts["architecture"]["training"]["num_epochs"] == 25
    assert opts["architecture"]["training"]["learning_rate"] == 1e-3
    assert opts["training_set"]["systems"]["read_from"] == str(work / "train.extxyz")
    assert mtt_command(tmp_path / "o.yaml", prev.restart)[-2:] == ["--restart", str(prev.restart)]
    assert "--restart" not in mtt_command(tmp_path / "o.yaml")


def test_chain_curves_drop_epochs_trained_again(tmp_path):
    earlier = tmp_path / "earlier.csv"
    earlier.write_text("Epoch,loss\n,\n0,3.0\n1,2.0\n2,1.5\n")  # epoch 2 ran after the restart checkpoint
    later = tmp_path / "later.csv"
    later.write_text("Epoch,loss\n,\n2,1.4\n3,1.2\n")
    resume.merge_train_csv(earlier, later, tmp_path / "train.csv")
    assert (tmp_path / "train.csv").read_text().split() == ["Epoch,loss", ",", "0,3.0", "1,2.0", "2,1.4", "3,1.2"]
    resume.merge_train_csv(None, later, tmp_path / "only.csv")
    assert (tmp_path / "only.csv").read_text().split() == later.read_text().split()


def test_checkpoint_complete(tmp_path):
    import torch

    path = tmp_path / "model_3.ckpt"
    torch.save({"epoch": 3}, path)
    assert resume.checkpoint_complete(path) and resume.checkpoint_epochs(path) == 4
    path.write_bytes(path.read_bytes()[:-30])  # cut off the zip directory: still being written
    assert not resume.checkpoint_complete(path)
    assert not resume.checkpoint_complete(tmp_path / "absent.ckpt")


FAKE_MTT = """
import pathlib, sys, time, torch
d = pathlib.Path("outputs/d/t")
d.mkdir(parents=True)
print("[INFO] - Starting training", flush=True)
for i in range(100):
    time.sleep(0.2)
    print(f"[INFO] - Epoch: {i:4d} | learning rate: 1e-4", flush=True)
    time.sleep(0.3)  # the checkpoint comes after the epoch line
    torch.save({"epoch": i}, d / f"model_{i}.ckpt")
"""


def test_run_stops_after_call_epochs_once_their_checkpoint_is_written(tmp_path):
    script = tmp_path / "fake_mtt.py"
    script.write_text(FAKE_MTT)
    run = run_mtt(tmp_path / "unused.yaml", tmp_path, time.monotonic() + 60, tmp_path / "log.txt",
                  log=lambda s: None, command=[sys.executable, str(script)], stop_after=2)
    assert run.interrupted and run.wall_s < 30
    assert 2 <= run.epochs_done <= 3
    assert resume.checkpoint_complete(tmp_path / "outputs/d/t/model_1.ckpt")


@pytest.mark.slow(reason="CHGNet labels a tiny data set; metatrain trains one epoch, then continues to two")
def test_cpu_training_continued_over_two_calls(tmp_path):
    """One call trains epoch 1 of 2 and stops; a second continues it through mtt's restart to epoch 2."""
    import torch

    from tcemu.mlip import models, systems
    from tcemu.mlip.distill.dataset import DistillDataConfig, generate
    from tcemu.mlip.distill.train import train

    data = tmp_path / "data"
    generate(DistillDataConfig.tiny(water_md_steps=2, co_displaced=6, cantor_small=4, co_curve_points=3), data,
             cache=False, log=lambda s: None)
    common = dict(data=data, device="cpu", budget_s=1800, reserve_s=0, status="cpu-smoke", relax_steps=3,
                  eval_limit=4)
    first = train(TrainConfig(out=tmp_path / "a", epochs=2, call_epochs=1, **common), log=lambda s: None)
    t = first["training"]
    assert (t["epochs_done"], t["epochs_planned"], t["interrupted"]) == (1, 2, True)
    assert t["chain"]["epochs_before"] == 0 and t["chain"]["resumed_from"] is None
    assert torch.load(tmp_path / "a" / "restart.ckpt", weights_only=False)["epoch"] == 0
    lr_first = _learning_rates(tmp_path / "a" / "train.log")
    assert lr_first == {0: 1.5e-4}  # half the peak 3e-4: the middle of the 2-epoch cosine (no warm-up steps here)

    second = train(TrainConfig(out=tmp_path / "b", resume=tmp_path / "a", **common), log=lambda s: None)
    t = second["training"]
    assert (t["epochs_done"], t["epochs_this_call"], t["interrupted"]) == (2, 1, False)
    assert t["chain"]["resumed_from"] == str(tmp_path / "a" / "restart.ckpt")
    assert [(c["epochs_before"], c["epochs_after"]) for c in t["chain"]["calls"]] == [(0, 1), (1, 2)]
    log = (tmp_path / "b" / "train.log").read_text()
    assert "Restarting training from" in log
    lr_second = _learning_rates(tmp_path / "b" / "train.log")
    assert lr_second == {1: 0.0}  # metatrain's epoch index 1, after the restart: the end of the same schedule
    assert torch.load(tmp_path / "b" / "restart.ckpt", weights_only=False)["epoch"] == 1
    assert t["options"]["training"]["num_epochs"] == 2
    rows = (tmp_path / "b" / "train.csv").read_text().splitlines()[2:]
    assert [int(float(r.split(",")[0])) for r in rows] == [0, 1]  # the chain's curves

    files = {p.name for p in (tmp_path / "b").iterdir()}
    assert files <= set(OUTPUT_FILES) and "pet_distilled.ckpt" in files
    assert all((tmp_path / "b" / f).stat().st_size < 16e6 for f in files - {"restart.ckpt"})
    pot = models.pet_checkpoint(tmp_path / "b" / "pet_distilled.ckpt")
    water = systems.water_box()
    water.calc = pot.calculator("fp32")
    assert math.isfinite(water.get_potential_energy())


def _learning_rates(log_path):
    """metatrain's epoch index -> the learning rate its epoch line reports."""
    import re

    found = re.findall(r"Epoch:\s*(\d+)\s*\|\s*learning rate:\s*([0-9.e+-]+)", log_path.read_text())
    return {int(e): float(lr) for e, lr in found}
