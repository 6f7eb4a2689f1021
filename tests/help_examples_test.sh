#!/usr/bin/env bash
# `fathom --help` groups every command by job, and every command's help ends with examples that
# run as printed: each is run here, in order, from a folder that holds the repository's data
# folders (what an example writes lands in it). A line ending in & starts a server; the test waits
# until it listens and stops it after the command's last example.
# Usage: help_examples_test.sh FATHOM_BINARY REPO_ROOT
set -u
fathom=$(realpath "$1")
root=$(realpath "$2")
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
passed=0
failed=0
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }

for folder in models traces profiler docs; do ln -s "$root/$folder" "$tmp/$folder"; done
cd "$tmp" || exit 1

main=$("$fathom" --help)
for group in Plan Measure Serve Sweep Inspect; do
  grep -q "^$group:" <<<"$main" || fail "fathom --help has no group $group"
done
commands=$(awk '/^[A-Z][a-z]+:$/ && $1 != "Options:" { in_group = 1; next }
                /^$/ { in_group = 0 } in_group && /^  [a-z]/ { print $1 }' <<<"$main")
[[ $(wc -w <<<"$commands") -ge 15 ]] || fail "fathom --help lists $(wc -w <<<"$commands") commands"

# listening PORT: a server answers on 127.0.0.1:PORT within 30 s.
listening() {
  for _ in $(seq 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

for command in $commands; do
  examples=$("$fathom" "$command" --help | sed -n '/^Examples/,$p' | sed -n 's/^  fathom /fathom /p')
  if [[ -z $examples ]]; then
    fail "fathom $command --help ends with no examples"
    continue
  fi
  while IFS= read -r line; do
    run="\"$fathom\"${line#fathom}"
    if [[ $line == *' &' ]]; then
      bash -c "exec ${run% &}" >"$tmp/server.log" 2>&1 &
      if listening "$(sed -nE 's/.*--port ([0-9]+).*/\1/p' <<<"$line" | grep . || echo 8000)"; then
        passed=$((passed + 1))
      else
        fail "fathom $command's example did not start listening: $line: $(tail -3 "$tmp/server.log")"
      fi
    elif timeout 300 bash -c "$run" >"$tmp/out" 2>&1; then
      passed=$((passed + 1))
    else
      fail "fathom $command's example failed (exit $?): $line: $(tail -3 "$tmp/out")"
    fi
  done <<<"$examples"
  servers=$(jobs -p)
  if [[ -n $servers ]]; then
    kill $servers
    wait $servers 2>/dev/null
  fi
done

echo "help examples: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
