"""The training driver: metatrain options from the template, epoch sizing, the deadline, and (slow) the whole
pipeline on the CPU: tiny data, one epoch of mtt train, the shipped checkpoint, its evaluation and plot."""

import json
import math
import sys
import time

import pytest

from tcemu.mlip.distill.train import OUTPUT_FILES, TrainConfig, options_for, run_mtt, size_epochs


def test_options_fill_paths_device_epochs(tmp_path):
    opts = options_for(TrainConfig(data=tmp_path, out=tmp_path, device="cpu"), tmp_path, 37, 5)
    assert opts["device"] == "cpu" and opts["final_eval"] is False
    training = opts["architecture"]["training"]
    assert training["num_epochs"] == 37 and training["checkpoint_interval"] == 5
    assert opts["validation_set"]["systems"]["read_from"] == str(tmp_path / "val.extxyz")
    assert opts["test_set"]["targets"]["energy"]["stress"] == {"key": "stress"}
    model = opts["architecture"]["model"]
    assert (model["d_pet"], model["d_node"], model["num_gnn_layers"]) == (128, 256, 2)
    assert model["zbl"] is True  # the repulsion under the learned energy
    assert training["learning_rate"] == 3.0e-4  # the template's


def test_options_learning_rate_override(tmp_path):
    cfg = TrainConfig(data=tmp_path, out=tmp_path, device="cpu", learning_rate=1e-3)
    assert options_for(cfg, tmp_path, 3, 1)["architecture"]["training"]["learning_rate"] == 1e-3


def test_epoch_sizing():
    assert size_epochs(300.0, 5.0, 1000) == 57  # 0.95 * 60
    assert size_epochs(3.0, 5.0, 1000) == 1
    assert size_epochs(1e6, 0.1, 250) == 250
    with pytest.raises(ValueError, match="no usable epoch times"):
        size_epochs(100.0, float("nan"), 10)


FAKE_MTT = """
import sys, time
print("[INFO] - Starting training", flush=True)
for i in range(100):
    time.sleep(0.3)
    print(f"[INFO] - Epoch: {i:4d} | learning rate: 1e-4", flush=True)
"""


def test_run_stops_at_the_deadline_and_keeps_epoch_times(tmp_path):
    script = tmp_path / "fake_mtt.py"
    script.write_text(FAKE_MTT)
    t0 = time.monotonic()
    run = run_mtt(tmp_path / "unused.yaml", tmp_path, t0 + 2.0, tmp_path / "log.txt", log=lambda s: None,
                  command=[sys.executable, str(script)])
    assert run.interrupted and run.returncode != 0
    assert 1.5 < run.wall_s < 15
    assert 2 <= run.epochs_done < 100
    assert 0.2 < run.epoch_s() < 1.0
    assert run.startup_s < run.epoch_end_s[0]
    assert "Epoch:    0" in (tmp_path / "log.txt").read_text()


@pytest.mark.slow(reason="the whole distillation on the CPU: CHGNet labels a data set, metatrain trains and evaluates")
def test_cpu_pipeline_end_to_end(tmp_path):
    """The H200 command's path on the CPU: data, a calibration epoch, one training epoch, ship, evaluate, plot."""
    import numpy as np

    from tcemu.mlip import models, systems
    from tcemu.mlip.distill.dataset import DistillDataConfig, generate
    from tcemu.mlip.distill.train import train

    data = tmp_path / "data"
    generate(DistillDataConfig.tiny(water_md_steps=2, co_displaced=6, cantor_small=4, co_curve_points=3), data,
             cache=False, log=lambda s: None)
    cfg = TrainConfig(data=data, out=tmp_path / "out", device="cpu", budget_s=1800, calibration_epochs=1,
                      max_epochs=1, reserve_s=0, status="cpu-smoke", relax_steps=3)
    summary = train(cfg, log=lambda s: None)
    out = tmp_path / "out"
    files = sorted(p.name for p in out.iterdir())
    assert set(files) <= set(OUTPUT_FILES)  # nothing else (the work folder is removed); the plot needs matplotlib
    assert {"pet_distilled.ckpt", "pet_distilled.json", "options.yaml", "results.csv", "train.log"} <= set(files)
    assert all((out / f).stat().st_size < 16e6 for f in files if f != "restart.ckpt")  # that one stays there
    assert summary["training"]["epochs_done"] == 1 and summary["status"] == "cpu-smoke"
    assert json.loads((out / "pet_distilled.json").read_text())["model"]["n_parameters"] == 1654018
    pot = models.pet_checkpoint(out / "pet_distilled.ckpt")
    assert pot.elements == frozenset({1, 6, 8, 24, 25, 26, 27, 28, 78})
    assert summary["training"]["options"]["model"]["zbl"] is True  # the template's repulsion, for every type
    water = systems.water_box()
    water.calc = pot.calculator("fp32")
    assert math.isfinite(water.get_potential_energy()) and np.isfinite(water.get_forces()).all()
    assert summary["errors"]["test"]["all"]["n_structures"] >= 1
    assert set(summary["reference"]) == {"water_192", "pt111_co"}
