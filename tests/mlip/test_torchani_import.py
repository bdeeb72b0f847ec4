"""torchani 2.2.4 imports without pkg_resources (setuptools 82 removed it), so the mlip extra needs no setuptools pin."""

import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def test_ani1x_builds_where_pkg_resources_is_missing():
    code = (
        "import sys; sys.modules['pkg_resources'] = None\n"  # what an environment with setuptools >= 82 has
        "from tcemu.mlip import models\n"
        "m = models.build_ani1x()\n"
        "import torchani; assert torchani.__version__ == '2.2.4', torchani.__version__\n"
        "assert sys.modules['pkg_resources'] is None  # the import-time answer is gone again\n"
        "print(sum(p.numel() for p in m.parameters()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split()[-1]) > 2.5e6
