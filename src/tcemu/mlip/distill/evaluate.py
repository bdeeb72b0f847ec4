"""How good the distilled PET is: errors against the teacher's labels, the CO curve, a relaxation, reference energies.

Everything goes through the path a user takes (:func:`tcemu.mlip.models.pet_checkpoint`, metatomic's ASE
calculator, FP32), so the numbers are those of the shipped file.
"""

from __future__ import annotations

import csv
import math
import time
from pathlib import Path

import numpy as np

__all__ = ["REFERENCE_SYSTEMS", "co_curve", "errors", "evaluate_all", "plot_training", "reference_energies",
           "relax_co", "results_rows"]

#: Structures whose energies are stored with the checkpoint (``tcemu.mlip.systems`` names); the tests recompute them.
REFERENCE_SYSTEMS = ("water_192", "pt111_co")
#: Columns of ``errors.csv``.
ERROR_COLUMNS = ("split", "group", "n_structures", "n_atoms", "energy_mae_meV_per_atom", "energy_rmse_meV_per_atom",
                 "force_mae_meV_per_A", "force_rmse_meV_per_A", "force_rms_label_meV_per_A", "stress_rmse_meV_per_A3")


def _predict(calc, atoms) -> tuple[float, np.ndarray, np.ndarray]:
    from ase.calculators.calculator import all_changes

    calc.calculate(atoms, ["energy", "forces", "stress"], all_changes)
    r = calc.results
    return float(r["energy"]), np.asarray(r["forces"]), np.asarray(r["stress"])


def _stats(rows: list[tuple]) -> dict:
    """Aggregate (n_atoms, dE, dF, F_label, dS) tuples into the columns of :data:`ERROR_COLUMNS`."""
    n_atoms = np.array([r[0] for r in rows], dtype=float)
    de = np.array([r[1] for r in rows]) / n_atoms * 1e3
    df = np.concatenate([r[2].ravel() for r in rows]) * 1e3
    fl = np.concatenate([r[3].ravel() for r in rows]) * 1e3
    ds = np.concatenate([r[4].ravel() for r in rows]) * 1e3
    return {
        "n_structures": len(rows),
        "n_atoms": int(n_atoms.sum()),
        "energy_mae_meV_per_atom": float(np.abs(de).mean()),
        "energy_rmse_meV_per_atom": float(np.sqrt(np.mean(de**2))),
        "force_mae_meV_per_A": float(np.abs(df).mean()),
        "force_rmse_meV_per_A": float(np.sqrt(np.mean(df**2))),
        "force_rms_label_meV_per_A": float(np.sqrt(np.mean(fl**2))),
        "stress_rmse_meV_per_A3": float(np.sqrt(np.mean(ds**2))),
    }


def errors(calc, frames: list, deadline: float | None = None) -> dict[str, dict]:
    """Errors of ``calc`` against the labels of ``frames``, per ``info['group']`` and over all (``"all"``).

    With ``deadline`` (``time.monotonic()``) the frames left at that time are not evaluated (``n_structures`` says
    how many were)."""
    by_group: dict[str, list] = {}
    for atoms in frames:
        if deadline is not None and time.monotonic() > deadline:
            break
        e, f, s = _predict(calc, atoms)
        ref = atoms.calc.results
        item = (len(atoms), e - ref["energy"], f - ref["forces"], np.asarray(ref["forces"]), s - ref["stress"])
        by_group.setdefault(str(atoms.info.get("group", "-")), []).append(item)
    out = {g: _stats(rows) for g, rows in sorted(by_group.items())}
    if by_group:
        out["all"] = _stats([r for rows in by_group.values() for r in rows])
    return out


def co_curve(calc, frames: list) -> dict:
    """The rigid CO-on-Pt(111) scan (the data's ``co_curve`` group): teacher and student energies, well and depth."""
    scan = sorted((float(a.info["height_A"]), a) for a in frames if a.info.get("group") == "co_curve")
    if not scan:
        return {}
    heights = [h for h, _ in scan]
    teacher = [float(a.calc.results["energy"]) for _, a in scan]
    from ase.calculators.calculator import all_changes

    student = []
    for _, a in scan:
        calc.calculate(a, ["energy"], all_changes)
        student.append(float(calc.results["energy"]))

    def well(e: list[float]) -> dict:
        i = int(np.argmin(e))
        return {"height_A": heights[i], "depth_eV": e[-1] - e[i]}

    return {"height_A": heights, "teacher_eV": teacher, "student_eV": student,
            "teacher_well": well(teacher), "student_well": well(student)}


