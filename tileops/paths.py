"""Where the shipped data lives: the repo in a checkout, the package when installed."""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent
_REPO = _PKG.parent


def data_dir(name: str) -> Path:
    """``manifest``, ``profiles``, ``audit`` or ``exporters``.

    A checkout (``pyproject.toml`` beside the package) reads the repo's folder, so
    edits show at once; an installed wheel reads ``tileops/_data/<name>``.
    """
    repo = _REPO / name
    if (_REPO / "pyproject.toml").exists() and repo.is_dir():
        return repo
    return _PKG / "_data" / name


def repo_root() -> Path | None:
    """The checkout's root, or None when running from an installed wheel."""
    return _REPO if (_REPO / "pyproject.toml").exists() else None
