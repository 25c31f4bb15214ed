#!/usr/bin/env bash
# Flags and job files are bounded (issue 28 item 13), through the real
# binaries: every number flag of shardd refuses NaN, infinity and values out
# of its range with exit 2 naming the flag (a shardd that starts anyway serves
# until the timeout: exit 124); a job file of nested YAML aliases (10^9 values
# from 600 bytes) is refused at once by `plan` and by the coordinator's submit.
source "$(dirname "$0")/lib.sh"

refused() {  # refused WANT_RC PATTERN COMMAND...
  local want=$1 pat=$2; shift 2
  local out rc=0
  out=$(timeout 20 "$@" 2>&1) || rc=$?
  [ "$rc" = "$want" ] || fail "exit $rc (want $want) from: $* -> $out"
  grep -q -- "$pat" <<< "$out" || fail "'$out' does not match '$pat'"
  [ "$(grep -c . <<< "$out")" = 1 ] || fail "more than one line: $out"
  echo "ok: $out"
}

daemon=("$SHARDD" --state-dir "$T/flags" --listen 127.0.0.1:0 --http-listen "")
for case in "--cpu-slots 2000000000" "--cpu-slots 0" "--cpu-slots -5" \
            "--queue-starvation-s inf" "--queue-starvation-s nan" "--queue-starvation-s -5" \
            "--kill-grace-s -1" "--kill-grace-s nan" "--metrics-finished-grace-s nan" \
            "--metrics-finished-grace-s 1e300" "--max-message-bytes 0" "--max-message-bytes -1"; do
  flag=${case%% *}
  value=${case#* }
  refused 2 "$flag: '$value' is \(not a finite number\|out of range\)" "${daemon[@]}" "$flag" "$value"
done
refused 2 "--cpu-slots: 'nan' is not a finite number" env SHARDD_CPU_SLOTS=nan "${daemon[@]}"
[ ! -e "$T/flags" ] || fail "a refused shardd made its state dir"
refused 2 "--listen 127.0.0.1:99999: the port must be a number in 0..65535" \
  "$SHARDD" --state-dir "$T/flags" --listen 127.0.0.1:99999 --http-listen ""
refused 2 "--http-listen 127.0.0.1:70000: the port must be a number in 0..65535" \
  "$SHARDD" --state-dir "$T/flags" --listen 127.0.0.1:0 --http-listen 127.0.0.1:70000
[ ! -e "$T/flags" ] || fail "a refused shardd made its state dir"

# ---- the alias bomb: plan (offline) and submit (the coordinator parses it) ------
bomb=$SRC/tests/fuzz/corpus/fuzz_job_file/regress-alias-bomb.yaml
refused 2 "regress-alias-bomb.yaml: more than 1000000 values once its aliases" "$CTL_BIN" plan "$bomb"
start_shardd
refused 2 "more than 1000000 values once its aliases" \
  "$CTL_BIN" --coordinator "$ADDR" --state-dir "$STATE" submit "$bomb"
kill -0 "$SHARDD_PID" || fail "the daemon is gone"
echo PASS
