"""tcemu.ase / tcemu.torchsim / tcemu.autoload tests: small models on the CPU, compared with FP32 and FP64."""

import pytest

pytest.importorskip("ase", reason="tcemu.ase needs ase")

@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
