"""Where a device's theoretical ceilings come from, and whether a profile states them right.

``arch`` holds what one SM does per clock, per compute capability, with sources;
``facts`` what a GPU's driver reports (or what was published for a SKU);
``derive`` the ceilings those give; ``check`` a profile held against them
(``tileops profile check``); ``runtime`` the same for the device a run prices;
``peers`` a calibration held against what others measured on the same SKU.
"""