def relax_co(pot, device: str, start_height_A: float = 2.6, fmax: float = 0.01, steps: int = 400) -> dict:
    """FIRE2 (the suite's) of CO on Pt(111) from ``start_height_A``, the two bottom Pt layers fixed: where CO ends."""
    from ase.constraints import FixAtoms

    from tcemu.mlip import systems
    from tcemu.mlip.fire2 import FIRE2

    atoms = systems.co_on_pt111(start_height_A)
    z = atoms.positions[:-2, 2]
    layers = np.unique(z.round(3))
    atoms.set_constraint(FixAtoms(indices=np.where(z < layers[2] - 0.1)[0]))
    atoms.calc = pot.calculator("fp32", device)
    opt = FIRE2(atoms, logfile=None)
    converged = bool(opt.run(fmax=fmax, steps=steps))
    pos = atoms.positions
    top = np.where(pos[:-2, 2] > pos[:-2, 2].max() - 0.5)[0]
    under = top[np.argmin(np.linalg.norm(pos[top, :2] - pos[-1, :2], axis=1))]
    return {"start_height_A": start_height_A, "converged": converged, "steps": int(opt.get_number_of_steps()),
            "fmax_target_eV_per_A": fmax, "energy_final_eV": float(atoms.get_potential_energy()),
            "c_height_above_top_pt_A": float(pos[-1, 2] - pos[under, 2]),
            "c_lateral_offset_A": float(np.linalg.norm(pos[-1, :2] - pos[under, :2])),
            "co_bond_A": float(np.linalg.norm(pos[-2] - pos[-1]))}


def reference_energies(pot, device: str) -> dict:
    """FP64 and FP32 energies (and max |F|) of :data:`REFERENCE_SYSTEMS` on ``device``."""
    from tcemu.mlip import systems

    out = {}
    for name in REFERENCE_SYSTEMS:
        row = {}
        for method in ("fp64", "fp32"):
            a = systems.build(name)
            a.calc = pot.calculator(method, device)
            row[f"energy_{method}_eV"] = float(a.get_potential_energy())
            row[f"fmax_{method}_eV_per_A"] = float(np.linalg.norm(a.get_forces(), axis=1).max())
        row["n_atoms"] = len(systems.build(name))
        out[name] = row
    return out


def evaluate_all(checkpoint: Path, work: Path, device: str, errors_csv: Path, limit: int | None = None,
                 relax_steps: int = 400, log=print, deadline: float | None = None) -> dict:
    """Reference energies, errors on the test and validation splits (``errors.csv``), the CO curve, a CO relaxation.

    Each part that raises is recorded (``evaluation_errors``) and the others still run. ``deadline``
    (``time.monotonic()``) cuts the error loops short and skips the relaxation when it has passed.
    """
    import ase.io

    from tcemu.mlip import models

    pot = models.pet_checkpoint(checkpoint)
    calc = pot.calculator("fp32", device)
    result: dict = {"errors": {}, "evaluation_errors": {}}

    def part(name: str, fn) -> None:
        try:
            result[name] = fn()
        except Exception as exc:  # noqa: BLE001 - one failing part must not lose the others
            result["evaluation_errors"][name] = f"{type(exc).__name__}: {exc}"
            log(f"[distill train] {name} failed: {type(exc).__name__}: {exc}")

    def split_errors() -> dict:
        rows, out = [], {}
        for split in ("test", "val"):
            frames = ase.io.read(work / f"{split}.extxyz", index=":", format="extxyz")[:limit]
            out[split] = errors(calc, frames, deadline)
            rows += [{"split": split, "group": g, **v} for g, v in out[split].items()]
        with errors_csv.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=ERROR_COLUMNS)
            w.writeheader()
            for r in rows:
                w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
        return out

    part("reference", lambda: reference_energies(pot, device))
    part("errors", split_errors)
    part("co_curve", lambda: co_curve(calc, ase.io.read(work / "train.extxyz", index=":", format="extxyz")))
    if deadline is not None and time.monotonic() > deadline:
        log("[distill train] no time left for the CO relaxation")
    else:
        log("[distill train] errors and CO curve done; relaxing CO on Pt(111)")
        part("relax_co", lambda: relax_co(pot, device, steps=relax_steps))
    return result


