"""Shared checks of the engine tests (imported by them; tests/engines is on sys.path under pytest)."""

import numpy as np

from tcemu.mlip.report import THRESHOLDS

#: an emulated result may be this many times FP32's own error against FP64 (the validation suite's factor)
FP32_NOISE_FACTOR = THRESHOLDS["single_point_factor"]


def fp32_ulp(x: float) -> float:
    """One FP32 unit in the last place at ``x``: the floor of an energy's FP32 error."""
    return float(np.spacing(np.float32(abs(x))))


def assert_fp32_accurate(e: float, f: np.ndarray, e32: float, f32: np.ndarray, e64: float, f64: np.ndarray) -> None:
    """Energy and forces within FP32_NOISE_FACTOR x FP32's own error against FP64 (the energy's error at least
    one FP32 ulp, the force error at least 1e-7 eV/A: FP32's error can be 0 by luck on tiny systems)."""
    e_ref = max(abs(e32 - e64), fp32_ulp(e64))
    f_ref = max(float(np.linalg.norm(f32 - f64, axis=1).mean()), 1e-7)
    assert abs(e - e64) <= FP32_NOISE_FACTOR * e_ref, (e, e32, e64)
    assert float(np.linalg.norm(f - f64, axis=1).mean()) <= FP32_NOISE_FACTOR * f_ref
