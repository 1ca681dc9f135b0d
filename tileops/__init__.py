"""TileOps: speed-of-light (roofline) efficiency of GPU ops, per device, across a fleet."""

__version__ = "0.1.0"
