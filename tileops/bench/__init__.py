"""The benchmark layer (M4): measurement and nothing else (spec §5.2).

Selection (``select``), the sweep and its run directory (``sweep``), workers
(``worker``), one row's measurement (``execute``), timers (``timers``), the CUPTI
trace's attribution (``cupti``) and the stopping rule (``stopping``). It imports the standard library, torch, and the
project's ops, device description and record contract — no pricing, no
reports, no metrics, no third-party library — so its output (records) can be
re-analysed by any consumer later. A test holds it to that.
"""
