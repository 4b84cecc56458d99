#!/bin/bash
# Run once by the mysql image on an empty data directory (sourced by its entrypoint, which
# provides docker_process_sql). The mirror's replication user: read the binlog, read tables for
# resyncs and snapshots. caching_sha2_password is fine: the client speaks it.
set -euo pipefail
docker_process_sql <<SQL
CREATE USER IF NOT EXISTS 'mirror'@'%' IDENTIFIED BY '${MIRROR_PASSWORD}';
GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'mirror'@'%';
SQL
