#!/usr/bin/env bash
# Issue the bizrq webhook's serving certificate, and the API servers' client
# certificate for calling it, without cert-manager.
#
#   kubectl apply -f deploy/crd.yaml
#   kubectl apply -k deploy/overlays/manual-certs
#   deploy/gen-certs.sh
#
# What it does, with openssl and kubectl (your current kube context):
#  1. A private CA for this webhook: reused from the Secret bizrq-webhook-ca
#     when it exists (so re-running the script never changes what the API
#     servers trust), else created (EC P-256, 10 years) and stored there.
#  2. A serving certificate signed by it (EC P-256, 1 year by default) for
#     bizrq.bizrq-system.svc, with the Service's other names as SANs too.
#  3. The API servers' client certificate, signed by the same CA, for
#     kube-apiserver.bizrq.io (the name bizrq admits: BIZRQ_WEBHOOK_CLIENT_NAMES).
#  4. The Secrets bizrq-webhook-tls (tls.crt, tls.key, ca.crt), which the
#     bizrq pods mount (ca.crt is what they verify the client against), and
#     bizrq-apiserver-client (the client certificate, kept for --apiserver-only).
#  5. The API server's files, in --apiserver-out (default ./bizrq-apiserver):
#     webhook-kubeconfig.yaml (the client certificate, embedded, for the
#     user bizrq.bizrq-system.svc) and admission-config.yaml (an
#     AdmissionConfiguration pointing to it). Copy both to every
#     control-plane node and start kube-apiserver with
#     --admission-control-config-file (deploy/README.md, "Who may call the
#     webhook"). Until then the API servers present no certificate, bizrq
#     refuses their calls, and the webhooks, failing closed, refuse what
#     they govern.
#  6. caBundle = the CA, patched into every webhook entry of the
#     ValidatingWebhookConfiguration bizrq.
#  7. A rolling restart of deployment/bizrq when it was already running,
#     so a renewal takes effect at once (bizrq also re-reads the mounted
#     certificate every 30 s, once the kubelet has updated the Secret).
#
# Re-run it to renew (before the serving certificate expires: it prints the
# date). It is idempotent. The CA key lives only in the Secret
# bizrq-webhook-ca; protect that namespace accordingly.
#
# Options:
#   --namespace NS   namespace of bizrq (default bizrq-system)
#   --service NAME   Service name (default bizrq)
#   --webhook NAME   ValidatingWebhookConfiguration name (default bizrq)
#   --days N         serving and client certificate lifetime in days (default 365)
#   --client-name N  DNS name in the API servers' client certificate
#                    (default kube-apiserver.bizrq.io)
#   --apiserver-out DIR  where to write the API server's files
#                    (default ./bizrq-apiserver)
#   --kubeconfig-path P  where the kubeconfig will be on the control-plane
#                    nodes, as written into admission-config.yaml
#                    (default /etc/kubernetes/bizrq/webhook-kubeconfig.yaml)
#   --apiserver-only only write the API server's files, from the Secret
#                    bizrq-apiserver-client (as cert-manager's overlay
#                    issues it, or an earlier run of this script stored it)
#   --out DIR        keep the generated files in DIR (default: a temporary
#                    directory, removed at exit)
#   --dry-run        only generate and check the files (needs --out to keep
#                    them); touch nothing in the cluster
set -euo pipefail

namespace=bizrq-system
service=bizrq
webhook=bizrq
days=365
ca_days=3650
out=""
dry_run=false
client_name=kube-apiserver.bizrq.io
apiserver_out=./bizrq-apiserver
kubeconfig_path=/etc/kubernetes/bizrq/webhook-kubeconfig.yaml
apiserver_only=false

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case "$1" in
    --namespace) namespace="$2"; shift 2 ;;
    --service) service="$2"; shift 2 ;;
    --webhook) webhook="$2"; shift 2 ;;
    --days) days="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --dry-run) dry_run=true; shift ;;
    --client-name) client_name="$2"; shift 2 ;;
    --apiserver-out) apiserver_out="$2"; shift 2 ;;
    --kubeconfig-path) kubeconfig_path="$2"; shift 2 ;;
    --apiserver-only) apiserver_only=true; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gen-certs.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done

need() { command -v "$1" >/dev/null 2>&1 || { echo "gen-certs.sh: $1 is required" >&2; exit 1; }; }
need openssl
$dry_run || need kubectl

umask 077
if [ -n "$out" ]; then
  mkdir -p "$out"
  dir="$out"
else
  dir="$(mktemp -d)"
  trap 'rm -rf "$dir"' EXIT
fi

host="$service.$namespace.svc"
kc() { kubectl --namespace "$namespace" "$@"; }

