"""How long the committed recordings took to make: the live model time a `make report LIVE=1`
from an empty cassette folder would spend, per model and per kind of call.

Usage: .venv/bin/python benchmarks/recording_cost.py
The latencies are the ones measured when each call was recorded (on a 2-core CPU for the local
models), so the total is a measurement, not an estimate; calls recorded while another model
process competed for the cores are slower than they would be alone.
"""

import json
from collections import defaultdict

from workbook.settings import DATA


def main() -> None:
    seconds: dict[tuple[str, str], float] = defaultdict(float)
    calls: dict[tuple[str, str], int] = defaultdict(int)
    for cassette in sorted(DATA.joinpath("recordings").glob("*.jsonl")):
        for line in cassette.read_text().splitlines():
            entry = json.loads(line)
            kind = entry["reply"].get("constrained") or "agent"
            key = (entry["model"], {"grammar": "judge", "json_schema": "judge"}.get(kind, kind))
            seconds[key] += entry["reply"].get("latency_s") or 0.0
            calls[key] += 1
    total = sum(seconds.values())
    for (model, kind), value in sorted(seconds.items()):
        print(f"{model:<22} {kind:<6} {calls[(model, kind)]:>5} calls {value / 60:7.1f} min")
    print(f"{'all':<29} {sum(calls.values()):>5} calls {total / 60:7.1f} min of live model time")


if __name__ == "__main__":
    main()
