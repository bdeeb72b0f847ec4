"""The five checks. Each takes a :class:`~tcemu.mlip.models.Potential`, a structure and a list of methods,
and returns a frozen result with ``to_rows()`` (long-format CSV rows) and unit-carrying field names."""

from tcemu.mlip.tasks.energy_curve import EnergyCurveResult, energy_curve, second_difference_stats
from tcemu.mlip.tasks.nve import NVECheckResult, NVEResult, nve_check, run_nve
from tcemu.mlip.tasks.relax import RelaxCheckResult, RelaxResult, relax, relax_check
from tcemu.mlip.tasks.second_order import SecondOrderConfig, SecondOrderResult, second_order
from tcemu.mlip.tasks.single_point import (
    Evaluation,
    SinglePointError,
    SinglePointResult,
    evaluate,
    single_point,
)

__all__ = [
    "EnergyCurveResult",
    "Evaluation",
    "NVECheckResult",
    "NVEResult",
    "RelaxCheckResult",
    "RelaxResult",
    "SecondOrderConfig",
    "SecondOrderResult",
    "SinglePointError",
    "SinglePointResult",
    "energy_curve",
    "evaluate",
    "nve_check",
    "relax",
    "relax_check",
    "run_nve",
    "second_order",
    "second_difference_stats",
    "single_point",
]
