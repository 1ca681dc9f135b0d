"""The composing layer: it runs the pieces in order and hands each the previous one's result.

``tileops bench`` = measure (``tileops.bench``) -> price once (``tileops.roofline``)
-> table, plot, roofline.json (``tileops.report``) -> metrics (``tileops.export``).
The layers below never call each other upward; only this package (and the
command-line layer above it) knows the whole flow. docs/architecture.md draws it.
"""
