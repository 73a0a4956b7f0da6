#!/usr/bin/env bash
# Prints the fault table from a results file of JSON lines
# {"fault","ok","steps_lost","max_pause_s"[,"failover_s"]} (tests/chaos writes them when
# ARYL_CHAOS_RESULTS is set; `./dev chaos N` runs them).
set -euo pipefail
file="${1:?usage: chaos-table.sh RESULTS.jsonl}"
awk '
  function field(line, name,   m) {
    if (match(line, "\"" name "\":(\"[^\"]*\"|[^,}]*)")) {
      m = substr(line, RSTART + length(name) + 3, RLENGTH - length(name) - 3)
      gsub(/"/, "", m)
      return m
    }
    return ""
  }
  {
    f = field($0, "fault"); order[f] = order[f] ? order[f] : ++n; names[order[f]] = f
    runs[f]++
    if (field($0, "ok") == "true") ok[f]++
    s = field($0, "steps_lost") + 0; if (s > lost[f]) lost[f] = s
    p = field($0, "max_pause_s") + 0; if (p > pause[f]) pause[f] = p
    fo = field($0, "failover_s")
    if (fo != "") { nfo[f]++; fos[f, nfo[f]] = fo + 0 }
  }
  END {
    printf "| fault | runs | job finished with the right result | most steps lost | max pause (s) | failover p50 / max (s) |\n"
    printf "|---|---|---|---|---|---|\n"
    for (i = 1; i <= n; i++) {
      f = names[i]
      fo = "-"
      if (nfo[f] > 0) {
        # insertion sort of the failover times of this fault
        for (a = 2; a <= nfo[f]; a++) { v = fos[f, a]; b = a - 1
          while (b >= 1 && fos[f, b] > v) { fos[f, b + 1] = fos[f, b]; b-- }
          fos[f, b + 1] = v }
        fo = sprintf("%.2f / %.2f", fos[f, int((nfo[f] + 1) / 2)], fos[f, nfo[f]])
      }
      printf "| %s | %d | %d/%d | %d | %.1f | %s |\n", f, runs[f], ok[f] + 0, runs[f], lost[f], pause[f], fo
    }
  }' "$file"
