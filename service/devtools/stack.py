"""The local stack: a throwaway MariaDB (configured as a replication source) and Redis on 127.0.0.1.

One code path serves the demo (`binlog-mirror stack up`), the test fixtures and the benchmarks.
Everything lives under one directory (default `.stack/`): data, sockets, logs, and `stack.json`,
which records the ports, the process ids and the generated passwords so that `status` and `down`
work from another process.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pymysql

from service.devtools.processes import alive, free_ports, redis_command, redis_ping, spawn_detached, stop
from service.devtools.stack_tls import ensure_tls_files
from service.errors import StackError

__all__ = ["LocalStack", "StackInfo", "default_stack_dir"]

log = logging.getLogger(__name__)

APT_PACKAGES = ("mariadb-server", "mariadb-client", "redis-server")
REPLICATION_USER = "mirror"
ADMIN_USER = "admin"
START_TIMEOUT = 60.0
CLUSTER_MASTERS = 3  # `stack up --redis-cluster`


def default_stack_dir() -> Path:
    return Path(os.environ.get("BINLOG_MIRROR_STACK_DIR", ".stack")).resolve()


def _binary(name: str, *fallbacks: str) -> str | None:
    for candidate in (name, *fallbacks):
        found = shutil.which(candidate) or next(
            (p for p in (f"/usr/sbin/{candidate}", f"/usr/bin/{candidate}") if os.access(p, os.X_OK)), None
        )
        if found:
            return found
    return None


def ensure_packages() -> None:
    """Install MariaDB and Redis from Debian's packages when missing (root only)."""
    missing = [
        b for b in ("mariadbd", "mariadb-install-db", "redis-server", "mariadb-binlog") if not _binary(b)
    ]
    if not missing:
        return
    command = "apt-get update && apt-get install -y " + " ".join(APT_PACKAGES)
    if os.geteuid() != 0:
        raise StackError(f"missing {', '.join(missing)}; install them with: sudo {command}")
    log.info("installing %s", " ".join(APT_PACKAGES))
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    result = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise StackError(f"'{command}' failed: {result.stderr.strip()[-500:]}")


@dataclass
class StackInfo:
    dir: str
    mysql_port: int
    redis_port: int
    repl_password: str
    admin_password: str
    mysql_pid: int | None = None
    redis_pid: int | None = None
    # `--redis-cluster`: three masters (no replicas) instead of the one Redis
    cluster_ports: list[int] = field(default_factory=list)
    cluster_pids: list[int | None] = field(default_factory=list)

    @property
    def mysql_url(self) -> str:
        """The replication user: REPLICATION SLAVE, REPLICATION CLIENT, BINLOG MONITOR, SELECT, and
        REPLICATION MASTER ADMIN (MariaDB needs it for SHOW SLAVE HOSTS: the unique server_id check)."""
        return f"mysql://{REPLICATION_USER}:{self.repl_password}@127.0.0.1:{self.mysql_port}"

    @property
    def admin_url(self) -> str:
        """An all-privileges user for writes (demo workload, tests)."""
        return f"mysql://{ADMIN_USER}:{self.admin_password}@127.0.0.1:{self.mysql_port}"

    @property
    def redis_url(self) -> str:
        if self.cluster_ports:
            return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.cluster_ports)
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def urls(self) -> dict[str, str]:
        return {"mysql": self.mysql_url, "mysql_admin": self.admin_url, "redis": self.redis_url}


