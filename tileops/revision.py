"""The one reader of the code's git revision, for records and ``tileops_build_info``.

An image has no ``.git``: its build passes ``TILEOPS_GIT_REVISION`` into the
environment. A checkout's revision is read from the ``.git`` files themselves,
without forking git, because an exporter answers it on every scrape; only the
bench asks whether the tree is dirty, once per run.
"""

from __future__ import annotations

import os
import subprocess
from functools import lru_cache
from pathlib import Path

from tileops.paths import repo_root

ENV_VAR = "TILEOPS_GIT_REVISION"


@lru_cache(maxsize=1)
def _head_commit() -> str | None:
    root = repo_root()
    if root is None:
        return None
    git = root / ".git"
    try:
        if git.is_file():  # a worktree or submodule: "gitdir: <path>"
            text = git.read_text(encoding="utf-8").strip()
            if not text.startswith("gitdir: "):
                return None
            git = (root / text[len("gitdir: "):]).resolve()
        head = (git / "HEAD").read_text(encoding="utf-8").strip()
        if not head.startswith("ref: "):
            return head or None
        ref = head[len("ref: "):]
        for base in (git, _common_dir(git)):
            ref_file = base / ref
            if ref_file.is_file():
                return ref_file.read_text(encoding="utf-8").strip() or None
            packed = base / "packed-refs"
            if packed.is_file():
                for line in packed.read_text(encoding="utf-8").splitlines():
                    sha, _, name = line.partition(" ")
                    if name == ref:
                        return sha
    except OSError:
        return None
    return None


def _common_dir(git: Path) -> Path:
    """A linked worktree keeps its branches in the main repository's git directory."""
    try:
        return (git / (git / "commondir").read_text(encoding="utf-8").strip()).resolve()
    except OSError:
        return git


def git_revision(*, check_dirty: bool = False) -> str | None:
    """12 hex digits of the code's commit (``-dirty`` appended when asked and the tree has edits),
    ``$TILEOPS_GIT_REVISION`` in an image, or None when neither exists."""
    env = os.environ.get(ENV_VAR)
    if env:
        return env
    head = _head_commit()
    if head is None:
        return None
    rev = head[:12]
    if check_dirty and _dirty():
        rev += "-dirty"
    return rev


def _dirty() -> bool:
    root = repo_root()
    try:
        out = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and bool(out.stdout.strip())
