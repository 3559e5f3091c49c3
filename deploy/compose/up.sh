#!/usr/bin/env bash
# Starts Quartermaster on this host with deploy/compose/docker-compose.yml:
#  1. credentials (first run only, kept afterwards) in deploy/compose/credentials/
#     (QM_COMPOSE_CREDENTIALS): every principal's NATS key and the servers'
#     authorization from the tenancy (`qm auth`, run from the qm image), the
#     NATS cluster's route credentials, a metrics token, Garage's secrets,
#     the checkpoint service's S3 key, a CA (ca.crt; its key ca.key stays
#     here, mounted nowhere) and the console's and the gateway's HTTPS
#     certificates it signs (openssl; put your own in console.crt/.key and
#     gateway.crt/.key instead);
#  2. `up -d` (docker compose plugin if present, else docker-compose);
#  3. waits until every container reports healthy, showing progress.
#
#   deploy/compose/up.sh                 start (or update) the system
#   QM_TENANCY=/path/tenancy.yaml deploy/compose/up.sh
#   QM_COMPOSE_NATS_PORT=14222 deploy/compose/up.sh     NATS for clients on another port
#   QM_COMPOSE_CONSOLE_PORT=19660 deploy/compose/up.sh  the console on another port
#   QM_COMPOSE_GATEWAY_PORT=19650 deploy/compose/up.sh  the AWS Batch API on another port
#   QM_COMPOSE_NODE_1_DIR=/srv/qm deploy/compose/up.sh  node-1's work directories on the host
#     (a directory user 65532 may write; default: the node-1-work volume)
# Stop: docker-compose -p quartermaster -f deploy/compose/docker-compose.yml down
# (add -v to delete the volumes: the log, the jobs, the checkpoints).
# Needs the images: `make images`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
project=${QM_COMPOSE_PROJECT:-quartermaster}
prefix=${QM_IMAGE_PREFIX:-quartermaster/}
tag=${QM_IMAGE_TAG:-local}
creds=${QM_COMPOSE_CREDENTIALS:-$here/credentials}
mkdir -p "$creds"
creds=$(cd "$creds" && pwd)
export QM_COMPOSE_CREDENTIALS=$creds
tenancy=$(cd "$(dirname "${QM_TENANCY:-$here/../tenancy.dev.yaml}")" && pwd)/$(basename "${QM_TENANCY:-tenancy.dev.yaml}")
timeout=${QM_COMPOSE_WAIT_SECONDS:-180}
say() { printf 'compose: %s\n' "$*" >&2; }

# shellcheck source=compose.sh
. "$here/compose.sh"
project_compose() { compose -p "$project" -f "$here/docker-compose.yml" "$@"; }

[ -f "$tenancy" ] || { say "no tenancy file at $tenancy (set QM_TENANCY)"; exit 2; }
for image in "${prefix}qm:$tag" "${prefix}qm-admission:$tag" "${prefix}qm-executor:$tag" "${prefix}qm-console:$tag" "${prefix}qm-gateway:$tag" \
  "${QM_NATS_IMAGE:-quartermaster/nats:local}" "${QM_GARAGE_IMAGE:-quartermaster/garage:local}"; do
  docker image inspect "$image" >/dev/null 2>&1 || { say "image $image is missing: run \`make images\`"; exit 2; }
done

hex() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }

mkdir -p "$creds"
chmod 0700 "$creds"
# Every principal's key, and nats-auth.conf (existing keys are kept); and
# the access keys' secrets people sign in to the console with
# (gateway-keys.yaml, and each person's <principal>.aws-credentials).
# Written with the services' group (65532), so that the keys file can be
# readable by the console but not by others (the console refuses it else).
say "credentials in $creds (tenancy $tenancy)"
docker run --rm --network none --user "$(id -u):65532" \
  -v "$creds:/out" -v "$tenancy:/etc/quartermaster/tenancy.yaml:ro" \
  "${prefix}qm:$tag" auth --tenancy /etc/quartermaster/tenancy.yaml --out /out >/dev/null
