"""tcemu.mlip tests need the mlip extra (ase, metatrain, torchani, chgnet); skip the folder without it."""

import pytest

from tcemu.mlip._torchani import import_torchani  # noqa: E402  (torchani 2.2.4 where setuptools has no pkg_resources)

for _mod in ("ase", "metatrain", "metatomic_ase", "torchani", "chgnet", "matplotlib"):
    if _mod == "torchani":
        try:
            import_torchani()
        except ImportError as exc:
            pytest.skip(f"tcemu.mlip tests need the mlip extra (torchani: {exc})", allow_module_level=True)
    pytest.importorskip(_mod, reason=f"tcemu.mlip tests need the mlip extra ({_mod} missing)")


@pytest.fixture(scope="session")
def pet_tiny():
    from tcemu.mlip.models import pet

    return pet("tiny", seed=0)


@pytest.fixture(scope="session")
def ani():
    from tcemu.mlip.models import ani1x

    return ani1x()


@pytest.fixture(scope="session")
def water():
    from tcemu.mlip.systems import water_box

    return water_box()


@pytest.fixture(scope="session")
def small_water():
    """4 water molecules (12 atoms) in vacuum: a system ANI-1x evaluates in milliseconds."""
    from tcemu.mlip.systems import water_cluster

    return water_cluster(4)
