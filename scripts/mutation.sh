#!/usr/bin/env bash
# Mutation testing (mutmut) of the safety-critical modules against the fast layer: ownership,
# secrets and redaction, the spec loader and rules, Deployment removal and adoption, stream
# teardown, the prune guard (pyproject.toml [tool.mutmut]). Not part of CI: a full run takes
# tens of minutes on 2 cores. Results are cached in mutants/ (by content): a second run only
# tries what changed.
#
#   bash scripts/mutation.sh                          # every module
#   bash scripts/mutation.sh "controllers.ownership*" # one module (mutmut name patterns)
#
# Prints killed / survived / timed out / no test per module with the score (killed out of
# all tried), then each survivor's diff. Equivalent survivors are listed with why in
# tests/mutation-survivors.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
.venv/bin/mutmut run "$@" >/tmp/rtvi-mutmut.log 2>&1 || {
  echo "mutmut run failed; its output: /tmp/rtvi-mutmut.log" >&2; tail -20 /tmp/rtvi-mutmut.log >&2; exit 1; }
.venv/bin/python - "$@" <<'PY'
import re
import subprocess
import sys
from collections import Counter, defaultdict

patterns = sys.argv[1:]
out = subprocess.run([".venv/bin/mutmut", "results", "--all", "true"], capture_output=True,
                     text=True, check=True).stdout
counts: dict[str, Counter[str]] = defaultdict(Counter)
survivors = []
for line in out.splitlines():
    name, sep, status = line.strip().rpartition(": ")
    if not sep or "__mutmut_" not in name:
        continue
    module = re.split(r"\.x[_ǁ]", name, maxsplit=1)[0]
    counts[module][status] += 1
    if status == "survived":
        survivors.append(name)
print(f"{'MODULE':34} {'KILLED':>7} {'SURVIVED':>9} {'TIMEOUT':>8} {'NO TEST':>8} "
      f"{'NOT RUN':>8} {'SCORE':>6}")
total = Counter()
for module in sorted(counts):
    c = counts[module]
    total.update(c)
    tried = c["killed"] + c["survived"] + c["timeout"] + c["no tests"]
    score = f"{100 * c['killed'] / tried:.0f}%" if tried else "-"
    print(f"{module:34} {c['killed']:7} {c['survived']:9} {c['timeout']:8} {c['no tests']:8} "
          f"{c['not checked']:8} {score:>6}")
tried = total["killed"] + total["survived"] + total["timeout"] + total["no tests"]
if tried:
    print(f"{'all':34} {total['killed']:7} {total['survived']:9} {total['timeout']:8} "
          f"{total['no tests']:8} {total['not checked']:8} "
          f"{100 * total['killed'] / tried:5.0f}%")
for name in survivors:
    diff = subprocess.run([".venv/bin/mutmut", "show", name], capture_output=True, text=True)
    print(f"\n--- survived: {name}")
    print("\n".join(l for l in diff.stdout.splitlines() if l.startswith(("-", "+", "@@"))))
PY
