"""benchmarks/cutlass_3xtf32/build.py: where it finds CUTLASS's headers (the nvidia-cutlass wheel, unpacked or not,
or a checkout), and its error where there are none. The nvcc build itself runs on the GPU machine."""

import importlib.util
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _build_module():
    spec = importlib.util.spec_from_file_location("tcemu_cutlass_3xtf32_build",
                                                  ROOT / "benchmarks" / "cutlass_3xtf32" / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_headers_from_the_wheel_file_its_folder_or_a_checkout(tmp_path):
    b = _build_module()
    wheel = tmp_path / "nvidia_cutlass-0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(f"{b.WHEEL_INCLUDE}/cutlass/cutlass.h", "// header\n")
        z.writestr("cutlass_library/other.py", "")
    inc = b.include_dir(wheel, tmp_path / "scratch")
    assert (inc / "cutlass" / "cutlass.h").is_file() and inc.name == "include"
    assert not (tmp_path / "scratch" / "nvidia_cutlass" / "cutlass_library" / "other.py").exists()  # headers only
    assert b.include_dir(tmp_path / "scratch" / "nvidia_cutlass", tmp_path) == inc
    checkout = tmp_path / "cutlass"
    (checkout / "include" / "cutlass").mkdir(parents=True)
    (checkout / "include" / "cutlass" / "cutlass.h").write_text("")
    assert b.include_dir(checkout, tmp_path) == checkout / "include"
    with pytest.raises(FileNotFoundError, match="nvidia-cutlass"):
        b.include_dir(tmp_path / "empty", tmp_path)


def test_the_source_declares_example_27s_configuration():
    src = (ROOT / "benchmarks" / "cutlass_3xtf32" / "gemm_3xtf32.cu").read_text()
    for piece in ("OpMultiplyAddFastF32", "GemmShape<128, 64, 16>", "GemmShape<64, 32, 16>", "GemmShape<16, 8, 8>",
                  "3, 4, 4, false", 'extern "C" int tcemu_cutlass_3xtf32_nt', 'extern "C" int tcemu_cutlass_3xtf32_nn'):
        assert piece in src
