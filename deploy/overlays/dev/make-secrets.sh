#!/bin/sh
# Writes the dev overlay's secret material into ./secrets/ (git-ignored, 0600 files in a 0700
# directory), once: an existing file is kept, so re-running never rotates a password under a
# running PostgreSQL. kustomize's secretGenerator reads these files (kustomization.yaml).
#   deploy/overlays/dev/make-secrets.sh && kubectl apply -k deploy/overlays/dev
set -eu
cd "$(dirname "$0")"
umask 077
mkdir -p secrets
rand() { od -An -N32 -tx1 /dev/urandom | tr -d ' \n'; }
put() { [ -s "secrets/$1" ] || printf '%s' "$2" > "secrets/$1"; }
put internal-token "$(rand)"
put executor-token "$(rand)"
put postgres-password "$(rand)"
# nats.conf reads the NATS passwords as $VARIABLE references, and nats-server parses a
# variable's value as a config value: a password starting with digits then [a-f] can read as a
# number ("1e0f..." fails to parse, "99..." is an integer, not a string) and the server refuses
# to start. A letter first makes every such value a string.
put nats-api-password "n$(rand)"
put nats-jobs-password "n$(rand)"
put nats-executor-password "n$(rand)"
put nats-ops-password "n$(rand)"
put database-url "postgres://seraph:$(cat secrets/postgres-password)@seraph-postgres:5432/seraph"
echo "dev secrets in $(pwd)/secrets"
