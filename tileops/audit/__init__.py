"""The read-side bytes audit (§4.5): an op's declared read half against DRAM counters.

Each manifest row runs in its own child process under Nsight Compute
(``ncu``): the op is warmed up outside the profiled range, then one call runs
inside an NVTX range (domain ``tileops``) with every cache cold on each kernel
replay. The DRAM bytes read by every kernel of that call are summed and
compared with ``Op.eval_roofline_read_bytes()`` of the same call.

Modules, in the order data flows through them:

* ``plan``      which rows to audit (the bench's selection) and how a row is built
* ``ncu``       finding ncu, the command line, what its output says went wrong
* ``child``     the audited process: ``python -m tileops.audit.child`` (runs under ncu)
* ``facts``     the call the child measured, as plain JSON (what ``when`` and the verdict read)
* ``reports``   reading a report: the ``ncu_report`` module, or ncu's raw-page CSV
* ``condition`` an EXEMPT ``when``: checked by the manifest's expression rules, then evaluated
* ``config``    the EXEMPT configuration under ``audit/`` (pydantic, errors located by line)
* ``verdict``   tolerances and the verdict (pure functions)
* ``entry``     one audited row as ``audit.jsonl`` stores it (standard library)
* ``render``    JSON, CSV and markdown of the entries
* ``run``       the driver: every row in turn, each written as soon as it is judged
"""
