"""setuptools hook: put ``tcemu-autoload.pth`` at the top of the wheel (site-packages), beside the packages.

Everything else is in pyproject.toml. The ``.pth`` file runs ``_tcemu_autoload`` at interpreter start, which
does nothing unless ``TCEMU_FP32_PRECISION`` is set (``tcemu.autoload``).
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = Path(__file__).parent / "src" / "tcemu-autoload.pth"


class BuildPyWithPth(build_py):
    """build_py, plus the .pth file copied to the root of the build (and so of the wheel)."""

    def run(self) -> None:
        super().run()
        self.copy_file(str(PTH), str(Path(self.build_lib) / PTH.name), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH.name)]

    def get_output_mapping(self) -> dict[str, str]:  # editable installs map build outputs to sources with this
        return {**super().get_output_mapping(), str(Path(self.build_lib) / PTH.name): str(PTH)}


setup(cmdclass={"build_py": BuildPyWithPth})
