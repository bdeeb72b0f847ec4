"""The figures of the report: readable titles that fit the figure, and the pass threshold drawn in every plot."""

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from _mlip_results import nve_check, relax_check

from tcemu.mlip import plots
from tcemu.mlip.criteria import nve_thresholds, relax_step_threshold, single_point_threshold
from tcemu.mlip.tasks.energy_curve import EnergyCurveResult
from tcemu.mlip.tasks.single_point import SinglePointError, SinglePointResult


def _single_point(potential="pet-distilled-random"):
    def err(m, ref, de):
        return SinglePointError(m, ref, de, de / 192e-3, 1e-5 * (1 + 100 * de), 2e-5, 1e-8, 2e-8)

    shifts = {"fp32": 1e-5, "tf32": 3e-2, "tf32x3": 1e-5}
    return SinglePointResult(potential, "water_192", 192, "permute", err("fp32", "fp32", 3e-6),
                             tuple(err(m, "fp64", d) for m, d in shifts.items()),
                             {"fp64": -100.0, **{m: -100.0 + d for m, d in shifts.items()}}, {})


def _curve():
    h = tuple(np.linspace(1.2, 6.0, 12))
    e = np.exp(-np.asarray(h))
    rng = np.random.default_rng(0)
    return EnergyCurveResult("pet-distilled", "pt111_co_38", 38, h, {
        "fp64": tuple(e), "fp32": tuple(e + 1e-8 * rng.standard_normal(12)),
        "tf32": tuple(e + 1e-6 * rng.standard_normal(12))})


def _figure(result, tmp_path):
    """Draw ``result``'s figure as the report saves it, and keep it open to inspect."""
    plt = plots._plt()
    before = set(plt.get_fignums())
    orig_close = plt.close
    plt.close = lambda fig=None: None
    try:
        plots.save_check_figures(result, tmp_path, "fig")
    finally:
        plt.close = orig_close
    (num,) = set(plt.get_fignums()) - before
    return plt.figure(num)


def _titles_fit(fig):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    width = fig.bbox.width
    texts = [ax.title for ax in fig.axes] + ([fig._suptitle] if fig._suptitle is not None else [])
    for t in texts:
        box = t.get_window_extent(renderer)
        assert box.x0 >= -1 and box.x1 <= width + 1, (t.get_text(), box, width)
        assert "_" not in t.get_text().replace("E_FP64", ""), t.get_text()  # no raw names such as water_192
    return " ".join(t.get_text() for t in texts)


def _labels(fig):
    return [line.get_label() for ax in fig.axes for line in ax.get_lines()]


def test_single_point_figure_names_random_weights_and_draws_the_threshold(tmp_path):
    sp = _single_point()
    fig = _figure(sp, tmp_path)
    text = _titles_fit(fig)
    assert "(random weights)" in text and "water, 192 atoms" in text
    assert not any("not discriminating" in lab for lab in _labels(fig))
    ys = [line.get_ydata()[0] for ax in fig.axes for line in ax.get_lines() if "pass threshold" in line.get_label()]
    assert ys == pytest.approx([single_point_threshold(sp, m) for m in
                                ("force_mean_err", "energy_abs_err", "stress_mean_err")])
    plots._plt().close(fig)


def test_an_energy_threshold_set_by_the_ulp_is_labelled_not_discriminating(tmp_path):
    sp = _single_point("ani1x")
    sp = type(sp)(**{**sp.__dict__, "energies_eV": {m: e - 133_000.0 for m, e in sp.energies_eV.items()}})
    fig = _figure(sp, tmp_path)
    assert any(lab.endswith("3 x one FP32 ulp of E (not discriminating here)") for lab in _labels(fig))
    plots._plt().close(fig)


def test_curve_figure_draws_the_jitter_threshold_and_a_long_title_wraps(tmp_path):
    fig = _figure(_curve(), tmp_path)
    text = _titles_fit(fig)
    assert "PET distilled from CHGNet" in text and "CO pulled off Pt(111), 38 atoms" in text
    assert any("pass threshold" in lab for lab in _labels(fig))
    plots._plt().close(fig)


def test_nve_figure_marks_a_drift_threshold_that_does_not_discriminate(tmp_path):
    t = np.linspace(0, 0.05, 11)
    base = 24e-3 * (0.1 * np.sin(2 * np.pi * t / 0.013) + 2.4 * t)
    n = nve_check(t, {"fp64": base, "fp32": base + 1e-6 * t, "tf32": base + 1e-3 * t})
    fig = _figure(n, tmp_path)
    text = _titles_fit(fig)
    assert "ANI-1x on water cluster, 24 atoms" in text
    labels = _labels(fig)
    thr = nve_thresholds(n)
    assert f"drift threshold +-{thr['drift']:.2g} meV/atom/ps (not discriminating here)" in labels
    assert any(lab.startswith("pass threshold") for lab in labels)
    plots._plt().close(fig)


def test_relax_figure_draws_target_and_step_threshold(tmp_path):
    rc = relax_check({"fp64": 57, "fp32": 57, "tf32": 86})
    fig = _figure(rc, tmp_path)
    _titles_fit(fig)
    labels = _labels(fig)
    assert "pass: fmax reaches 0.001 eV/A" in labels
    assert f"pass: median steps <= {relax_step_threshold(rc):.4g}" in labels
    plots._plt().close(fig)
