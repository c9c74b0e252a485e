#!/usr/bin/env bash
# Start compose.yaml's oracle or sqlserver container where a Docker engine runs, wait until it is
# healthy, and print the SDK_TEST_* exports its tests read. Without a Docker engine print only a
# comment: the tests then skip, naming the variable to set. Used by tox's oracle and sqlserver
# envs:   eval "$(bash scripts/containers.sh oracle)"
set -euo pipefail
cd "$(dirname "$0")/.."
service=${1:?usage: containers.sh oracle|sqlserver}

if [[ -n "${SDK_TEST_ORACLE_URL:-}" && $service == oracle ]] ||
   [[ -n "${SDK_TEST_SQLSERVER_URL:-}" && $service == sqlserver ]]; then
    echo "# containers: $service URL already set; not starting a container" >&2
    exit 0
fi
if ! docker info >/dev/null 2>&1; then
    echo "# containers: no Docker engine here; the $service tests will skip" >&2
    exit 0
fi
echo "# containers: starting $service (the first start takes minutes)" >&2
docker compose up -d --wait --wait-timeout 900 "$service" >&2
case $service in
    oracle)
        echo "export SDK_TEST_ORACLE_URL='oracle://c##sdk_cdc:sdk@127.0.0.1:1521/FREE?pdb=FREEPDB1'"
        echo "export SDK_TEST_ORACLE_ADMIN_URL='oracle://sdk_test:sdk@127.0.0.1:1521/FREEPDB1'"
        ;;
    sqlserver)
        echo "export SDK_TEST_SQLSERVER_URL='sqlserver://sa:Sdk_passw0rd@127.0.0.1:1433/master'"
        ;;
esac
