#!/usr/bin/env bash
# Report-level benchmarks, printed as ratios from one run (strict replay, so no model weights needed):
#  1. the workbook's run_eval vs `adk eval` on the same evalset, config, agent and recordings;
#  2. a cold report (empty outputs folder: every notebook runs) vs a warm one (all jobs skipped),
#     with the peak memory of the cold run (largest process, from GNU time).
# Usage: bash benchmarks/bench_report.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export WORKBOOK_RECORD_MODE=replay
now() { date +%s.%N; }
t0=$(now)
.venv/bin/adk eval agents/lore_archivist data/evalsets/final.evalset.json \
  --config_file_path data/configs/final_reference.json > /dev/null 2>&1 || true  # exit 1 = some case failed
t1=$(now)
.venv/bin/python -c "
import helpers
helpers.run_eval(helpers.build_archivist('v4', model='local/qwen-0.5b'), 'final', 'final_reference',
                 prompt_version='v4', run_id='bench-run-eval', show_findings=False)" > /dev/null 2>&1
t2=$(now)
out=$(mktemp -d)
/usr/bin/time -v env WORKBOOK_OUTPUTS="$out" .venv/bin/python -m helpers report > /dev/null 2> "$out/time.txt"
t3=$(now)
WORKBOOK_OUTPUTS="$out" .venv/bin/python -m helpers report > /dev/null 2>&1
t4=$(now)
python3 - "$t0" "$t1" "$t2" "$t3" "$t4" "$out/time.txt" <<'PY'
import re, sys
t0, t1, t2, t3, t4 = map(float, sys.argv[1:6])
peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(sys.argv[6]).read())
print(f"adk eval {t1 - t0:.1f}s vs run_eval {t2 - t1:.1f}s on final/final_reference (replay): ratio {(t2 - t1) / (t1 - t0):.2f}")
print(f"cold report {t3 - t2:.1f}s vs warm report {t4 - t3:.1f}s: ratio {(t3 - t2) / (t4 - t3):.0f}x")
print(f"peak memory of the cold report's largest process: {int(peak.group(1)) / 1024:.0f} MiB" if peak else "peak memory: n/a")
PY