class LocalStack:
    def __init__(
        self,
        directory: Path | str | None = None,
        mariadb_options: Mapping[str, str] | None = None,
        redis_cluster: bool = False,
    ) -> None:
        """`mariadb_options` override (or add) lines of the generated my.cnf, e.g.
        {"binlog_row_metadata": "NO_LOG"} for a source configured unlike the default stack.
        `redis_cluster`: a Redis Cluster of three masters instead of one Redis (`redis_url` is then
        `redis+cluster://...`)."""
        self.dir = Path(directory).resolve() if directory else default_stack_dir()
        self.mariadb_options = dict(mariadb_options or {})
        self.redis_cluster = redis_cluster
        self.state_file = self.dir / "stack.json"
        self.mysql_dir = self.dir / "mariadb"
        self.redis_dir = self.dir / "redis"

    # -- state ---------------------------------------------------------------------------------
    def load(self) -> StackInfo | None:
        if not self.state_file.exists():
            return None
        return StackInfo(**json.loads(self.state_file.read_text()))

    def _save(self, info: StackInfo) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(info), indent=2))
        tmp.chmod(0o600)
        tmp.replace(self.state_file)

    def _info(self) -> StackInfo:
        info = self.load()
        if info is None:
            mysql_port, redis_port = free_ports(2)
            info = StackInfo(
                dir=str(self.dir),
                mysql_port=mysql_port,
                redis_port=redis_port,
                repl_password=secrets.token_hex(8),
                admin_password=secrets.token_hex(8),
            )
            self._save(info)
        if self.redis_cluster and not info.cluster_ports:
            info.cluster_ports = free_ports(CLUSTER_MASTERS, cluster=True)
            info.cluster_pids = [None] * CLUSTER_MASTERS
            self._save(info)
        return info

    # -- lifecycle -----------------------------------------------------------------------------
    def up(self) -> StackInfo:
        ensure_packages()
        info = self._info()
        self.start_mysql(info)
        if info.cluster_ports:
            self.start_redis_cluster(info)
        else:
            self.start_redis(info)
        return info

    def down(self, purge: bool = False) -> None:
        info = self.load()
        if info is not None:
            self.stop_mysql(info)
            self.stop_redis(info)
            for i in range(len(info.cluster_ports)):
                self.stop_cluster_node(i, info)
        if purge and self.dir.exists():
            shutil.rmtree(self.dir)

    def start_mysql(self, info: StackInfo | None = None) -> None:
        info = info or self._info()
        if alive(info.mysql_pid):
            return
        data = self.mysql_dir / "data"
        if not (data / "mysql").exists():
            self._install_mariadb(data)
        cnf = self._write_mariadb_cnf(info)
        cmd = [_binary("mariadbd", "mysqld") or "mariadbd", f"--defaults-file={cnf}"]
        if os.geteuid() == 0:
            cmd.append("--user=root")
        info.mysql_pid = spawn_detached(cmd, self.mysql_dir / "mariadbd.out")
        self._save(info)
        self._wait_mysql(info)
        self._bootstrap_users(info)

    def stop_mysql(self, info: StackInfo | None = None, *, kill: bool = False) -> None:
        info = info or self.load()
        if info is None:
            return
        stop(info.mysql_pid, kill=kill)
        info.mysql_pid = None
        self._save(info)

    def start_redis(self, info: StackInfo | None = None) -> None:
        info = info or self._info()
        if alive(info.redis_pid):
            return
        self.redis_dir.mkdir(parents=True, exist_ok=True)
        conf = self.redis_dir / "redis.conf"
        conf.write_text(
            "\n".join(
                [
                    "bind 127.0.0.1",
                    f"port {info.redis_port}",
                    f"dir {self.redis_dir}",
                    "appendonly yes",
                    "appendfsync everysec",
                    'save ""',
                    "daemonize no",
                    f"logfile {self.redis_dir / 'redis.log'}",
                    "",
                ]
            )
        )
        server = _binary("redis-server") or "redis-server"
        info.redis_pid = spawn_detached([server, str(conf)], self.redis_dir / "redis.out")
        self._save(info)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if not alive(info.redis_pid):
                raise StackError(f"redis-server exited; see {self.redis_dir}/redis.log")
            if redis_ping(info.redis_port):
                return
            time.sleep(0.05)
        raise StackError(f"redis-server did not answer on port {info.redis_port} within {START_TIMEOUT:.0f}s")

    def stop_redis(self, info: StackInfo | None = None, *, kill: bool = False) -> None:
        info = info or self.load()
        if info is None:
            return
        stop(info.redis_pid, kill=kill)
        info.redis_pid = None
        self._save(info)

    # -- Redis Cluster ---------------------------------------------------------------------------
    def start_redis_cluster(self, info: StackInfo | None = None) -> None:
        """Start the three masters and, the first time, assign them the slots (`redis-cli
        --cluster create`); returns once every node reports cluster_state:ok."""
        info = info or self._info()
        for i in range(len(info.cluster_ports)):
            self.start_cluster_node(i, info)
        first = info.cluster_ports[0]
        if b"cluster_slots_assigned:16384" not in redis_command(first, b"CLUSTER INFO\r\n"):
            cli = _binary("redis-cli") or "redis-cli"
            nodes = [f"127.0.0.1:{p}" for p in info.cluster_ports]
            result = subprocess.run(
                [cli, "--cluster", "create", *nodes, "--cluster-replicas", "0", "--cluster-yes"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            if result.returncode != 0:
                raise StackError(f"redis-cli --cluster create failed: {result.stdout}{result.stderr}")
        self.wait_cluster(info)

    def wait_cluster(self, info: StackInfo | None = None) -> None:
        """Until every node says cluster_state:ok (all slots served, the nodes agree)."""
        info = info or self._info()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if all(b"cluster_state:ok" in redis_command(p, b"CLUSTER INFO\r\n") for p in info.cluster_ports):
                return
            time.sleep(0.1)
        raise StackError(f"the Redis Cluster on {info.cluster_ports} is not ok after {START_TIMEOUT:.0f}s")

    def _cluster_dir(self, port: int) -> Path:
        return self.dir / "redis-cluster" / str(port)

    def start_cluster_node(self, i: int, info: StackInfo | None = None) -> None:
        """Start master `i` (again: it rejoins with its slots, from its nodes.conf and AOF)."""
        info = info or self._info()
        if alive(info.cluster_pids[i]):
            return
        port = info.cluster_ports[i]
        d = self._cluster_dir(port)
        d.mkdir(parents=True, exist_ok=True)
        conf = d / "redis.conf"
        lines = ["bind 127.0.0.1", f"port {port}", f"dir {d}", "appendonly yes", "appendfsync everysec"]
        lines += ['save ""', "daemonize no", f"logfile {d / 'redis.log'}", "cluster-enabled yes"]
        lines += ["cluster-config-file nodes.conf", "cluster-node-timeout 2000"]
        # a master that is down leaves only its own slots unserved
        lines += ["cluster-require-full-coverage no", ""]
        conf.write_text("\n".join(lines))
        server = _binary("redis-server") or "redis-server"
        info.cluster_pids[i] = spawn_detached([server, str(conf)], d / "redis.out")
        self._save(info)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if not alive(info.cluster_pids[i]):
                raise StackError(f"redis-server exited; see {d}/redis.log")
            if redis_ping(port):
                return
            time.sleep(0.05)
        raise StackError(f"redis-server did not answer on port {port} within {START_TIMEOUT:.0f}s")

    def stop_cluster_node(self, i: int, info: StackInfo | None = None, *, kill: bool = False) -> None:
        info = info or self.load()
        if info is None or i >= len(info.cluster_pids):
            return
        stop(info.cluster_pids[i], kill=kill)
        info.cluster_pids[i] = None
        self._save(info)

    # -- MariaDB details -----------------------------------------------------------------------
    def _install_mariadb(self, data: Path) -> None:
        data.mkdir(parents=True, exist_ok=True)
        cmd = [
            _binary("mariadb-install-db", "mysql_install_db") or "mariadb-install-db",
            "--no-defaults",
            f"--datadir={data}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            f"--tmpdir={self._tmpdir()}",
        ]
        if os.geteuid() == 0:
            cmd.append("--user=root")
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise StackError(f"mariadb-install-db failed: {(result.stderr or result.stdout).strip()[-500:]}")

    def _write_mariadb_cnf(self, info: StackInfo) -> Path:
        (self.mysql_dir / "binlog").mkdir(parents=True, exist_ok=True)
        ca, cert, key = ensure_tls_files(self.tls_dir)
        cnf = self.mysql_dir / "my.cnf"
        cnf.write_text(
            "\n".join(
                [
                    "[mariadbd]",
                    f"datadir={self.mysql_dir / 'data'}",
                    f"socket={self.mysql_socket}",
                    f"pid-file={self.mysql_dir / 'mariadbd.pid'}",
                    f"log-error={self.mysql_dir / 'mariadbd.err'}",
                    f"tmpdir={self._tmpdir()}",
                    f"port={info.mysql_port}",
                    "bind-address=127.0.0.1",
                    "skip-name-resolve",
                    f"log-bin={self.mysql_dir / 'binlog' / 'mysql-bin'}",
                    "binlog_format=ROW",
                    "binlog_row_image=FULL",
                    "binlog_row_metadata=FULL",
                    "binlog_checksum=CRC32",
                    "server_id=1",
                    "gtid_domain_id=0",
                    "gtid_strict_mode=ON",
                    "max_binlog_size=64M",
                    "max_allowed_packet=256M",
                    "character-set-server=utf8mb4",
                    "collation-server=utf8mb4_general_ci",
                    "innodb_buffer_pool_size=128M",
                    "innodb_log_file_size=64M",
                    "innodb_flush_log_at_trx_commit=2",
                    "sync_binlog=0",
                    "performance_schema=OFF",
                    f"ssl_ca={ca}",
                    f"ssl_cert={cert}",
                    f"ssl_key={key}",
                    "",
                ]
            )
        )
        if self.mariadb_options:
            lines = cnf.read_text().splitlines()
            names = {k.replace("-", "_") for k in self.mariadb_options}
            kept = [ln for ln in lines if ln.split("=", 1)[0].replace("-", "_") not in names]
            cnf.write_text("\n".join([*kept, *(f"{k}={v}" for k, v in self.mariadb_options.items()), ""]))
        return cnf

    def _tmpdir(self) -> Path:
        """The stack's own tmpdir: mariadbd (and its bootstrap) deletes every #sql* file in its
        tmpdir as it starts, so two stacks sharing /tmp broke each other's mariadb-install-db."""
        tmp = self.mysql_dir / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        return tmp

    @property
    def tls_dir(self) -> Path:
        """The stack's throwaway CA (`ca.pem`) and MariaDB's server certificate for 127.0.0.1."""
        return self.mysql_dir / "tls"

    @property
    def mysql_socket(self) -> Path:
        return self.mysql_dir / "mariadbd.sock"

    def _wait_mysql(self, info: StackInfo) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if not alive(info.mysql_pid):
                raise StackError(f"mariadbd exited; see {self.mysql_dir}/mariadbd.err")
            # Probe the socket by hand first: pymysql leaks its socket when the connect fails.
            try:
                with socket.socket(socket.AF_UNIX) as probe:
                    probe.connect(str(self.mysql_socket))
                self.root_connection().close()
                return
            except (OSError, pymysql.err.OperationalError):
                time.sleep(0.1)
        raise StackError(f"mariadbd did not accept connections within {START_TIMEOUT:.0f}s")

    def root_connection(self, database: str | None = None) -> pymysql.connections.Connection[Any]:
        return pymysql.connect(
            unix_socket=str(self.mysql_socket), user="root", database=database, autocommit=True
        )

    def _bootstrap_users(self, info: StackInfo) -> None:
        repl = f"'{REPLICATION_USER}'@'127.0.0.1'"
        statements = [
            f"CREATE USER IF NOT EXISTS {repl} IDENTIFIED BY '{info.repl_password}'",
            "GRANT REPLICATION SLAVE, BINLOG MONITOR, REPLICATION CLIENT, REPLICATION MASTER ADMIN, SELECT"
            f" ON *.* TO {repl}",
            f"CREATE USER IF NOT EXISTS '{ADMIN_USER}'@'127.0.0.1' IDENTIFIED BY '{info.admin_password}'",
            f"GRANT ALL PRIVILEGES ON *.* TO '{ADMIN_USER}'@'127.0.0.1' WITH GRANT OPTION",
        ]
        conn = self.root_connection()
        try:
            with conn.cursor() as cur:
                # Grants are bookkeeping, not data: keep them out of the binlog the product reads.
                cur.execute("SET SESSION sql_log_bin = 0")
                for sql in statements:
                    cur.execute(sql)
        finally:
            conn.close()

    def prepare(self, passwords_of: StackInfo | None = None) -> StackInfo:
        """The stack's ports and passwords, chosen and saved on first use. `passwords_of`: take
        another stack's passwords (a replica reached through the same URL as its primary)."""
        info = self._info()
        if passwords_of is not None:
            info.repl_password, info.admin_password = passwords_of.repl_password, passwords_of.admin_password
            self._save(info)
        return info

    # -- status --------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """What the servers themselves report (not what the config file says)."""
        info = self.load()
        if info is None:
            return {"dir": str(self.dir), "running": False}
        out: dict[str, Any] = {"dir": str(self.dir), **info.urls()}
        out["mariadb"] = self._mysql_status(info)
        out["redis_server"] = self._redis_status(info)
        out["running"] = bool(out["mariadb"].get("up") and out["redis_server"].get("up"))
        return out

    def _mysql_status(self, info: StackInfo) -> dict[str, Any]:
        if not alive(info.mysql_pid):
            return {"up": False}
        try:
            conn = pymysql.connect(
                host="127.0.0.1",
                port=info.mysql_port,
                user=REPLICATION_USER,
                password=info.repl_password,
                connect_timeout=5,
            )
        except pymysql.err.OperationalError as exc:
            return {"up": False, "error": str(exc)}
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT @@version, @@log_bin, @@binlog_format, @@binlog_row_image, @@binlog_row_metadata,"
                    " @@binlog_checksum, @@server_id, @@gtid_binlog_pos, @@log_bin_basename"
                )
                row = cur.fetchone()
                cur.execute("SHOW MASTER STATUS")
                master = cur.fetchone()
        finally:
            conn.close()
        assert row is not None
        keys = ["version", "log_bin", "binlog_format", "binlog_row_image", "binlog_row_metadata"]
        keys += ["binlog_checksum", "server_id", "gtid_binlog_pos", "log_bin_basename"]
        status: dict[str, Any] = {"up": True, "pid": info.mysql_pid, **dict(zip(keys, row, strict=True))}
        status["log_bin"] = bool(status["log_bin"])
        if master:
            status["binlog_file"], status["binlog_position"] = master[0], master[1]
        return status

    def _redis_status(self, info: StackInfo) -> dict[str, Any]:
        if info.cluster_ports:
            ok = [b"cluster_state:ok" in redis_command(p, b"CLUSTER INFO\r\n") for p in info.cluster_ports]
            return {"up": all(ok), "cluster_ports": info.cluster_ports, "pids": info.cluster_pids}
        if not alive(info.redis_pid):
            return {"up": False}
        reply = redis_command(info.redis_port, b"INFO server\r\n") + redis_command(
            info.redis_port, b"INFO persistence\r\n"
        )
        fields = dict(
            line.split(":", 1) for line in reply.decode(errors="replace").splitlines() if ":" in line
        )
        return {
            "up": "redis_version" in fields,
            "pid": info.redis_pid,
            "version": fields.get("redis_version"),
            "aof_enabled": fields.get("aof_enabled") == "1",
        }