def _metatrain_table(path: Path) -> tuple[list[str], list[str], list[list[str]]]:
    """metatrain's ``train.csv`` as (column names, units, one row of stripped texts per logged epoch)."""
    with Path(path).open(newline="") as f:
        rows = [[c.strip() for c in r] for r in csv.reader(f)]
    return rows[0], rows[1], rows[2:]


def _read_metatrain_csv(path: Path) -> dict[str, np.ndarray]:
    """metatrain's ``train.csv``, one array per column (NaN where an epoch logged no value)."""
    names, _, rows = _metatrain_table(path)
    return {n: np.array([float(r[i]) if i < len(r) and r[i] else math.nan for r in rows])
            for i, n in enumerate(names)}


def results_rows(folder: Path) -> list:
    """The training curves (metatrain's ``train.csv``: one case per epoch) and the errors against the labels
    (``errors.csv``: one case per split and group) of a train output folder, as :mod:`tcemu._results` rows
    (benchmark ``pet_distill``)."""
    from tcemu._results import case, measurement

    folder = Path(folder)
    rows = []
    if (folder / "train.csv").is_file():
        names, units, table = _metatrain_table(folder / "train.csv")
        for r in table:
            vals = dict(zip(names, r))
            epoch = int(float(vals.pop("Epoch")))
            metrics = {n.replace(" ", "_").replace("(", "").replace(")", ""): float(v) for n, v in vals.items() if v}
            unit = {n.replace(" ", "_").replace("(", "").replace(")", ""): (u or "1") for n, u in zip(names, units)}
            rows += measurement("pet_distill", "metatrain", "fp32", case(stage="training", epoch=epoch), metrics, unit)
    if (folder / "errors.csv").is_file():
        with (folder / "errors.csv").open(newline="") as f:
            for r in csv.DictReader(f):
                c = case(stage="evaluation", split=r.pop("split"), group=r.pop("group"))
                metrics = {k: float(v) for k, v in r.items() if v}
                unit = {k: ("count" if k.startswith("n_") else k[k.index("meV"):].replace("_per_", "/"))
                        for k in metrics}
                rows += measurement("pet_distill", "pet-distilled", "fp32", c, metrics, unit)
    return rows


