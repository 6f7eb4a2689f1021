#!/usr/bin/env bash
# The documentation's figures, checked against the program's own output: each check runs fathom,
# takes a figure from what it prints and requires README.md or a page in docs/ to state it, so the
# two cannot drift apart. Also: every relative link in README.md and docs/*.md resolves, the README
# stays a front page (at most 260 lines), and the README's plot is what the program draws today.
# Usage: readme_test.sh FATHOM_BINARY REPO_ROOT
set -u
fathom=$1
root=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

# The README and every docs page as one text, line breaks as spaces and runs of spaces as one: a
# figure may be stated on any page.
cat "$root/README.md" "$root"/docs/*.md | tr '\n' ' ' | sed 's/  */ /g' >"$tmp/docs.txt"

# claim TEXT: the README or a docs page states TEXT (line breaks count as spaces).
claim() {
  if grep -qF -- "$1" "$tmp/docs.txt"; then
    passed=$((passed + 1))
  else
    echo "FAIL: neither README.md nor docs/*.md says: $1"
    failed=$((failed + 1))
  fi
}
# check CONDITION_STATUS MESSAGE: counts a check that is not a claim.
check() {
  if [[ $1 -eq 0 ]]; then
    passed=$((passed + 1))
  else
    echo "FAIL: $2"
    failed=$((failed + 1))
  fi
}

# The README is a front page; the depth goes to docs/.
lines=$(wc -l <"$root/README.md")
[[ $lines -le 260 ]]
check $? "README.md has $lines lines: at most 260 (move the depth to a page in docs/)"

# Every relative link in README.md and docs/*.md (outside fenced code), inline ](path#anchor) or a
# reference's [name]: path#anchor, names a file that exists relative to the linking file, and its
# anchor (if any) a heading of that file.
# slugs FILE: the anchors of FILE's headings, as GitHub makes them (lowercase; punctuation but
# hyphens, underscores and spaces dropped; spaces to hyphens; a repeated heading gets -1, -2, ...).
slugs() {
  awk '/^```/ { fence = !fence; next }
    !fence && /^#+ / { h = $0; sub(/^#+ +/, "", h); h = tolower(h); gsub(/[^a-z0-9 _-]/, "", h)
                       gsub(/ /, "-", h); n = seen[h]++; print (n ? h "-" n : h) }' "$1"
}
for page in "$root/README.md" "$root"/docs/*.md; do
  while IFS= read -r target; do
    case $target in http://* | https://* | mailto:*) continue ;; esac
    path=${target%%#*}
    anchor=""
    [[ $target == *"#"* ]] && anchor=${target#*#}
    file=$(dirname "$page")/$path
    [[ -z $path ]] && file=$page
    name=${page#"$root"/}
    if [[ ! -e $file ]]; then
      check 1 "$name links to $target: no such file"
    elif [[ -n $anchor ]] && ! slugs "$file" | grep -qxF -- "$anchor"; then
      check 1 "$name links to $target: no heading of ${file#"$root"/} has that anchor"
    else
      check 0 ""
    fi
  done < <(awk '/^```/ { fence = !fence; next } !fence' "$page" >"$tmp/prose.md"
           grep -oE '\]\([^) ]+\)' "$tmp/prose.md" | sed -E 's/^\]\(//; s/\)$//'
           sed -nE 's/^ {0,3}\[[^]]+\]: +([^ ]+).*/\1/p' "$tmp/prose.md")
done

# figure REGEX FILE: the first match of the extended REGEX's group 1 in FILE.
figure() { sed -nE "s/.*$1.*/\\1/p" "$2" | head -1; }
# thousands: standard input's numbers with thousands separators (1,200).
thousands() { sed -E ':a; s/([0-9])([0-9]{3})($|,)/\1,\2\3/; ta'; }

# Accuracy against the shipped MLPerf rows.
# stderr apart: its closing line lands inside stdout's table wherever the buffer was flushed.
(cd "$root" && "$fathom" calibrate --results models/calibration/mlperf_v5.1.csv --residuals-out "$tmp/res_v51.csv") >"$tmp/v51.txt" 2>"$tmp/v51.err"
# Rows on a GPU the stack was not fitted on (H200 NVL) end in "(extrapolated)": drop it, so that
# the error columns keep their positions from the end on every row.
sed -i -E 's/ +\(extrapolated\)$//' "$tmp/v51.txt"
summary='median \|error\|: throughput ([0-9.]+%) \(Offline rows ([0-9.]+%)\), p99 latencies at the published QPS ([0-9.]+%), Server capacity ([0-9.]+%) \(at the published runs. use of their limits ([0-9.]+%)\)'
# accuracy FILE ROWS STACK: the README's accuracy-table row of a results file's medians.
accuracy() {
  local m
  read -r -a m <<<"$(sed -nE "s/.*$summary.*/\\1 \\2 \\3 \\4 \\5/p" "$1")"
  echo "| $2 | $3 | ${m[0]-} | ${m[1]-} | ${m[2]-} | ${m[3]-} | ${m[4]-} |"
}
claim "$(accuracy "$tmp/v51.txt" "v5.1: 83 rows, 63 never fitted" '`trtllm-1.0`')"
claim "the median throughput error is $(figure "$summary" "$tmp/v51.txt") (Offline rows $(sed -nE "s/.*$summary.*/\\2/p" "$tmp/v51.txt"))"
claim "are off by $(sed -nE "s/.*$summary.*/\\3/p" "$tmp/v51.txt") in the median"
# The highest QPS DeepSeek-R1 on 8xB200 holds, against its submitters' (columns QPS pub, QPS max).
range=$(awk '$4 == "deepseek-r1" && $5 == "Server" {
    p = $(NF-5); s = $(NF-4)
    if (n++ == 0) { plo = phi = p; slo = shi = s }
    if (p < plo) plo = p; if (p > phi) phi = p; if (s < slo) slo = s; if (s > shi) shi = s }
  END { lo = sprintf("%.1f", slo); hi = sprintf("%.1f", shi)
        printf "%s QPS where its submitters reached %.1f-%.1f", (lo == hi ? lo : lo "-" hi), plo, phi }' "$tmp/v51.txt")
