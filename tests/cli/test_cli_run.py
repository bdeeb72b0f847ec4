"""`tcemu run` behaves as `python`: the script's sys.exit message and status, `-m` from the current folder, the
script's own traceback; tcemu's bad arguments are one error line with exit status 2."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tcemu.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def _env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("TCEMU_")}
    env["PYTHONPATH"] = str(ROOT / "src")
    return env


#: what the installed ``tcemu`` command runs: a file in another folder (its folder is sys.path[0], not the current
#: folder, as for a console script); ``PRELUDE`` lets a test change tcemu before the command runs
LAUNCHER = """import os, sys
exec(os.environ.get("PRELUDE", ""))
from tcemu.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def _tcemu_run(args, cwd, prelude=""):
    launcher = Path(cwd).parent / "bin" / "tcemu_command.py"
    launcher.parent.mkdir(exist_ok=True)
    launcher.write_text(LAUNCHER)
    return subprocess.run([sys.executable, str(launcher), "run", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env=_env() | {"PRELUDE": prelude})


def _python(args, cwd):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, cwd=cwd, env=_env())


def test_a_scripts_exit_message_warning_and_traceback_are_pythons(tmp_path):
    (tmp_path / "leave.py").write_text("import sys, warnings\nwarnings.warn('careful')\nsys.exit('bad input file')\n")
    (tmp_path / "fail.py").write_text("def f():\n    raise KeyError('missing')\n\nf()\n")
    for script, last in (("leave.py", "bad input file"), ("fail.py", "KeyError: 'missing'")):
        got, want = _tcemu_run([script], tmp_path), _python([script], tmp_path)
        assert got.returncode == want.returncode == 1
        assert got.stderr == want.stderr, script  # same lines: warning, message or traceback (absolute paths)
        assert got.stderr.splitlines()[-1] == last


def test_dash_m_finds_a_module_in_the_current_folder(tmp_path):
    (tmp_path / "md_here.py").write_text("import sys\nprint('ran', __name__, sys.argv[1:])\n")
    got = _tcemu_run(["-m", "md_here", "--steps", "3"], tmp_path)
    assert got.returncode == 0, got.stderr
    want = _python(["-m", "md_here", "--steps", "3"], tmp_path)
    assert got.stdout == want.stdout == "ran __main__ ['--steps', '3']\n"


@pytest.mark.parametrize("command", [["accuracy", "--shapes", "16x16x16"], ["validate", "--smoke"]])
@pytest.mark.parametrize("value", [str(2**64), "-1", "1e3"])
def test_a_seed_out_of_range_is_a_usage_error(command, value, capsys):
    assert main([*command, "--seed", value]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "argument --seed" in err


def test_a_bad_method_is_one_error_line_without_the_setups_warnings(tmp_path):
    """A warning of tcemu's own setup is not printed before the error line of a bad argument (and is printed
    when the setup works)."""
    prelude = ("import warnings, tcemu.autoload as a; parse = a.parse_precision\n"
               "def warning_parse(text):\n    warnings.warn('a warning of the setup')\n    return parse(text)\n"
               "a.parse_precision = warning_parse\n")
    (tmp_path / "s.py").write_text("print('ran')\n")
    bad = _tcemu_run(["--method", "tf33x3", "s.py"], tmp_path, prelude)
    assert bad.returncode == 2 and bad.stderr.startswith("tcemu run: error: --method")
    assert len(bad.stderr.splitlines()) == 1, bad.stderr
    good = _tcemu_run(["--method", "tf32x3", "s.py"], tmp_path, prelude)
    assert good.returncode == 0 and good.stdout == "ran\n" and "a warning of the setup" in good.stderr
