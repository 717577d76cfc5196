#!/usr/bin/env bash
# Validates deploy/kubernetes/ against real schemas:
# - core objects (Deployment, Service, Secret) with kubernetes-validate
#   (PyPI; it ships the Kubernetes JSON schemas), strict: unknown fields fail;
# - the Prometheus Operator objects (ServiceMonitor, PrometheusRule) with
#   the CRD schemas of @kubernetes-models/prometheus-operator (npm).
# Both tools are installed once into a cache (~/.cache/walrelay, or
# $WALRELAY_CACHE), so later runs take a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${WALRELAY_CACHE:-$HOME/.cache/walrelay}"
k8s_version=1.37.0
venv="$cache/kubernetes-validate-1.37.0"
crd="$cache/prometheus-operator-models-6.0.0"

if [ ! -f "$venv/.installed" ]; then
  echo "installing kubernetes-validate into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check kubernetes-validate==1.37.0
  touch "$venv/.installed"
fi
if [ ! -f "$crd/.installed" ]; then
  echo "installing @kubernetes-models/prometheus-operator into $crd"
  rm -rf "$crd"; mkdir -p "$crd"
  (cd "$crd" && npm install --silent --no-audit --no-fund --no-save \
    @kubernetes-models/prometheus-operator@6.0.0 js-yaml@4.1.0)
  touch "$crd/.installed"
fi

core=(deploy/kubernetes/deployment.yaml deploy/kubernetes/service.yaml deploy/kubernetes/secret.example.yaml)
crds=(deploy/kubernetes/servicemonitor.yaml deploy/kubernetes/prometheusrule.yaml)
# kubernetes-validate only warns for a kind it has no schema for: that must
# not pass silently here, so any warning fails too.
out=$("$venv/bin/kubernetes-validate" --strict -k "$k8s_version" "${core[@]}") || { echo "$out"; exit 1; }
echo "$out"
if grep -q '^WARN' <<<"$out"; then echo "kubernetes-validate warned: failing"; exit 1; fi
node scripts/kubernetes/validate-crds.mjs "$crd" "${crds[@]}"
