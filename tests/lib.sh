# Helpers shared by the end-to-end test scripts: counted checks and a summary. Source it after
# setting $fathom (the binary under test).
passed=0
failed=0

check() {  # check DESCRIPTION COMMAND...: the command must succeed
  local what=$1
  shift
  if "$@" >/dev/null; then passed=$((passed + 1)); else echo "FAIL: $what"; failed=$((failed + 1)); fi
}

expect_fail() {  # expect_fail PATTERN ARGS...: fathom ARGS must exit 2 and print PATTERN
  local pattern=$1
  shift
  local out
  out=$("$fathom" "$@" 2>&1)
  local rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$pattern" <<<"$out"; then passed=$((passed + 1)); else
    echo "FAIL: fathom $* -> $rc, wanted 2 and '$pattern': $out"
    failed=$((failed + 1))
  fi
}

printed_url() {  # printed_url LOG TEXT [SECONDS]: the URL LOG prints after "TEXT " within SECONDS (30)
  local url
  for _ in $(seq 1 $((${3:-30} * 10))); do
    url=$(grep -o "$2 http://127.0.0.1:[0-9]*" "$1" | grep -o 'http://.*')
    [ -n "$url" ] && { echo "$url"; return 0; }
    sleep 0.1
  done
  return 1
}

finish() {  # finish NAME: prints the counts; the status is whether every check passed
  echo "$1: $passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
