#!/usr/bin/env bash
# AWS's own token builders for tests/aws.rs, from PyPI into a venv of
# their own (~/.cache/walrelay): botocore (RDS IAM's generate_db_auth_token)
# and aws-msk-iam-sasl-signer-python (MSK IAM). Prints the venv's python.
# Safe to run again: it installs once.
set -euo pipefail

cache="${XDG_CACHE_HOME:-$HOME/.cache}/walrelay"
venv="$cache/aws-oracle-botocore-1.44.5-msk-1.0.2"
if [ ! -f "$venv/.installed" ]; then
  echo "installing botocore and aws-msk-iam-sasl-signer-python into $venv" >&2
  rm -rf "$venv"
  mkdir -p "$cache"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check \
    botocore==1.44.5 aws-msk-iam-sasl-signer-python==1.0.2 >&2
  touch "$venv/.installed"
fi
echo "$venv/bin/python"
