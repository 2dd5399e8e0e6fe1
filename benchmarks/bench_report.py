"""Report benchmark, from one run, in strict replay (no model weights needed): the report grid serial
(`--workers 1`: one job after another) vs parallel (a local Dask cluster, one worker per core), each
into an empty temporary outputs folder, then a warm rerun of the parallel one (every job skipped), and the
peak memory of the serial report's largest process (a notebook kernel).

Prints `RATIO replay_report_parallel_vs_serial <parallel / serial wall time>` (goal <= 0.6), after
checking that both wrote the same run tables: a faster report with other tables would mean nothing.

Usage: .venv/bin/python benchmarks/bench_report.py [grid.yaml] [--workers N]
"""

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from workbook.grid_file import DEFAULT_GRID
from workbook.settings import settings


def timed_report(outputs: Path, *arguments: str) -> float:
    """Return the wall seconds of `python -m helpers report` into `outputs` (strict replay)."""
    environment = {**os.environ, "WORKBOOK_OUTPUTS": str(outputs), "WORKBOOK_RECORD_MODE": "replay"}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "helpers", "report", *arguments], env=environment, capture_output=True, text=True
    )
    seconds = time.perf_counter() - started
    if done.returncode:
        sys.exit(f"the report failed ({' '.join(arguments)}):\n{done.stderr[-3000:]}")
    return seconds


def run_tables(outputs: Path) -> dict[str, str]:
    """Return every run table a report wrote, by its path under the outputs folder."""
    return {str(path.relative_to(outputs)): path.read_text() for path in sorted(outputs.glob("runs/*/table.csv"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("grid_file", nargs="?", default=str(DEFAULT_GRID))
    parser.add_argument("--workers", type=int, default=settings().workbook_grid_workers)
    args = parser.parse_args()
    subprocess.run([sys.executable, "-c", "import helpers"], check=True)  # neither run pays for a cold disk cache
    with tempfile.TemporaryDirectory(prefix="bench-report-") as folder:
        serial_outputs, parallel_outputs = Path(folder, "serial"), Path(folder, "parallel")
        serial = timed_report(serial_outputs, args.grid_file, "--workers", "1")
        largest = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # MiB: the largest process so far
        parallel = timed_report(parallel_outputs, args.grid_file, "--workers", str(args.workers))
        warm = timed_report(parallel_outputs, args.grid_file, "--workers", str(args.workers))
        tables = run_tables(serial_outputs)
        if not tables or run_tables(parallel_outputs) != tables:
            sys.exit("the parallel report's run tables differ from the serial report's")
    print(
        f"replayed report: serial {serial:.1f}s, parallel {parallel:.1f}s on {args.workers} workers, warm {warm:.1f}s"
    )
    print(
        f"(same {len(tables)} run tables; {os.cpu_count()} cores; largest process of the serial report {largest:.0f} MiB)"
    )
    print(f"RATIO replay_report_parallel_vs_serial {parallel / serial:.2f}")


if __name__ == "__main__":
    main()