def plot_training(train_csv: Path, summary: dict, png: Path) -> Path:
    """Training and validation curves (energy per atom, forces) from metatrain's CSV, and the CO curve."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = _read_metatrain_csv(train_csv)
    epoch = d["Epoch"]
    marker = "o" if len(epoch) < 20 else None
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, key, unit in ((axes[0], "energy RMSE (per atom)", "meV/atom"), (axes[1], "forces RMSE", "meV/A")):
        for split, style in (("training", "-"), ("validation", "--")):
            col = f"{split} {key}"
            if col in d:
                ax.semilogy(epoch, d[col], style, marker=marker, label=split)
        ax.set_xlabel("epoch")
        ax.set_ylabel(f"{key} ({unit})")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    test = summary.get("errors", {}).get("test", {}).get("all")
    if test:
        axes[1].set_title(f"test set: energy MAE {test['energy_mae_meV_per_atom']:.1f} meV/atom, force RMSE "
                          f"{test['force_rmse_meV_per_A']:.0f} meV/A", fontsize=8)
    curve = summary.get("co_curve") or {}
    ax = axes[2]
    if curve:
        h = np.array(curve["height_A"])
        for key, style, name in (("teacher_eV", "k-", "CHGNet (teacher)"), ("student_eV", "C1--", "pet-distilled")):
            e = np.array(curve[key])
            ax.plot(h, e - e[-1], style, marker=marker, label=name)
        ax.set_ylim(-2.5, 2.0)
        ax.set_xlabel("C height above top Pt (A)")
        ax.set_ylabel(f"E - E({h[-1]:.0f} A) (eV)")
        ax.set_title("CO pulled off Pt(111), rigid", fontsize=8)
        ax.legend(fontsize=8)
        ax.grid(True, alpha=0.3)
    env = summary.get("training", {}).get("environment", {})
    where = env.get("gpu") or env.get("cpu", "")
    fig.suptitle(f"pet-distilled ({summary.get('status')}): metatrain {env.get('metatrain', '')}, {where}, "
                 f"{summary.get('training', {}).get('epochs_done', '?')} epochs", fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


def _chain_text(calls: list[dict]) -> str:
    """``; over 2 calls (epochs 0-12 in 540 s, 12-20 in 300 s)`` for a training continued over several calls."""
    if len(calls) < 2:
        return ""
    parts = ", ".join(f"{c['epochs_before']}-{c['epochs_after']} in {c['train_wall_s']:.0f} s" for c in calls)
    return f"; over {len(calls)} calls of mtt train (epochs {parts}), the figures above being the last call's"


def summary_markdown(summary: dict) -> str:
    """``pet_distilled.json`` as the markdown that docs/mlip.md shows: training, test errors per group, CO curve."""
    t, m = summary["training"], summary["model"]
    env = t.get("environment", {})
    where = env.get("gpu") or f"CPU ({env.get('cpu_count', '?')} cores)"
    lines = [
        f"Status `{summary['status']}`. {m['n_parameters']:,} parameters ({m['weights_MB']} MB of float32 weights, "
        f"{m['file_MB']} MB file). Trained on {where} with metatrain {env.get('metatrain', '-')}, torch "
        f"{env.get('torch', '-')}, Python {env.get('python', '-')}: {t['epochs_done']} of {t['epochs_planned']} epochs "
        f"in {t['train_wall_s']:.0f} s (start-up {t['startup_s']:.0f} s, {t['epoch_s']:.2f} s per epoch), the "
        f"command {t.get('total_wall_s', float('nan')):.0f} s"
        + (" (stopped at the deadline: the newest intermediate checkpoint)" if t.get("interrupted") else "")
        + _chain_text(t.get("chain", {}).get("calls", [])) + ".",
        "",
        "| split | group | structures | atoms | energy MAE (meV/atom) | energy RMSE (meV/atom) | force RMSE (meV/A) "
        "| force RMS of the labels (meV/A) | stress RMSE (meV/A^3) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for split in ("test", "val"):
        for group, e in summary.get("errors", {}).get(split, {}).items():
            lines.append(
                f"| {split} | {group} | {e['n_structures']} | {e['n_atoms']} | {e['energy_mae_meV_per_atom']:.1f} | "
                f"{e['energy_rmse_meV_per_atom']:.1f} | {e['force_rmse_meV_per_A']:.0f} | "
                f"{e['force_rms_label_meV_per_A']:.0f} | {e['stress_rmse_meV_per_A3']:.2f} |"
            )
    curve = summary.get("co_curve") or {}
    if curve:
        tw, sw = curve["teacher_well"], curve["student_well"]
        lines += ["", f"CO on Pt(111), rigid scan: CHGNet's well at {tw['height_A']:.2f} A, {tw['depth_eV']:.3f} eV "
                      f"deep; pet-distilled's at {sw['height_A']:.2f} A, {sw['depth_eV']:.3f} eV deep."]
    r = summary.get("relax_co") or {}
    if r:
        lines.append(f"FIRE2 from {r['start_height_A']} A (bottom two Pt layers fixed, fmax "
                     f"{r['fmax_target_eV_per_A']} eV/A): {'converged' if r['converged'] else 'not converged'} in "
                     f"{r['steps']} steps, C {r['c_height_above_top_pt_A']:.3f} A above the top Pt "
                     f"({r['c_lateral_offset_A']:.3f} A off the site), C-O {r['co_bond_A']:.3f} A.")
    return "\n".join(lines)
