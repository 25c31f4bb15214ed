#!/usr/bin/env bash
# Mutual TLS: with --tls-client-ca the coordinator serves only clients whose
# certificate that CA signed. shardctl without a certificate, or with one the
# CA did not sign, is refused; with a good one a job runs to the end, which
# needs the workers shardd launches to present --worker-tls-cert (handed to
# them as SHARDD_TLS_CERT/SHARDD_TLS_KEY). --tls-client-ca without a worker
# certificate is refused at startup.
source "$(dirname "$0")/lib.sh"
command -v openssl > /dev/null || { echo "SKIP: openssl is not installed"; exit 77; }

openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=shardd-e2e-ca \
  -keyout "$T/ca.key" -out "$T/ca.pem" 2>/dev/null
issue() {  # issue NAME CN EXTENSIONS: a key and a certificate the test CA signed
  openssl req -newkey rsa:2048 -nodes -subj "/CN=$2" -keyout "$T/$1.key" -out "$T/$1.csr" 2>/dev/null
  printf '%b\n' "$3" > "$T/$1.ext"
  openssl x509 -req -in "$T/$1.csr" -CA "$T/ca.pem" -CAkey "$T/ca.key" -set_serial "0x$(openssl rand -hex 8)" \
    -days 1 -extfile "$T/$1.ext" -out "$T/$1.pem" 2>/dev/null
}
issue server localhost 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth'
issue client shardctl 'extendedKeyUsage=clientAuth'
issue worker shardd-worker 'extendedKeyUsage=clientAuth'
# Well formed, but no CA the coordinator trusts signed it.
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=intruder \
  -keyout "$T/intruder.key" -out "$T/intruder.pem" 2>/dev/null
server_tls=(--tls-cert "$T/server.pem" --tls-key "$T/server.key" --tls-client-ca "$T/ca.pem"
            --worker-tls-ca "$T/ca.pem")

# (d) Mutual TLS without a certificate for the workers: refused at startup.
if out=$(timeout 20 "$SHARDD" --state-dir "$STATE" --listen 127.0.0.1:0 --http-listen "" "${server_tls[@]}" 2>&1); then
  fail "shardd started with --tls-client-ca but no --worker-tls-cert"
fi
echo "$out" | grep -q -- "--tls-client-ca needs --worker-tls-cert/--worker-tls-key" || fail "unclear refusal: $out"
[ "$(echo "$out" | wc -l)" -eq 1 ] || fail "the refusal is not one line: $out"
echo "ok (d): $out"
if out=$(timeout 20 "$SHARDD" --state-dir "$STATE" --listen 127.0.0.1:0 --http-listen "" "${server_tls[@]}" \
           --worker-tls-cert "$T/worker.pem" 2>&1); then
  fail "shardd started with --worker-tls-cert but no --worker-tls-key"
fi
echo "$out" | grep -q -- "--worker-tls-cert without --worker-tls-key" || fail "unclear refusal: $out"

start_shardd 0 "${server_tls[@]}" --worker-tls-cert "$T/worker.pem" --worker-tls-key "$T/worker.key"
grep -q "with mutual TLS" "$T/shardd.log" || fail "shardd does not say it serves mutual TLS"
good=(--tls-ca "$T/ca.pem" --tls-cert "$T/client.pem" --tls-key "$T/client.key")

# shardctl's own mistakes: one line naming the flag and the path.
if out=$(ctl --tls-ca "$T/ca.pem" --tls-cert "$T/client.pem" list 2>&1); then
  fail "--tls-cert without --tls-key was accepted"
fi
echo "$out" | grep -q -- "--tls-cert without --tls-key" || fail "unclear error: $out"
if out=$(ctl --tls-ca "$T/ca.pem" --tls-cert "$T/missing.pem" --tls-key "$T/client.key" list 2>&1); then
  fail "a missing --tls-cert was accepted"
fi
echo "$out" | grep -q -- "--tls-cert $T/missing.pem" || fail "the error does not name the flag and path: $out"
[ "$(echo "$out" | wc -l)" -eq 1 ] || fail "not one line: $out"
if out=$(ctl --tls-ca "$T/ca.pem" --tls-cert "$T/client.key" --tls-key "$T/client.pem" list 2>&1); then
  fail "a swapped certificate and key were accepted"
fi
echo "$out" | grep -q -- "--tls-cert $T/client.key: no PEM certificate" || fail "unclear error: $out"

# The token is right in every call below; only the certificate differs.
# (a) No client certificate.
if out=$(ctl --tls-ca "$T/ca.pem" list 2>&1); then fail "a client without a certificate was served: $out"; fi
echo "$out" | grep -q "TLS handshake" || fail "unclear refusal: $out"
echo "ok (a): $out"
# (b) A certificate the client CA did not sign.
if out=$(ctl --tls-ca "$T/ca.pem" --tls-cert "$T/intruder.pem" --tls-key "$T/intruder.key" list 2>&1); then
  fail "a client with an untrusted certificate was served: $out"
fi
echo "$out" | grep -q "TLS handshake" || fail "unclear refusal: $out"
echo "ok (b): $out"
ctl "${good[@]}" list > /dev/null || fail "shardctl with a good certificate was refused"
SHARDD_TLS_CA=$T/ca.pem SHARDD_TLS_CERT=$T/client.pem SHARDD_TLS_KEY=$T/client.key ctl list > /dev/null \
  || fail "SHARDD_TLS_CA/CERT/KEY were not used"

# (c) A job runs to the end: its workers reached the coordinator with their certificate.
job=$(make_job mtls)
id=$(ctl "${good[@]}" submit "$job")
ctl "${good[@]}" watch "$id" > "$T/watch.log" || { cat "$T/watch.log" >&2; fail "watch over mutual TLS failed"; }
state=$(ctl "${good[@]}" status "$id" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['state'])")
[ "$state" = SUCCEEDED ] || { cat "$T/watch.log" >&2; fail "the job ended $state over mutual TLS"; }
echo "ok (c): $id $state"
echo PASS
