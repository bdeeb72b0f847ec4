"""MMA-Sim's source for benchmarks/mmasim_diff.py: fetched at the stated commit into a throwaway folder, or a given
checkout verified to be that commit's files. None of MMA-Sim's code is part of tcemu."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import tempfile
from pathlib import Path

MMASIM_COMMIT = "c78513835c8b2ae61b35062afce4c4255bc6901c"  # microsoft/MMA-Sim c785138
MMASIM_TREE = "be0a2d03c3a6b94e1a003188bfce77c3afee8851"  # git rev-parse c785138^{tree}


def _git(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], capture_output=True, check=True, env=env)


def _git_dir(src: str) -> str:
    """The git directory of ``src``: a bare repository (HEAD and objects/ inside) or a checkout (.git inside)."""
    path = Path(src)
    if (path / "HEAD").is_file() and (path / "objects").is_dir():
        return str(path)
    if (path / ".git").exists():
        return str(path / ".git")
    raise ValueError(f"{src} is neither a bare git repository nor a checkout")


def fetch_mmasim(src: str, dest: str | None = None) -> Path:
    """MMA-Sim at :data:`MMASIM_COMMIT` extracted (``git archive``) from ``src`` (a local repository, bare or
    checked out, or a URL to clone) into ``dest`` or a new temporary folder; returns the folder to import from.
    Refuses an archive whose embedded commit id is another."""
    out = Path(dest or tempfile.mkdtemp(prefix="mmasim-"))
    out.mkdir(parents=True, exist_ok=True)
    if Path(src).exists():
        git_dir = _git_dir(src)
    else:  # a URL: a bare clone beside the extracted files
        git_dir = str(out / "clone.git")
        _git("clone", "--bare", "--quiet", src, git_dir)
    tar = _git(f"--git-dir={git_dir}", "archive", MMASIM_COMMIT).stdout
    embedded = subprocess.run(["git", "get-tar-commit-id"], input=tar, capture_output=True).stdout.decode().strip()
    if embedded != MMASIM_COMMIT:
        raise RuntimeError(f"git archive of {src} carries commit {embedded or '?'}, not {MMASIM_COMMIT}")
    target = out / "src"
    with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
        tf.extractall(target, filter="data")
    return target


def tree_id(path: str) -> str:
    """The git tree id of the files under ``path`` (``__pycache__`` left out), as ``git write-tree`` gives it."""
    with tempfile.TemporaryDirectory(prefix="mmasim-tree-") as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _git("init", "--quiet", "--bare", tmp)
        _git(f"--git-dir={tmp}", f"--work-tree={path}", "add", "-A", "--", ".",
             ":(exclude,glob)**/__pycache__/**", env=env)
        return _git(f"--git-dir={tmp}", "write-tree", env=env).stdout.decode().strip()


def verify_checkout(path: str) -> str | None:
    """None if the files under ``path`` are exactly MMA-Sim's at :data:`MMASIM_COMMIT`, else why not (or why it
    could not be checked)."""
    try:
        got = tree_id(path)
    except (OSError, subprocess.CalledProcessError) as exc:
        return f"could not compute the git tree id of {path} ({type(exc).__name__}): not verified"
    if got != MMASIM_TREE:
        return (f"the files under {path} (git tree {got[:12]}) are not MMA-Sim's at {MMASIM_COMMIT[:7]} (tree "
                f"{MMASIM_TREE[:12]}): another commit, or changed or added files")
    return None
