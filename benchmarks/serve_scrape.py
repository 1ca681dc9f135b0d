"""`tileops serve` scrape cost at 100,000 records: the first render, then scrapes of an unchanged tree.

Goal (issue 18 item 4): a scrape after the first render takes under 200 ms at
100k records. The exporter keeps the rendered page keyed by the stamps of its
input files, so an unchanged tree costs a directory walk and a few ``stat``
calls. Printed side by side in one run: the first scrape (read, price, render),
the median cached scrape, and what a scrape would cost if it rendered every
time (the same snapshots re-rendered), with their ratio; and the process's peak
memory after loading the run.

    python benchmarks/serve_scrape.py [--records 100000] [--scrapes 20]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from export_support import T0, env, profile, record  # records built from the contracts

from tileops.export.metrics import exposition
from tileops.export.server import DirectorySource
from tileops.profiles import ProfileChooser
from tileops.records import RunInfo, to_json, write_run_info


def write_big_run(run_dir: Path, n: int) -> None:
    run_dir.mkdir(parents=True)
    e = env(run_id="big")
    with open(run_dir / "records.jsonl", "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(to_json(record(f"op{i % 40}", f"shape{i}", bytes_=8_000_000 + i, flops=1000 * i + 1,
                                   seconds=1e-3 * (1 + i % 7), e=e)) + "\n")
    write_run_info(run_dir, RunInfo(run_id="big", started_at=T0, finished_at=T0 + timedelta(hours=1),
                                    status="completed", exit_code=0, rows_total=n, rows_ok=n))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--scrapes", type=int, default=20)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "results"
        t0 = time.perf_counter()
        write_big_run(root / "big", args.records)
        size = (root / "big" / "records.jsonl").stat().st_size
        print(f"records {args.records}, file {size / 1e6:.0f} MB, written in {time.perf_counter() - t0:.1f} s")

        chooser = ProfileChooser([profile()])
        source = DirectorySource(root, lambda: chooser, log=lambda msg: None)
        t0 = time.perf_counter()
        body = source.metrics()
        first = time.perf_counter() - t0
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

        cached = []
        for _ in range(args.scrapes):
            t0 = time.perf_counter()
            again = source.metrics()
            cached.append(time.perf_counter() - t0)
            assert again is body
        snaps = source.scan()
        uncached = []
        for _ in range(max(3, args.scrapes // 5)):
            t0 = time.perf_counter()
            source.scan()
            exposition(snaps)
            uncached.append(time.perf_counter() - t0)

    med, raw = statistics.median(cached), statistics.median(uncached)
    print(f"exposition {len(body) / 1e6:.1f} MB; peak memory after the first scrape {peak_mb:.0f} MB")
    print(f"first scrape (read, price, render)   {first * 1e3:9.1f} ms")
    print(f"scrape, unchanged tree (median)      {med * 1e3:9.1f} ms   goal < 200 ms: {'PASS' if med < 0.2 else 'FAIL'}")
    print(f"scrape re-rendering every time       {raw * 1e3:9.1f} ms")
    print(f"ratio re-render / cached             {raw / med:9.1f}x")


if __name__ == "__main__":
    main()