# The API server's side of mTLS: a kubeconfig whose user is named for the
# webhook's Service as the API servers dial it (port 443 needs no suffix),
# and the AdmissionConfiguration that points the webhook plugin to it.
write_apiserver_files() { # client.crt client.key
  mkdir -p "$apiserver_out"
  cat >"$apiserver_out/webhook-kubeconfig.yaml" <<EOF
apiVersion: v1
kind: Config
users:
- name: $host
  user:
    client-certificate-data: $(openssl base64 -A <"$1")
    client-key-data: $(openssl base64 -A <"$2")
EOF
  cat >"$apiserver_out/admission-config.yaml" <<EOF
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ValidatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: $kubeconfig_path
EOF
  chmod 600 "$apiserver_out/webhook-kubeconfig.yaml"
  echo "The API server's files are in $apiserver_out:"
  echo "  webhook-kubeconfig.yaml  -> $kubeconfig_path on every control-plane node"
  echo "  admission-config.yaml    -> e.g. /etc/kubernetes/bizrq/admission-config.yaml, and start"
  echo "                              kube-apiserver with --admission-control-config-file=<it>"
  echo "  (merge the plugin entry if kube-apiserver already has an AdmissionConfiguration)"
  openssl x509 -in "$1" -noout -subject -enddate | sed 's/^/  client certificate: /'
}

if $apiserver_only; then
  need kubectl
  kc get secret bizrq-apiserver-client >/dev/null 2>&1 || {
    echo "gen-certs.sh: Secret $namespace/bizrq-apiserver-client not found (cert-manager issues it" >&2
    echo "  in overlays/cert-manager; without cert-manager run gen-certs.sh without --apiserver-only)" >&2
    exit 1
  }
  kc get secret bizrq-apiserver-client -o 'jsonpath={.data.tls\.crt}' | openssl base64 -d -A >"$dir/client.crt"
  kc get secret bizrq-apiserver-client -o 'jsonpath={.data.tls\.key}' | openssl base64 -d -A >"$dir/client.key"
  openssl x509 -in "$dir/client.crt" -noout >/dev/null
  write_apiserver_files "$dir/client.crt" "$dir/client.key"
  exit 0
fi

if ! $dry_run; then
  kc get namespace "$namespace" >/dev/null 2>&1 || {
    echo "gen-certs.sh: namespace $namespace not found: apply the manifests first:" >&2
    echo "  kubectl apply -k deploy/overlays/manual-certs" >&2
    exit 1
  }
  kubectl get validatingwebhookconfiguration "$webhook" >/dev/null 2>&1 || {
    echo "gen-certs.sh: ValidatingWebhookConfiguration $webhook not found: apply the manifests first:" >&2
    echo "  kubectl apply -k deploy/overlays/manual-certs" >&2
    exit 1
  }
fi

# 1. The CA: reuse the stored one, else create it.
ca_created=false
if ! $dry_run && kc get secret bizrq-webhook-ca >/dev/null 2>&1; then
  echo "Reusing the CA in Secret $namespace/bizrq-webhook-ca"
  kc get secret bizrq-webhook-ca -o 'jsonpath={.data.tls\.crt}' | openssl base64 -d -A >"$dir/ca.crt"
  kc get secret bizrq-webhook-ca -o 'jsonpath={.data.tls\.key}' | openssl base64 -d -A >"$dir/ca.key"
  openssl x509 -in "$dir/ca.crt" -noout >/dev/null
else
  echo "Creating a CA for the bizrq webhook"
  cat >"$dir/ca.cnf" <<EOF
[req]
distinguished_name = dn
prompt = no
x509_extensions = v3_ca
[dn]
CN = bizrq-webhook-ca
[v3_ca]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
EOF
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$dir/ca.key" 2>/dev/null
  openssl req -x509 -new -key "$dir/ca.key" -days "$ca_days" -sha256 \
    -config "$dir/ca.cnf" -out "$dir/ca.crt"
  ca_created=true
fi