claim "DeepSeek-R1 on 8xB200 holds the limits at $range"
# span FILE FIELD FILTER: "lo-hi" of |FIELD| (rounded) over the table rows matching the awk FILTER.
span() {
  awk "$3"' { v = $'"$2"'; if (v < 0) v = -v; if (n++ == 0 || v < lo) lo = v; if (n == 1 || v > hi) hi = v }
    END { printf "%d-%d", int(lo + 0.5), int(hi + 0.5) }' "$1"
}
claim "still comes out $(span "$tmp/v51.txt" 12 '$4 == "deepseek-r1" && $5 == "Server" && $12 < -10')% below theirs for Dell and"
claim "there fathom is $(sed -nE "s/.*$summary.*/\\4/p" "$tmp/v51.txt") off in the median"
claim "close to them as the run did: $(sed -nE "s/.*$summary.*/\\5/p" "$tmp/v51.txt") over the same rows"
claim "Llama 3.1 405B on 8xH200 comes out $(span "$tmp/v51.txt" '(NF-3)' '$3 == "h200" && $4 == "llama3.1-405b" && $5 != "Offline"')% below"
claim "Llama 2 70B Interactive on 8xH200 is within $(span "$tmp/v51.txt" '(NF-3)' '$3 == "h200" && $4 == "llama2-70b-99" && $5 == "Interactive"' | cut -d- -f2)%"
claim "Llama 2 70B Server is within $(span "$tmp/v51.txt" '(NF-3)' '$4 == "llama2-70b-99" && $5 == "Server"' | cut -d- -f2)%"
(cd "$root" && "$fathom" calibrate --results models/calibration/mlperf_v6.0.csv --residuals-out "$tmp/res_v60.csv") >"$tmp/v60.txt" 2>&1
claim "$(accuracy "$tmp/v60.txt" "v6.0 DeepSeek-R1 8xB200: 6 rows, fitted" '`trtllm-1.2`')"
claim "six DeepSeek-R1 rows within $(figure "$summary" "$tmp/v60.txt") on throughput (Offline within $(span "$tmp/v60.txt" NF '$5 == "Offline"' | cut -d- -f2)%) and $(sed -nE "s/.*$summary.*/\\3/p" "$tmp/v60.txt") on p99 latencies"
claim "capacity is $(sed -nE "s/.*$summary.*/\\4/p" "$tmp/v60.txt") off"
claim "own use of its limits the median is $(sed -nE "s/.*$summary.*/\\5/p" "$tmp/v60.txt")"
claim "and $(awk '$2 == "Nebius" && $5 == "Server" { v = $(NF-3); sub(/^[+-]/, "", v); print v }' "$tmp/v60.txt")% off for the one who pushed to 14"
(cd "$root" && "$fathom" calibrate --results models/calibration/mlperf_v6.0.csv --stack trtllm-1.0) >"$tmp/v60_old.txt" 2>&1
claim "predicts the v6.0 rows $(span "$tmp/v60_old.txt" NF '$5 == "Offline"')% low Offline and its capacity $(span "$tmp/v60_old.txt" '(NF-3)' '$5 == "Server"')% low"
# v6.0's other systems, held out of every fit. Columns: 6 samples (105,312 or fewer: 8 GPUs),
# 9 throughput error, 13 published p99 TPOT (77.6 ms and up: 97% of the limit), NF capacity error.
(cd "$root" && "$fathom" calibrate --results models/calibration/mlperf_v6.0_holdout.csv --residuals-out "$tmp/res_v60h.csv") >"$tmp/v60h.txt" 2>&1
sed -i -E 's/ +\(extrapolated\)$//' "$tmp/v60h.txt"
claim "$(accuracy "$tmp/v60h.txt" "v6.0 DeepSeek-R1, B300 to racks: 30 held out" '`trtllm-1.2`')"
# span1 FILE FIELD FILTER: "lo-hi" of |FIELD| to one decimal over the rows matching FILTER.
span1() {
  awk "$3"' { v = $'"$2"'; if (v < 0) v = -v; if (n++ == 0 || v < lo) lo = v; if (n == 1 || v > hi) hi = v }
    END { printf "%.1f-%.1f", lo, hi }' "$1"
}
eight_offline='$5 == "Offline" && $6 <= 105312'
median=$(awk "$eight_offline"' { v = $9; if (v < 0) v = -v; print v }' "$tmp/v60h.txt" | sort -g |
  awk '{ a[NR] = $1 } END { printf "%.1f", NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
lo=$(awk "$eight_offline"' { if (n++ == 0 || $9 < m) m = $9 } END { print m }' "$tmp/v60h.txt")
hi=$(awk "$eight_offline"' { if (n++ == 0 || $9 > m) m = $9 } END { print m }' "$tmp/v60h.txt")
claim "The 8-GPU B300 and GB300 systems come out within $median% in the median on Offline throughput ($lo% to $hi%;"
claim "their p99 TPOT to 97% of the limit or more (Cisco's and Nebius's B300, Nebius's GB300) within $(span1 "$tmp/v60h.txt" '(NF-3)' '$5 == "Server" && $6 <= 105312 && $13 >= 77.6')% on capacity"
claim "their capacity comes out $(span "$tmp/v60h.txt" '(NF-3)' '$5 == "Server" && $6 <= 105312 && $13 < 77.6')% above the QPS they ran"
claim "Server runs $(sed -nE "s/.*$summary.*/\\5/p" "$tmp/v60h.txt") in the median ($(sed -nE "s/.*$summary.*/\\4/p" "$tmp/v60h.txt") against the published QPS)"
claim "GB300 Server runs land $(awk '$2 == "Nebius" && $3 == "gb300" && $5 == "Server" && $6 > 105312 { v = $(NF-3); sub(/^[+-]/, "", v); print v }' "$tmp/v60h.txt")% high for Nebius's 72 GPUs"
claim "GB300 racks Offline, $(span "$tmp/v60h.txt" 9 '$3 == "gb300" && $5 == "Offline" && $6 > 105312')% low"
claim "GB200 racks Server, $(span "$tmp/v60h.txt" '(NF-3)' '$3 == "gb200" && $5 == "Server" && $2 != "Google"')% low for CoreWeave and NVIDIA"
# gpt-oss-120b, a model held out of every fit (columns as above; 15 the p99 TPOT error).
(cd "$root" && "$fathom" calibrate --results models/calibration/mlperf_v6.0_holdout_gpt-oss.csv --residuals-out "$tmp/res_oss.csv") >"$tmp/oss.txt" 2>&1
sed -i -E 's/ +\(extrapolated\)$//' "$tmp/oss.txt"
claim "$(accuracy "$tmp/oss.txt" "v6.0 gpt-oss-120b: 26 rows, model held out" '`trtllm-1.2`')"
# all_high FIELD FILTER: "every row high" when FIELD is positive on every row matching FILTER.
all_high() { awk "$2"' && $'"$1"' <= 0 { n++ } END { print (n ? "not every row high" : "every row high") }' "$tmp/oss.txt"; }
plus_span() { span "$tmp/oss.txt" "$1" "$2" | sed 's/-/% to +/'; }
claim "Offline throughput comes out $(sed -nE "s/.*$summary.*/\\2/p" "$tmp/oss.txt") high in the median (+$(plus_span 9 '$5 == "Offline"')%, $(all_high 9 '$5 == "Offline"'))"
claim "and Server capacity $(sed -nE "s/.*$summary.*/\\4/p" "$tmp/oss.txt") (+$(plus_span '(NF-3)' '$5 == "Server"')%, $(all_high '(NF-3)' '$5 == "Server"'): their p99 TPOT at the published QPS $(span "$tmp/oss.txt" 15 '$5 == "Server"')% low); p99 latencies $(sed -nE "s/.*$summary.*/\\3/p" "$tmp/oss.txt")"
claim "at each run's own use of its limits capacity is $(sed -nE "s/.*$summary.*/\\5/p" "$tmp/oss.txt") in the median"
# The vLLM rows: AMD's own v5.1 rows fitted vllm-0.9-rocm (the stack calibrate picks for them), the
# partners' and v6.0's held out; TensorRT-LLM 1.0's physics on the same rows for comparison.
(cd "$root" && "$fathom" calibrate --results models/calibration/mlperf_vllm_v5.1.csv --residuals-out "$tmp/res_vllm51.csv") >"$tmp/vllm51.txt" 2>&1
(cd "$root" && "$fathom" calibrate --results models/calibration/mlperf_vllm_v5.1.csv --stack trtllm-1.0) >"$tmp/vllm51_trt.txt" 2>&1
(cd "$root" && "$fathom" calibrate --results models/calibration/mlperf_vllm_v6.0.csv --stack vllm-0.9-rocm) >"$tmp/vllm60.txt" 2>&1
# The v6.0 rows' own stack (calibrate picks vllm-0.14-rocm for them): its first six rows (AMD's five
# MI355X rows and Dell's sync gpt-oss Server, lines 2-7) fitted it.
(cd "$root" && "$fathom" calibrate --results models/calibration/mlperf_vllm_v6.0.csv --residuals-out "$tmp/res_vllm60_v1.csv") >"$tmp/vllm60_v1.txt" 2>&1
sed -i -E 's/ +\(extrapolated\)$//' "$tmp/vllm51.txt" "$tmp/vllm51_trt.txt" "$tmp/vllm60.txt" "$tmp/vllm60_v1.txt"
claim "$(accuracy "$tmp/vllm51.txt" "vLLM v5.1 MI300X and MI325X: 41 rows, 30 never fitted" '`vllm-0.9-rocm`')"
claim "$(accuracy "$tmp/vllm60.txt" "vLLM v6.0 (MI355X, MI300X, B200, H200): 34 held out" '`vllm-0.9-rocm`')"
claim "$(accuracy "$tmp/vllm60_v1.txt" "vLLM v6.0: 34 rows, 28 never fitted" '`vllm-0.14-rocm`')"
claim "Over the 41 rows: throughput $(sed -nE "s/.*$summary.*/\\1/p" "$tmp/vllm51.txt") in the median (Offline $(sed -nE "s/.*$summary.*/\\2/p" "$tmp/vllm51.txt")), p99 latencies at the published QPS $(sed -nE "s/.*$summary.*/\\3/p" "$tmp/vllm51.txt"), Server capacity $(sed -nE "s/.*$summary.*/\\4/p" "$tmp/vllm51.txt")"
claim "Server capacity $(sed -nE "s/.*$summary.*/\\4/p" "$tmp/vllm51_trt.txt") in the median and Offline throughput $(sed -nE "s/.*$summary.*/\\2/p" "$tmp/vllm51_trt.txt")"
# median_abs FILE FIELD FILTER: the median of |FIELD| over the rows matching FILTER, to one decimal.
median_abs() {
  awk "$3"' { v = $'"$2"'; if (v < 0) v = -v; print v }' "$1" | sort -g |
    awk '{ a[NR] = $1 } END { printf "%.1f", NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
claim "over the 30 held-out partner rows, capacity $(median_abs "$tmp/vllm51.txt" '(NF-3)' '$1 ~ /^[0-9]+$/ && $2 != "AMD" && $5 != "Offline"')% and Llama 2 70B Offline $(median_abs "$tmp/vllm51.txt" 9 '$2 != "AMD" && $4 == "llama2-70b-99" && $5 == "Offline"')%"
claim "Mixtral's Offline rows come out $(span "$tmp/vllm51.txt" 9 '$4 == "mixtral-8x7b" && $5 == "Offline"')% fast"
claim "their throughput comes out $(sed -nE "s/.*$summary.*/\\1/p" "$tmp/vllm60.txt") off in the median (Offline $(sed -nE "s/.*$summary.*/\\2/p" "$tmp/vllm60.txt")) but Server capacity $(sed -nE "s/.*$summary.*/\\4/p" "$tmp/vllm60.txt") high"
claim "(TTFT $(span "$tmp/vllm60.txt" 12 '$5 != "Offline" && $1 ~ /^[0-9]+$/')% low, TPOT $(span "$tmp/vllm60.txt" 15 '$5 != "Offline" && $1 ~ /^[0-9]+$/')% low;"
claim "Over the 34 rows: throughput $(sed -nE "s/.*$summary.*/\\1/p" "$tmp/vllm60_v1.txt") in the median (Offline $(sed -nE "s/.*$summary.*/\\2/p" "$tmp/vllm60_v1.txt")), p99 latencies $(sed -nE "s/.*$summary.*/\\3/p" "$tmp/vllm60_v1.txt"), Server capacity $(sed -nE "s/.*$summary.*/\\4/p" "$tmp/vllm60_v1.txt"); over the 28 held out, capacity $(median_abs "$tmp/vllm60_v1.txt" '(NF-3)' '$1 ~ /^[0-9]+$/ && $1 > 7 && $5 != "Offline"')%, and over the 22 held-out partner MI355X rows (the same harness files) capacity $(median_abs "$tmp/vllm60_v1.txt" '(NF-3)' '$1 ~ /^[0-9]+$/ && $1 > 7 && $3 == "mi355x" && $5 != "Offline"')% and Offline $(median_abs "$tmp/vllm60_v1.txt" 9 '$1 ~ /^[0-9]+$/ && $1 > 7 && $3 == "mi355x" && $5 == "Offline"')%."
# v5.1's racks, held out of that round's fit (columns as above; 17 the highest QPS held).
(cd "$root" && "$fathom" calibrate --results models/calibration/mlperf_v5.1_holdout.csv --residuals-out "$tmp/res_v51h.csv") >"$tmp/v51h.txt" 2>&1
sed -i -E 's/ +\(extrapolated\)$//' "$tmp/v51h.txt"
claim "$(accuracy "$tmp/v51h.txt" "v5.1 DeepSeek-R1 racks: 6 held out" '`trtllm-1.0`')"
gb200_offline=$(awk '$3 == "gb200" && $5 == "Offline" { v = $9; sub(/^[+-]/, "", v); print v }' "$tmp/v51h.txt")
gb200_capacity=$(awk '$3 == "gb200" && $5 == "Server" { v = $(NF-3); sub(/^[+-]/, "", v); print v }' "$tmp/v51h.txt")
gb300_capacity=$(awk '$3 == "gb300" && $5 == "Server" && $6 > 43880 { v = $(NF-3); sub(/^[+-]/, "", v); print v }' "$tmp/v51h.txt")
claim "the GB200 rack comes out $gb200_offline% high Offline and $gb200_capacity% low on capacity, but the GB300 rack's Server $gb300_capacity% low"
claim "so both come out at $(awk '$5 == "Server" && $6 > 43880 { printf "%.1f\n", $(NF-4) }' "$tmp/v51h.txt" | sort -u) QPS"
claim "CoreWeave's 8 GB300s (batch 1,536, the Server's graphs only to 512) come out $(awk '$2 == "CoreWeave" && $5 == "Offline" { v = $9; sub(/^[+-]/, "", v); print v }' "$tmp/v51h.txt")% low Offline and $(awk '$2 == "CoreWeave" && $5 == "Server" { v = $(NF-3); sub(/^[+-]/, "", v); print v }' "$tmp/v51h.txt")% low on capacity"

# Measured serving points (AIConfigurator's): each engine's points under its own stack, then under
# TensorRT-LLM's. serving FILE ENGINE: "N points under `STACK`: TPOT a%, tokens/s a GPU b%, mean
# TTFT c%" from its "by engine" line (columns: engine stack all all points TTFT TPOT tok/s signed).
(cd "$root" && "$fathom" calibrate --benchmarks models/calibration/serving_benchmarks_aic.csv --jobs 2) >"$tmp/serving.txt" 2>&1
(cd "$root" && "$fathom" calibrate --benchmarks models/calibration/serving_benchmarks_aic.csv --jobs 2 --stack trtllm-1.2) >"$tmp/serving_trt.txt" 2>&1
serving() {
  awk -v e="$2" '/^by engine:/ { on = 1; next } on && $1 == e {
      n = $5 >= 1000 ? sprintf("%d,%03d", int($5 / 1000), $5 % 1000) : $5
      printf "%s points under `%s`: TPOT %s, tokens/s a GPU %s, mean TTFT %s", n, $2, $7, $8, $6 }' "$1"
}
claim "$(serving "$tmp/serving.txt" vLLM)"
claim "$(serving "$tmp/serving.txt" SGLang)"
claim "$(serving "$tmp/serving_trt.txt" vLLM)"
claim "$(serving "$tmp/serving_trt.txt" SGLang)"
claim "$(serving "$tmp/serving_trt.txt" TensorRT-LLM)"
# The `peak` column (the last of a group's row): vLLM's Llama 3.1 8B points against every other group.
claim "vLLM's Llama 3.1 8B points need up to $(awk '/^by engine:/ { exit } $1 == "vLLM" && $3 == "llama3.1-8b" { print $10 }' "$tmp/serving.txt")"
claim "no other group of the $(awk 'NR == 1 { printf "%d,%03d", int($2 / 1000), $2 % 1000 }' "$tmp/serving.txt") points needs more than $(awk '/^by engine:/ { exit }
  NR > 3 && !($1 == "vLLM" && $3 == "llama3.1-8b") { v = $10; sub(/%/, "", v); if (v + 0 > m) m = v + 0 } END { print m "%" }' "$tmp/serving.txt")"

# The error bars' held-out rows (models/calibration/residuals.csv) are these runs' rows, in this
# order: a change to the cost model that moves a prediction must ship the table it makes.
{ head -1 "$tmp/res_v51.csv"; for r in v51 v60 v60h oss v51h vllm51 vllm60_v1; do tail -n +2 "$tmp/res_$r.csv"; done; } \
  >"$tmp/residuals.csv"
cmp -s "$tmp/residuals.csv" "$root/models/calibration/residuals.csv"
check $? "models/calibration/residuals.csv is not what calibrate --residuals-out writes today: \
$(diff "$tmp/residuals.csv" "$root/models/calibration/residuals.csv" | head -5)"
"$fathom" intervals >"$tmp/intervals.txt" 2>&1
# coverage FAMILY: "inside of figures (coverage%)" of a row of `fathom intervals`.
coverage() {
  awk -v f="$1" 'substr($0, 1, 36) ~ "^" f " *$" { n = split($0, a, " "); print a[n-2] " of " a[n-3] " (" a[n-1] ")" }' \
    "$tmp/intervals.txt"
}
claim "each one's 80% interval, computed from the others, held $(coverage all) of them"
claim "Hopper's $(coverage "GPU family Hopper")"
claim "CDNA 3 $(coverage "GPU family CDNA 3") and CDNA 4 $(coverage "GPU family CDNA 4")"
claim "Mixtral's $(coverage "model mixtral-8x7b") is the lowest"
claim "rack-scale figures $(coverage "scale rack")"
claim "Offline throughput $(coverage "metric offline_tokens_per_s")"
claim "Server capacity $(coverage "metric capacity_qps")"

# MLPerf v6.1, a round no fit has seen: its residual table (calibrate --residuals-out on the v6.1
# TensorRT-LLM and vLLM rows, ten minutes on two cores) gives the medians, `intervals --check`
# the coverage; a few of its rows, recomputed, must equal it.
res61="$root/models/calibration/residuals_v6.1.csv"
# median61 STACK METRIC: median |predicted / published - 1| in percent, to one decimal.
median61() {
  awk -F, -v s="$1" -v m="$2" '$1 == s && $11 == m { v = 100 * ($13 / $12 - 1); if (v < 0) v = -v; print v }' "$res61" |
    sort -g | awk '{ a[NR] = $1 } END { printf "%.1f", NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
claim "TensorRT-LLM's rows come out $(median61 trtllm-1.2 offline_tokens_per_s)% off on Offline throughput and $(median61 trtllm-1.2 capacity_qps)% on Server and Interactive capacity"
claim "vLLM's $(median61 vllm-0.14-rocm offline_tokens_per_s)% and $(median61 vllm-0.14-rocm capacity_qps)%"
"$fathom" intervals --check "$res61" >"$tmp/intervals.txt" 2>&1
claim "$(coverage all) did; TensorRT-LLM's DeepSeek-R1 figures $(coverage "model deepseek-r1" | cut -d' ' -f1-3)"
claim "rack-scale $(coverage "scale rack" | cut -d' ' -f1-3)"
claim "RTX PRO 6000's $(coverage "GPU family rtx-pro-6000")"
claim "CDNA 4 $(coverage "GPU family CDNA 4")"
claim "TensorRT-LLM 1.2's $(coverage "stack trtllm-1.2") and vLLM 0.14's $(coverage "stack vllm-0.14-rocm")"
# Recompute ASUSTeK's 8xB300 rows (DeepSeek-R1, gpt-oss-120b, Llama 2 70B): the table's figures.
{ head -1 "$root/models/calibration/mlperf_v6.1_holdout.csv"
  grep '^v6.1,closed,ASUSTeK,XA_NB3I-E12_B300x8_TRT,' "$root/models/calibration/mlperf_v6.1_holdout.csv"; } >"$tmp/v61_some.csv"
(cd "$root" && "$fathom" calibrate --results "$tmp/v61_some.csv" --stack trtllm-1.2 \
  --setup models/calibration/published_deployments_v6.1.json --residuals-out "$tmp/res_v61_some.csv") >/dev/null 2>&1
figures61() { awk -F, 'NR > 1 && $4 == "ASUSTeK" { print $9, $11, $12, $13 }' "$1" | sort; }
[[ -s $tmp/res_v61_some.csv && "$(figures61 "$tmp/res_v61_some.csv")" == "$(figures61 "$res61")" ]]
check $? "models/calibration/residuals_v6.1.csv's ASUSTeK rows are not what calibrate writes today (rerun the v6.1 calibrations)"

# A rack's Server tune far above the best published result credits its gain, part by part.
"$fathom" tune --hardware gb300 --gpus 72 --scenario server --max-batch 640 1024 --max-num-tokens 2048 4608 \
  --no-disagg >"$tmp/rack.txt" 2>&1
claim "$(grep -m1 -E "^fathom's spends [0-9.]+ GPU-seconds per million tokens fewer than Nebius's:" "$tmp/rack.txt")"
while read -r line; do claim "$line"; done < <(grep -A4 "^fathom's spends" "$tmp/rack.txt" | tail -4 | sed 's/^ *//')
claim "a mean TPOT of $(awk '/^mean TPOT ms/ { print $4 " ms against " $5 }' "$tmp/rack.txt")"
claim "NVL72 rack, DeepSeek-R1 Server tunes to $(printf %.1f "$(figure '^Best: .* at ([0-9.]+) QPS' "$tmp/rack.txt")") QPS against Nebius's 167"

# The default search space.
# One thread: which candidates are pruned depends on the order they finish (the store, and so the
# plot below, too).
"$fathom" tune --scenario server --jobs 1 --db "$tmp/tunes.db" --adaptive >"$tmp/server.txt" 2>&1
claim "The default Server space for DeepSeek-R1 on 8xB200 is $(figure '^([0-9]+) candidates:' "$tmp/server.txt" | thousands) feasible candidates"
claim "and $(figure '; ([0-9]+) infeasible;' "$tmp/server.txt" | thousands) that do not fit or break a layout rule"
claim "the default Server tune simulates $(figure '^[0-9]+ candidates: ([0-9]+) simulated' "$tmp/server.txt") of its"

# The README's plot, docs/images/frontier.svg: the frontier of the two tunes the README's first
# command runs (DeepSeek-R1 on 8xB200, Server and Offline), drawn from their results store. The
# simulator is deterministic, and on one thread so is the set of candidates each tune simulates.
# To regenerate it after a change that moves these tunes, from the repository's root:
#   db=$(mktemp -d)/tunes.db
#   ./build/fathom tune --scenario server --jobs 1 --db "$db"
#   ./build/fathom tune --jobs 1 --db "$db"
#   ./build/fathom report --db "$db" --out docs/images/frontier.svg --plot frontier
"$fathom" tune --jobs 1 --db "$tmp/tunes.db" --adaptive >"$tmp/offline.txt" 2>&1
claim "this question (seen GPU, model and scale): $(sed -nE 's/^ +([0-9]+-[0-9]+ tokens\/s \([0-9]+ rows\))$/\1/p' "$tmp/offline.txt" | head -1)"
# Adaptive plans (docs/tuning.md): the plans are not stored, so the plot below is unchanged.
plan_row() {  # plan_row NAME PATTERN: "| NAME | tokens/s (gain) |" from the Offline tune's line
  echo "| $1 | $(figure "^  $2 +([0-9]+) tokens.s" "$tmp/offline.txt" | thousands) ($(figure "^  $2 +[0-9]+ tokens.s \\(([-+][0-9.]+%)\\)" "$tmp/offline.txt")) |"
}
claim "| static best | $(figure '^  static best +([0-9]+) tokens.s' "$tmp/offline.txt" | thousands) |"
claim "$(plan_row 'longest predicted output first' 'longest-first')"
claim "$(plan_row 'shortest predicted output first' 'shortest-first')"
claim "$(plan_row 'best plan (with its switch cost)' 'best plan')"
claim "$(plan_row 'oracle (free switches)' 'oracle \(free\)')"
claim "a tail as fast as the run before it would gain at most $(figure 'would gain at most ([-+][0-9.]+%)' "$tmp/offline.txt") (\`trtllm-1.2\`)"
claim "none of the $(figure ' ([0-9]+) QPS searches in' "$tmp/server.txt") rules holds the p99 limits a grid step above the static best's $(figure '^  static best +([0-9.]+) QPS' "$tmp/server.txt") QPS"
"$fathom" report --db "$tmp/tunes.db" --out "$tmp/frontier.svg" --plot frontier >"$tmp/report.txt" 2>&1
cmp -s "$tmp/frontier.svg" "$root/docs/images/frontier.svg"
check $? "docs/images/frontier.svg is not what fathom draws today; regenerate it (docs/tuning.md, \"The README's plot\"):
  db=\$(mktemp -d)/tunes.db
  ./build/fathom tune --scenario server --jobs 1 --db \"\$db\"
  ./build/fathom tune --jobs 1 --db \"\$db\"
  ./build/fathom report --db \"\$db\" --out docs/images/frontier.svg --plot frontier"

# The online example.
"$fathom" online --initial-batch 32 --compare-static >"$tmp/online.txt" 2>&1
tuned='^Tuned: ([0-9]+) windows, ([0-9]+) of [0-9]+ judged within both p99 limits; ([0-9]+) changes, ([0-9]+) rollbacks; ([0-9]+) requests arrived'
held='^Held at [^:]*: ([0-9]+) windows, ([0-9]+) of'
claim "tuned, $(sed -nE "s/$tuned.*/\\2 of \\1 windows keep both p99 limits (\\3 changes, \\4 rollbacks)/p" "$tmp/online.txt")"
claim "held, $(sed -nE "s/$held.*/\\2 of \\1/p" "$tmp/online.txt")"
minutes=$(( $(sed -nE "s/$held.*/\\1/p" "$tmp/online.txt") - $(sed -nE "s/$tuned.*/\\1/p" "$tmp/online.txt") ))
claim "its backlog drains $minutes minutes after the tuned run's"
requests=$(sed -nE "s/$tuned.*/\\5/p" "$tmp/online.txt" | thousands)
claim "every one of the $requests requests finishes"

# Operator prices against Vidur's H100 measurements, before and after `profile compare --fit`.
for f in "$root"/profiler/data/vidur/h100/*/mlp.csv "$root"/profiler/data/vidur/network/h100_dgx/*.csv; do
  "$fathom" profile import "$f" --db "$tmp/vidur.db" >/dev/null 2>&1
done
"$fathom" profile compare "$tmp/vidur.db" >"$tmp/compare.txt" 2>&1
"$fathom" profile compare "$tmp/vidur.db" --fit >"$tmp/fit.txt" 2>&1
# medians FILE: the GEMM, all-reduce and send/recv median |error| of the first table after the line
# matching $2.
medians() {
  awk -v from="$2" '$0 ~ from { on = 1 } on && $1 == "gemm" && $2 == "bf16" && NF == 7 { g = $4 }
    on && $1 == "all_reduce" && $2 == "bf16" && NF == 7 { a = $4 }
    on && $1 == "send_recv" && $2 == "bf16" && NF == 7 { s = $4; if (g != "" && a != "") { exit } }
    END { printf "%s (GEMMs), %s (all-reduce) and %s (send/recv", g, a, s }' "$1"
}
claim "operator prices are off by $(medians "$tmp/compare.txt" "^group")"
claim "and prices them within $(medians "$tmp/fit.txt" "^Fitted")"

# Against AIConfigurator's H200 and B200 timings of TensorRT-LLM's kernels.
for f in "$root"/profiler/data/aiconfigurator/*/*.csv; do
  "$fathom" profile import "$f" --db "$tmp/aic.db" >/dev/null 2>&1
done
"$fathom" profile compare "$tmp/aic.db" --hardware h200 >"$tmp/aic_h200.txt" 2>&1
"$fathom" profile compare "$tmp/aic.db" --hardware b200 >"$tmp/aic_b200.txt" 2>&1
# signed FILE GROUP: the median signed error of a group's row, without its decimals.
signed() { awk -v g="$2" '$0 ~ "^"g" " { v = $(NF-2); sub(/%/, "", v); v += 0; printf "%+d%%", (v < 0 ? v - 0.5 : v + 0.5); exit }' "$1"; }
claim "less at $(signed "$tmp/aic_h200.txt" "all_reduce bf16, <=64 KiB") on H200 and $(signed "$tmp/aic_b200.txt" "all_reduce bf16, <=64 KiB") on B200 in the median"
claim "at $(signed "$tmp/aic_h200.txt" "all_reduce bf16, 64 KiB-4 MiB") and $(signed "$tmp/aic_b200.txt" "all_reduce bf16, 64 KiB-4 MiB"):"
claim "$(signed "$tmp/aic_h200.txt" "gemm fp8 " | tr -d +-) below the measured FP8 \`Linear\` on H200 and $(signed "$tmp/aic_b200.txt" "gemm fp8 " | tr -d +-) on B200, and $(signed "$tmp/aic_b200.txt" "gemm nvfp4 " | tr -d +-) below NVFP4"

# absolute FILE GROUP: a group's median |error|.
absolute() { awk -v g="$2" '$0 ~ "^"g" " { print $(NF-3); exit }' "$1"; }
claim "out within $(absolute "$tmp/aic_b200.txt" "moe bf16") (B200 BF16, $(signed "$tmp/aic_b200.txt" "moe bf16 ") signed), $(absolute "$tmp/aic_b200.txt" "moe fp8") (B200 FP8), $(absolute "$tmp/aic_h200.txt" "moe bf16") and $(absolute "$tmp/aic_h200.txt" "moe fp8") (H200 BF16 and FP8) in"
claim "comes out $(signed "$tmp/aic_b200.txt" "moe nvfp4 " | tr -d +-) below and H200's MXFP4 one $(signed "$tmp/aic_h200.txt" "moe mxfp4 " | tr -d +-)."

# Against fathom's own H100 and H200 measurements (random operands), and what zeroed ones do.
for g in h100-sxm h200; do
  cp "$root/profiler/data/fathom/$g.db" "$tmp/own_$g.db"
  "$fathom" profile compare "$tmp/own_$g.db" --fit >"$tmp/own_$g.txt" 2>&1
done
# fitted FILE FIELD: a fitted parameter's value; fitted_abs FILE GROUP: a group's median |error|
# once fitted.
fitted() { awk -v f="$2" '$1 == f { print $2; exit }' "$1"; }
fitted_abs() { awk -v g="$2" '/^Fitted/ { on = 1 } on && $0 ~ "^"g" " { print $(NF-3); exit }' "$1"; }
h100="$tmp/own_h100-sxm.txt"
h200="$tmp/own_h200.txt"
claim "puts BF16 at $(fitted "$h100" gemm_efficiency) of the H100's peak and $(fitted "$h200" gemm_efficiency) of the H200's"
claim "FP8 comes out at $(fitted "$h100" fp8_gemm_efficiency) and $(fitted "$h200" fp8_gemm_efficiency) of the FP8 peak"
claim "weights at $(fitted "$h100" memory_efficiency) and $(fitted "$h200" memory_efficiency) of HBM bandwidth"
claim "the stacks' prices are $(absolute "$h100" "gemm bf16") (H100) and $(absolute "$h200" "gemm bf16") (H200) high on BF16 GEMMs and $(absolute "$h100" "gemm fp8") and $(absolute "$h200" "gemm fp8") on FP8 in the median, fitted $(fitted_abs "$h100" "gemm bf16") and $(fitted_abs "$h200" "gemm bf16") (BF16), $(fitted_abs "$h100" "gemm fp8") and $(fitted_abs "$h200" "gemm fp8") (FP8)"
claim "$(absolute "$h100" "attention_prefill bf16") and $(absolute "$h200" "attention_prefill bf16") high in the median, and decode attention comes out within $(absolute "$h100" "attention_decode bf16") and $(absolute "$h200" "attention_decode bf16")"
claim "prices it $(absolute "$h100" "grouped_gemm bf16") and $(absolute "$h200" "grouped_gemm bf16") high"
# zeros GPU: the median of zeroed over random operands' time, BF16 GEMMs with M over 1,024.
zeros() {
  sqlite3 "$root/profiler/data/fathom/$1.db" "attach '$root/profiler/data/fathom/$1-zeros.db' as z;
    select z.median_us / r.median_us from op_latency r join z.op_latency z using (op, dtype, m, n, k, extra, dims)
    where r.op = 'gemm' and r.dtype = 'bf16' and r.m > 1024 order by 1" | awk '{ v[NR] = $1 } END { printf "%.3f", v[int(NR / 2) + 1] }'
}
claim "large GEMMs (M over 1,024) ran in $(zeros h100-sxm) of the time on the H100 and $(zeros h200) on the H200 in the median"

# PyTorch's whole MoE layers and grouped GEMMs on an H200 against the stacks' experts' rate, and
# TensorRT-LLM's fused layers (AIConfigurator) by data type.
for f in bf16 bf16-gemms fp8 fp8-gemms; do
  "$fathom" profile import "$root/profiler/data/fathom/h200-moe-torch-$f.csv" --db "$tmp/torch_$f.db" >/dev/null
  "$fathom" profile compare "$tmp/torch_$f.db" --hardware h200 --fit >"$tmp/torch_$f.txt" 2>&1
done
for t in bfloat16 fp8; do
  grep -E "^framework|,$t," "$root/profiler/data/aiconfigurator/h200/moe.csv" >"$tmp/aic_moe_$t.csv"
  "$fathom" profile import "$tmp/aic_moe_$t.csv" --db "$tmp/aic_moe_$t.db" >/dev/null
  "$fathom" profile compare "$tmp/aic_moe_$t.db" --hardware h200 --fit >"$tmp/aic_moe_$t.txt" 2>&1
done
claim "on H200 alone its BF16 layers fit $(fitted "$tmp/aic_moe_bfloat16.txt" grouped_memory_efficiency) and its FP8 ones $(fitted "$tmp/aic_moe_fp8.txt" grouped_memory_efficiency)"
claim "puts PyTorch's BF16 grouped GEMMs at $(fitted "$tmp/torch_bf16-gemms.txt" grouped_memory_efficiency) of HBM bandwidth and its FP8 ones at $(fitted "$tmp/torch_fp8-gemms.txt" grouped_memory_efficiency) ($(fitted "$tmp/torch_bf16.txt" grouped_memory_efficiency) and $(fitted "$tmp/torch_fp8.txt" grouped_memory_efficiency) with the unfused gather and scatter-add)"
claim "the stacks price these layers $(signed "$tmp/torch_bf16.txt" "moe bf16 " | tr -d +-) fast in BF16 and $(signed "$tmp/torch_fp8.txt" "moe fp8 " | tr -d +-) in FP8 in the median ($(signed "$tmp/torch_bf16-gemms.txt" "moe bf16 " | tr -d +-) and $(signed "$tmp/torch_fp8-gemms.txt" "moe fp8 " | tr -d +-) counting the GEMMs alone)"

# Autoscaling Azure's conversation hour: the static fleet, the plan and the oracle.
"$fathom" autoscale --deployment "$root/docs/examples/llama2-70b-h200-tp1.json" --json --phase-s 900 \
  --trace "$root/traces/data/azure_llm_2023/AzureLLMInferenceTrace_conv.csv" >"$tmp/autoscale.json"
scaled() { jq -r "$1" "$tmp/autoscale.json"; }
claim "| $(scaled .autoscale.static_replicas) replicas, $(scaled '.autoscale.gpu_hours_static * 100 | round / 100') GPU-hours | $(scaled '.autoscale.gpu_hours_plan * 100 | round / 100') ($(scaled '(.autoscale.gpu_hours_plan / .autoscale.gpu_hours_static - 1) * 1000 | round / 10')%) | $(scaled '.autoscale.gpu_hours_oracle * 100 | round / 100') ($(scaled '(.autoscale.gpu_hours_oracle / .autoscale.gpu_hours_static - 1) * 1000 | round / 10')%) |"
claim "(the hour: $(scaled .autoscale.simulations) and"

echo "readme: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
