#!/usr/bin/env bash
# A private image registry on loopback with TLS and a password, as NGC does it: the one the
# tests pull from, and a recipe to copy for an air-gapped site or a laptop.
#
#   REGISTRY_PASSWORD=... bash scripts/registry.sh DIR [PORT] [USER]
#
# DIR holds what it makes (certificate, key, htpasswd, config, data); PORT defaults to 5443,
# USER to '$oauthtoken' (NGC's convention: the password is the API key). The registry's
# certificate is copied to /etc/docker/certs.d/127.0.0.1:PORT/ca.crt, where dockerd (no
# restart) and the reconciler's size check trust it. Runs in the foreground until stopped.
# Then, for example:
#   echo "$REGISTRY_PASSWORD" | docker login 127.0.0.1:5443 -u '$oauthtoken' --password-stdin
#   docker tag IMAGE 127.0.0.1:5443/vss/rt-vlm:1 && docker push 127.0.0.1:5443/vss/rt-vlm:1
# Needs Debian's docker-registry, apache2-utils (htpasswd) and openssl.
set -euo pipefail
DIR="${1:?usage: REGISTRY_PASSWORD=... registry.sh DIR [PORT] [USER]}"
PORT="${2:-5443}"
USER_NAME="${3:-\$oauthtoken}"
: "${REGISTRY_PASSWORD:?set REGISTRY_PASSWORD (read from the environment, never an argument)}"
ADDR="127.0.0.1:$PORT"
CERTS_D="${DOCKER_CERTS_D:-/etc/docker/certs.d}"

mkdir -p "$DIR/data"
chmod 700 "$DIR"
if [ ! -f "$DIR/cert.pem" ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=127.0.0.1" \
    -addext "subjectAltName=IP:127.0.0.1" -keyout "$DIR/key.pem" -out "$DIR/cert.pem" \
    2>/dev/null
fi
# The password on standard input: never in a process listing.
printf '%s\n' "$REGISTRY_PASSWORD" | htpasswd -iBn "$USER_NAME" >"$DIR/htpasswd"
cat >"$DIR/config.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $DIR/data
  delete:
    enabled: true
http:
  addr: $ADDR
  secret: $(openssl rand -hex 16)
  tls:
    certificate: $DIR/cert.pem
    key: $DIR/key.pem
auth:
  htpasswd:
    realm: rtvi-registry
    path: $DIR/htpasswd
EOF
mkdir -p "$CERTS_D/$ADDR"
cp "$DIR/cert.pem" "$CERTS_D/$ADDR/ca.crt"
# REGISTRY_* variables are configuration to the registry: the password is not one of them.
exec env -u REGISTRY_PASSWORD docker-registry serve "$DIR/config.yml"
