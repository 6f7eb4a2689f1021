#!/usr/bin/env bash
# Renders a fathom HTML report in headless Chromium on a page 800 px wide and checks it as a person
# sees it: it opens with a headline, a plot and its assumptions; every plot has axis labels, its
# legend names each sweep once and distinctly (one with no valid candidate included), no two
# series' markers hide each other, no text leaves its plot and nothing is wider than the page.
# Saves a screenshot.
# Usage: report_check.sh FATHOM_BINARY SCREENSHOT_PNG; exit 77 (skipped) without chromium.
set -u
fathom=$1
screenshot=$2
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [[ -z $browser ]]; then
  echo "SKIP: no chromium on PATH (bash .ci/setup installs it)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
here=$(cd "$(dirname "$0")" && pwd)

# Four small sweeps: two whose labels collide (same model, GPUs and scenario, ids alike up to
# their last word), one where nothing can meet its limits, and an Offline one.
tune=(tune --model llama2-70b --hardware h200 --gpus 2 --weights fp8 --max-batch 64,256 --max-num-tokens 4096
      --dataset-samples 200 --db "$tmp/r.db")
server=(--scenario server --ttft-ms 2000 --tpot-ms 200)
"$fathom" "${tune[@]}" "${server[@]}" --kv fp8 --sweep-id llama2-h200-server-kv-fp8 >/dev/null 2>&1 &&
  "$fathom" "${tune[@]}" "${server[@]}" --kv bf16 --sweep-id llama2-h200-server-kv-bf16 >/dev/null 2>&1 &&
  "$fathom" "${tune[@]}" --scenario offline --sweep-id llama2-h200-offline >/dev/null 2>&1 || {
  echo "FAIL: fathom tune"
  exit 1
}
# Nothing meets 1 ms limits: tune says so (exit 2) but records the sweep.
"$fathom" "${tune[@]}" --scenario server --ttft-ms 1 --tpot-ms 1 --sweep-id llama2-h200-server-impossible \
  >/dev/null 2>&1
"$fathom" report --db "$tmp/r.db" --out "$tmp/report.html" >/dev/null || {
  echo "FAIL: fathom report"
  exit 1
}

# A copy of the report with the checks run after load.
html=$(<"$tmp/report.html")
{
  printf '%s' "${html%</body></html>*}"
  printf '<script>\nconst expectedSweeps = 4;\n'
  cat "$here/report_check.js"
  printf '</script>\n</body></html>\n'
} >"$tmp/checked.html"

chrome=("$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=800,2000
        --user-data-dir="$tmp/profile")
"${chrome[@]}" --dump-dom "file://$tmp/checked.html" >"$tmp/dom.html" 2>"$tmp/chromium.log"
mkdir -p "$(dirname "$screenshot")"
"${chrome[@]}" --screenshot="$screenshot" "file://$tmp/report.html" >>"$tmp/chromium.log" 2>&1
cp "$tmp/report.html" "$(dirname "$screenshot")/report.html"

verdict=$(sed -n '/<pre id="verdict">/,/^END$/p' "$tmp/dom.html")
echo "$verdict"
echo "screenshot: $screenshot"
if [[ ! -s $screenshot ]]; then
  echo "FAIL: no screenshot"
  cat "$tmp/chromium.log"
  exit 1
fi
if ! grep -q '<pre id="verdict">PASS' <<<"$verdict"; then
  [[ -n $verdict ]] || { echo "FAIL: no verdict from the page"; cat "$tmp/chromium.log"; }
  exit 1
fi
