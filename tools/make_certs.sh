#!/usr/bin/env bash
# Makes a private CA and one certificate for a Fulcrum cluster's processes
# (ECDSA P-256): every process serves and dials with the same key pair, and
# each side verifies the other against the CA (mutual TLS).
#
#   tools/make_certs.sh DIR [--namespace NS] [--days N] [--san NAME]...
#
# Writes DIR/ca.crt, DIR/ca.key (keep it offline), DIR/tls.crt, DIR/tls.key.
# The certificate names every address processes dial: the defaults cover the
# Kubernetes manifests in namespace NS (default "default": fulcrum-coordinator,
# fulcrum-coordinator.NS.svc and *.fulcrum-server.NS.svc, the names servers
# advertise; a wildcard must leave at least two labels, so not
# *.fulcrum-server) and loopback; add yours with --san (a DNS name, or an IP
# address). For Kubernetes:
#   kubectl create secret generic fulcrum-tls --from-file=DIR/ca.crt \
#     --from-file=DIR/tls.crt --from-file=DIR/tls.key
set -euo pipefail
dir=${1:?usage: tools/make_certs.sh DIR [--namespace NS] [--days N] [--san NAME]...}
shift
days=365
namespace=default
sans=(localhost 127.0.0.1 ::1)
while [ $# -gt 0 ]; do
  case "$1" in
    --namespace) namespace=$2; shift 2 ;;
    --days) days=$2; shift 2 ;;
    --san) sans+=("$2"); shift 2 ;;
    *) echo "make_certs: unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v openssl >/dev/null || {
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq openssl >/dev/null
}
mkdir -p "$dir"
sans+=(fulcrum-coordinator "fulcrum-coordinator.$namespace.svc"
      "*.fulcrum-server.$namespace.svc")
alt=""
for s in "${sans[@]}"; do
  if [[ $s =~ ^[0-9.]+$ || $s == *:* ]]; then alt="$alt,IP:$s"; else alt="$alt,DNS:$s"; fi
done
alt=${alt#,}
umask 077
openssl ecparam -name prime256v1 -genkey -noout -out "$dir/ca.key"
openssl req -x509 -new -key "$dir/ca.key" -sha256 -days "$days" \
  -subj "/CN=Fulcrum cluster CA" -out "$dir/ca.crt" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
openssl ecparam -name prime256v1 -genkey -noout -out "$dir/tls.key.ec"
# PKCS#8, the form every TLS library reads.
openssl pkcs8 -topk8 -nocrypt -in "$dir/tls.key.ec" -out "$dir/tls.key"
rm -f "$dir/tls.key.ec"
openssl req -new -key "$dir/tls.key" -subj "/CN=fulcrum" -out "$dir/tls.csr"
openssl x509 -req -in "$dir/tls.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
  -CAcreateserial -sha256 -days "$days" -out "$dir/tls.crt" \
  -extfile <(printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=critical,digitalSignature\n' "$alt") \
  2>/dev/null
rm -f "$dir/tls.csr" "$dir/ca.srl"
chmod 644 "$dir/ca.crt" "$dir/tls.crt"
echo "make_certs: $dir/{ca.crt,ca.key,tls.crt,tls.key} for $alt (valid $days days)"
