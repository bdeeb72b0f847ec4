"""tcemu.ase / tcemu.torchsim / tcemu.autoload tests: small models on the CPU, compared with FP32 and FP64."""

import pytest

pytest.importorskip("ase", reason="tcemu.ase needs ase")