# 2. The serving certificate. The API servers dial https://$host and, like
# every modern TLS client, check the subjectAltName (not the CN).
echo "Issuing the serving certificate for $host ($days days)"
cat >"$dir/server.cnf" <<EOF
[req]
distinguished_name = dn
prompt = no
[dn]
CN = $host
[v3_server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = DNS:$host, DNS:$host.cluster.local, DNS:$service.$namespace, DNS:$service
EOF
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$dir/tls.key" 2>/dev/null
openssl req -new -key "$dir/tls.key" -config "$dir/server.cnf" -out "$dir/tls.csr"
openssl x509 -req -in "$dir/tls.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
  -set_serial "0x$(openssl rand -hex 16)" -days "$days" -sha256 \
  -extfile "$dir/server.cnf" -extensions v3_server -out "$dir/tls.crt" 2>/dev/null
openssl verify -CAfile "$dir/ca.crt" -purpose sslserver "$dir/tls.crt" >/dev/null
openssl x509 -in "$dir/tls.crt" -noout -subject -enddate | sed 's/^/  /'

# 3. The API servers' client certificate, from the same CA.
echo "Issuing the API servers' client certificate for $client_name ($days days)"
cat >"$dir/client.cnf" <<EOF
[req]
distinguished_name = dn
prompt = no
[dn]
CN = $client_name
[v3_client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = DNS:$client_name
EOF
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$dir/client.key" 2>/dev/null
openssl req -new -key "$dir/client.key" -config "$dir/client.cnf" -out "$dir/client.csr"
openssl x509 -req -in "$dir/client.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
  -set_serial "0x$(openssl rand -hex 16)" -days "$days" -sha256 \
  -extfile "$dir/client.cnf" -extensions v3_client -out "$dir/client.crt" 2>/dev/null
openssl verify -CAfile "$dir/ca.crt" -purpose sslclient "$dir/client.crt" >/dev/null

if $dry_run; then
  apiserver_out="$dir/apiserver"
  write_apiserver_files "$dir/client.crt" "$dir/client.key"
  if [ -n "$out" ]; then
    echo "Dry run: the files are in $out; nothing was changed in the cluster."
  else
    echo "Dry run: certificate checked and discarded (--out DIR keeps it); nothing was changed in the cluster."
  fi
  exit 0
fi

# 4. The Secrets, by server-side apply: re-runs replace them in place, and
# (unlike client-side apply) no copy of the key lands in an annotation.
apply() { kc apply --server-side --field-manager=bizrq-gen-certs --force-conflicts -f -; }
if $ca_created; then
  kc create secret tls bizrq-webhook-ca --cert="$dir/ca.crt" --key="$dir/ca.key" \
    --dry-run=client -o yaml | apply
fi
kc create secret generic bizrq-webhook-tls --type=kubernetes.io/tls \
  --from-file=tls.crt="$dir/tls.crt" --from-file=tls.key="$dir/tls.key" \
  --from-file=ca.crt="$dir/ca.crt" --dry-run=client -o yaml | apply
kc create secret generic bizrq-apiserver-client --type=kubernetes.io/tls \
  --from-file=tls.crt="$dir/client.crt" --from-file=tls.key="$dir/client.key" \
  --from-file=ca.crt="$dir/ca.crt" --dry-run=client -o yaml | apply

# 5. The API server's files.
write_apiserver_files "$dir/client.crt" "$dir/client.key"

# 6. caBundle into every webhook entry. With a new CA while pods still serve
# a certificate from an earlier one, trust both until the restart below has
# replaced them (the next run, reusing this CA, drops the old one).
cp "$dir/ca.crt" "$dir/ca-bundle.pem"
if $ca_created; then
  old_bundle="$(kubectl get validatingwebhookconfiguration "$webhook" -o 'jsonpath={.webhooks[0].clientConfig.caBundle}')"
  if [ -n "$old_bundle" ]; then
    printf '%s' "$old_bundle" | openssl base64 -d -A >>"$dir/ca-bundle.pem"
  fi
fi
ca_bundle="$(openssl base64 -A <"$dir/ca-bundle.pem")"
count="$(kubectl get validatingwebhookconfiguration "$webhook" -o 'jsonpath={range .webhooks[*]}{.name}{"\n"}{end}' | grep -c . || true)"
patch="["
i=0
while [ "$i" -lt "$count" ]; do
  [ "$i" -gt 0 ] && patch="$patch,"
  patch="$patch{\"op\":\"add\",\"path\":\"/webhooks/$i/clientConfig/caBundle\",\"value\":\"$ca_bundle\"}"
  i=$((i + 1))
done
patch="$patch]"
kubectl patch validatingwebhookconfiguration "$webhook" --type=json -p "$patch"
echo "caBundle set on $count webhooks of ValidatingWebhookConfiguration $webhook"
# The MutatingWebhookConfiguration of the same name (queued admission,
# one entry) is served by the same certificate.
if kubectl get mutatingwebhookconfiguration "$webhook" >/dev/null 2>&1; then
  kubectl patch mutatingwebhookconfiguration "$webhook" --type=json \
    -p "[{\"op\":\"add\",\"path\":\"/webhooks/0/clientConfig/caBundle\",\"value\":\"$ca_bundle\"}]"
  echo "caBundle set on MutatingWebhookConfiguration $webhook"
fi

# 7. Pick up the new certificate.
if kc get deployment "$service" >/dev/null 2>&1; then
  kc rollout restart deployment "$service"
  echo "Waiting for the rollout (kubectl -n $namespace rollout status deployment/$service):"
  kc rollout status deployment "$service" --timeout=180s || {
    echo "gen-certs.sh: the rollout did not finish; see deploy/README.md, Troubleshooting" >&2
    exit 1
  }
fi
echo "Done. Renew by running deploy/gen-certs.sh again before the expiry date above,"
echo "and copy the new webhook-kubeconfig.yaml to the control-plane nodes."
