"""The composing layer, and the only one: each workflow runs the pieces in order and hands each the previous
one's result.

One module per workflow (``bench``, ``roofline``, ``export``, ``calibrate``,
``audit``, ``serve``, ``profile``, ``fleet``, ``ops``, ``validate``,
``codegen``): typed options in, a result out
whose ``exit_code`` comes from ``outcome``. ``tileops bench`` = measure
(``tileops.bench``) -> price once (``tileops.roofline``) -> table, plot,
roofline.json (``tileops.report``) -> metrics (``tileops.export``). The layers
below never call each other upward, and the command line above only parses
arguments into these options (a test holds it to that). docs/architecture.md
draws it.
"""
