#!/usr/bin/env bash
# The folders' layering: each library includes headers only from itself and the libraries below it
# (the ones its CMake target links), so none reaches up. Usage: layering_test.sh REPO_ROOT
set -u
cd "$1" || exit 1

# Each library (a folder) and the libraries it may include.
declare -A may=(
  [base]=""
  [models]="base"
  [traces]="base"
  [profiler]="base models"
  [sim]="base models traces"
  [sim/serving]="base models traces sim"
  [tuner/search]="base models traces sim"
  [tuner/sweep]="base models traces sim tuner/search"
  [tuner/calibration]="base models traces sim tuner/search tuner/sweep"
  [tuner/online]="base models traces sim sim/serving tuner/search"
  [reports]="base models traces sim tuner/search"
  [apps]="base models traces profiler sim sim/serving tuner/search tuner/sweep tuner/calibration
          tuner/online reports"
)

# library PATH: the library a file or header belongs to.
library() {
  case $1 in
    sim/serving/* | tuner/*/*) echo "${1%%/*}/$(cut -d/ -f2 <<<"$1")" ;;
    *) echo "${1%%/*}" ;;
  esac
}

failed=0
checked=0
while read -r file; do
  from=$(library "$file")
  if [[ -z ${may[$from]+set} ]]; then
    echo "FAIL: $file is in no known library ($from): add it to tests/layering_test.sh"
    failed=$((failed + 1))
    continue
  fi
  while read -r header; do
    to=$(library "$header")
    checked=$((checked + 1))
    [[ $to == "$from" || " ${may[$from]//$'\n'/ } " == *" $to "* ]] && continue
    echo "FAIL: $file includes $header: $from may include only itself and: ${may[$from]}"
    failed=$((failed + 1))
  done < <(sed -nE 's/^#include "([^"]+)".*/\1/p' "$file" | grep '/')
done < <(find base models traces profiler sim tuner reports apps -name '*.cc' -o -name '*.h' -o -name '*.cu')

echo "layering: $checked includes checked, $failed reaching up"
[[ $failed -eq 0 && $checked -gt 500 ]]
