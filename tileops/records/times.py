"""The contract's reading of a time: one parser, shared by the standard decoder and msgspec's mirror.

It lives apart from both so that neither reader imports the other for it (``tileops.records.decode`` asks
``tileops.records.fast`` for its reader; the mirror must parse times exactly as the decoder does).
"""

from __future__ import annotations

from datetime import datetime


def parse_time(text: str) -> datetime:
    """An ISO 8601 time as the contract reads it; ValueError otherwise."""
    return datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)  # 3.10 reads no 'Z'
