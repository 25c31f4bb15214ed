#!/usr/bin/env bash
# TLS: a non-loopback listen address without TLS is refused; with a
# certificate the coordinator serves TLS only, shardctl needs the CA, and the
# workers it launches verify the coordinator with it and train to the end.
source "$(dirname "$0")/lib.sh"
if out=$("$SHARDD" --state-dir "$STATE" --listen 0.0.0.0:0 --http-listen "" 2>&1); then fail "a non-loopback plaintext listen was accepted"; fi
echo "$out" | grep -q "not a loopback address" || fail "unclear refusal: $out"
echo "ok: $out"
command -v openssl > /dev/null || { echo "SKIP: openssl is not installed"; exit 77; }
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost \
  -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" -keyout "$T/key.pem" -out "$T/cert.pem" 2>/dev/null
from=$(log_size)
"$SHARDD" --state-dir "$STATE" --listen 127.0.0.1:0 --tls-cert "$T/cert.pem" --tls-key "$T/key.pem" --http-listen "" \
  --kill-grace-s 2 >> "$T/shardd.log" 2>&1 &
SHARDD_PID=$!
disown "$SHARDD_PID"
wait_serving "$from"
if ctl list > "$T/plain.log" 2>&1; then fail "a plaintext client was served by a TLS coordinator"; fi
job=$(make_job tls)
id=$(ctl --tls-ca "$T/cert.pem" submit "$job")
ctl --tls-ca "$T/cert.pem" watch "$id" > /dev/null || fail "watch over TLS failed"
[ "$(ctl --tls-ca "$T/cert.pem" status "$id" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['state'])")" = SUCCEEDED ] \
  || fail "the job did not succeed over TLS"
echo PASS