[ -f "$creds/console.nk" ] || { say "the tenancy $tenancy has no principal console in services.console (the console's NATS identity; deploy/tenancy.dev.yaml has it)"; exit 2; }
[ -f "$creds/nats-auth.nk" ] || { say "the tenancy $tenancy has no principal nats-auth in services.natsAuth (the identity of each NATS server's \`qm tenancy sync-nats\`; deploy/tenancy.dev.yaml has it)"; exit 2; }
[ -f "$creds/gateway-keys.yaml" ] || { say "the tenancy $tenancy maps no awsAccessKeys: no one could sign in to the console (deploy/tenancy.dev.yaml has examples)"; exit 2; }
# Each container mounts only its own key file, and runs as user 65532: the
# files are readable, the directory (0700) keeps them from other host users.
chmod 0644 "$creds"/*.nk "$creds/nats-auth.conf"
chmod 0640 "$creds/gateway-keys.yaml"
# Each NATS server's live authorization (its sync-N sidecar rewrites it
# from the tenancy in effect): seeded with `qm auth`'s on the first run.
for n in 1 2 3; do
  mkdir -p "$creds/live/nats-$n"
  [ -s "$creds/live/nats-$n/nats-auth.conf" ] || cp "$creds/nats-auth.conf" "$creds/live/nats-$n/nats-auth.conf"
done
# The NATS cluster's routes: their own user and password (first run only),
# so that no server without them joins the cluster.
if [ ! -s "$creds/nats-routes.conf" ]; then
  route_password=$(hex 24)
  cat >"$creds/nats-routes.conf" <<CONF
# The NATS cluster's route credentials, made by up.sh: keep them secret.
authorization { user: "qm-route", password: "$route_password" }
routes: [
  "nats-route://qm-route:$route_password@nats-1:6222"
  "nats-route://qm-route:$route_password@nats-2:6222"
  "nats-route://qm-route:$route_password@nats-3:6222"
]
CONF
  chmod 0644 "$creds/nats-routes.conf"
fi
if [ ! -s "$creds/metrics-token" ]; then
  hex 24 >"$creds/metrics-token"
  chmod 0644 "$creds/metrics-token"
fi
if [ ! -s "$creds/s3.env" ]; then
  key_id="GK$(hex 12)"
  secret=$(hex 32)
  cat >"$creds/s3.env" <<ENV
GARAGE_RPC_SECRET=$(hex 32)
GARAGE_ADMIN_TOKEN=$(hex 24)
GARAGE_DEFAULT_BUCKET=qm-checkpoints
GARAGE_DEFAULT_ACCESS_KEY=$key_id
GARAGE_DEFAULT_SECRET_KEY=$secret
ENV
  cat >"$creds/checkpoint-s3.env" <<ENV
QM_CHECKPOINT_S3_ACCESS_KEY_ID=$key_id
QM_CHECKPOINT_S3_SECRET_ACCESS_KEY=$secret
ENV
  chmod 0600 "$creds/s3.env" "$creds/checkpoint-s3.env"
fi

# A CA of this deployment (first run only), and the HTTPS certificates of
# the console and the gateway it signs, for localhost, 127.0.0.1 and the
# service's name on the compose network. Clients trust ca.crt (browsers
# ask first; `aws --ca-bundle`, boto3's `verify=`). Put your own in
# console.crt/.key or gateway.crt/.key instead: existing files are kept.
need_openssl() {
  command -v openssl >/dev/null \
    || { say "openssl is needed to make the HTTPS certificates (or put yours in $creds/$1.crt and $1.key)"; exit 2; }
}
if [ ! -s "$creds/ca.crt" ] || [ ! -s "$creds/ca.key" ]; then
  need_openssl ca
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
    -subj "/CN=Quartermaster $project CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -addext "nameConstraints=critical,permitted;DNS:localhost,permitted;DNS:console,permitted;DNS:gateway,permitted;IP:127.0.0.0/255.0.0.0" \
    -keyout "$creds/ca.key" -out "$creds/ca.crt" 2>/dev/null
  chmod 0600 "$creds/ca.key"
  chmod 0644 "$creds/ca.crt"
fi
for service in console gateway; do
  [ -s "$creds/$service.crt" ] && [ -s "$creds/$service.key" ] && continue
  need_openssl "$service"
  ext=$(mktemp)
  printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
    "extendedKeyUsage=serverAuth" "subjectAltName=DNS:localhost,IP:127.0.0.1,DNS:$service" \
    "subjectKeyIdentifier=hash" "authorityKeyIdentifier=keyid,issuer" >"$ext"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
    -keyout "$creds/$service.key" -out "$creds/$service.csr" 2>/dev/null
  openssl x509 -req -in "$creds/$service.csr" -CA "$creds/ca.crt" -CAkey "$creds/ca.key" \
    -CAcreateserial -days 825 -extfile "$ext" -out "$creds/$service.crt" 2>/dev/null
  rm -f "$ext" "$creds/$service.csr"
  # Read by the service's user (65532) through the bind mount; the
  # directory (0700) keeps them from other host users.
  chmod 0644 "$creds/$service.crt" "$creds/$service.key"
done

say "starting project $project"
project_compose up -d --remove-orphans

# Until every container is healthy (or one gave up).
started=$(date +%s)
while :; do
  ids=$(project_compose ps -q)
  total=0 healthy=0 waiting=""
  for id in $ids; do
    total=$((total + 1))
    state=$(docker inspect -f '{{ .Name }} {{ .State.Status }} {{ if .State.Health }}{{ .State.Health.Status }}{{ end }}' "$id")
    read -r name status health <<<"$state"
    # A container without a health check (the sync sidecars) counts once running.
    if [ "$health" = healthy ] || { [ -z "$health" ] && [ "$status" = running ]; }; then
      healthy=$((healthy + 1))
    else
      waiting="$waiting ${name#/}($status${health:+ $health})"
    fi
  done
  if [ "$total" -gt 0 ] && [ "$healthy" = "$total" ]; then
    say "all $total containers healthy after $(($(date +%s) - started)) s"
    break
  fi
  if [ $(($(date +%s) - started)) -ge "$timeout" ]; then
    say "not healthy after $timeout s:$waiting"
    project_compose ps >&2 || true
    project_compose logs --tail 30 >&2 || true
    exit 1
  fi
  say "$healthy/$total healthy; waiting for$waiting"
  sleep 3
done
port=${QM_COMPOSE_NATS_PORT:-4222}
say "NATS: nats://127.0.0.1:$port; the admin's key: $creds/platform.nk"
say "  qm --nats nats://127.0.0.1:$port --nkey $creds/platform.nk apply -f examples/queues/three-shares.yaml"
say "console: https://127.0.0.1:${QM_COMPOSE_CONSOLE_PORT:-9660}/ (trust the CA $creds/ca.crt);"
say "  sign in with an access key and secret from $creds/<principal>.aws-credentials"
say "AWS Batch API: https://127.0.0.1:${QM_COMPOSE_GATEWAY_PORT:-9650}; as alice, with the AWS CLI:"
say "  AWS_SHARED_CREDENTIALS_FILE=$creds/alice.aws-credentials aws batch describe-job-queues --profile quartermaster --endpoint-url https://127.0.0.1:${QM_COMPOSE_GATEWAY_PORT:-9650} --region us-east-1 --ca-bundle $creds/ca.crt"
