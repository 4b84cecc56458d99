"""docs/configuration.md, generated from the settings model: `python -m service.devtools.settings_doc`
(add `--check` to only compare). tests/unit/test_settings_doc.py fails when the file is out of date.

Each setting's meaning is its Field description if it has one, else its entry in MEANINGS below,
else the comments written with it in service/settings.py (the lines above it and the one after
it): a new setting documents itself where it is declared until it gets an entry here. Flags are
those of `binlog-mirror run` (service/cli/run.py).
"""

from __future__ import annotations

import argparse
import inspect
import io
import re
import sys
import tokenize
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import SecretStr
from pydantic.fields import FieldInfo

from service.settings import _FLAGS, Settings

__all__ = ["MEANINGS", "OUTPUT", "render", "setting_comments"]

OUTPUT = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
COMMAND = "python -m service.devtools.settings_doc"

MEANINGS = {
    "mysql": "The source, `mysql://user:password@host:port` (the replication user; `mariadb://` too). "
    "Keep the password out of argv: the environment, the TOML file or `mysql_password_file`.",
    "redis": "The mirror's Redis: `redis://[user:password@]host:port/db`, `rediss://` for TLS, "
    "`unix:///path`; a Redis Cluster `redis+cluster://host:port[,host:port...]`; behind Sentinel "
    "`redis+sentinel://[user:password@]host:port[,host:port...]/SERVICE[/DB]` "
    "(`rediss+cluster://`, `rediss+sentinel://` for TLS). docs/mirror.md, docs/operations.md.",
    "mysql_password_file": "Read the MySQL password from this file's first line (a mounted secret); "
    "it replaces the URL's.",
    "redis_password_file": "Read the Redis password from this file's first line; it replaces the URL's.",
    "redis_tls_ca_file": "TLS to Redis: the CA (PEM) that signed the server's certificate; without it "
    "the system's CAs. Needs a `rediss…://` URL. docs/operations.md.",
    "redis_tls_cert_file": "TLS to Redis: a client certificate (PEM), for servers with "
    "`tls-auth-clients yes`.",
    "redis_tls_key_file": "TLS to Redis: the client certificate's private key (unless the certificate "
    "file holds it).",
    "mysql_ssl": "TLS to MySQL even without a CA file (verified against the system's CAs).",
    "mysql_ssl_ca": "TLS to MySQL: the CA (PEM) that signed the server's certificate.",
    "mysql_ssl_cert": "TLS to MySQL: a client certificate (PEM).",
    "mysql_ssl_key": "TLS to MySQL: the client certificate's private key.",
    "mysql_ssl_verify": "Check the MySQL server's certificate chain and host name (false: TLS without "
    "checks, not recommended).",
    "server_id": "The replica server id the mirror registers with; unique among the source's replicas.",
    "tables": "`schema.table` globs of the tables to mirror (`shop.*`); empty: every table.",
    "exclude_tables": "`schema.table` globs to leave out; wins over `tables`.",
    "key_prefix": "The first part of every Redis key of this mirror (`mirror:shop:orders:42`).",
    "start": "Where a mirror without a checkpoint starts: `now`, `start` (the oldest binlog kept), "
    "`FILE:POS` or a GTID set.",
    "on_no_checkpoint": "Without a checkpoint in Redis: `now` (copy the tables, then stream), `start` "
    "(replay every binlog kept) or `refuse` (stop; fill the mirror with `snapshot` first).",
    "on_history_mismatch": "When the source's event at the checkpoint is another one (a rebuilt or "
    "replaced server): `stop`, or `recopy` the selected tables from this source (docs/mirror.md).",
    "heartbeat_seconds": "The source sends a heartbeat when idle this long; silence for 2.5 times it "
    "means a dead connection: reconnect.",
    "queue_size": "Transactions read ahead of the applier (the source's bounded queue).",
    "queue_rows": "... and at most this many rows in them: the memory bound of the read-ahead.",
    "api_host": "The address the HTTP API listens on.",
    "api_port": "The HTTP API's port (0: any free port).",
    "api_token": "The control token: bearer token for every endpoint but health (and what the read "
    "token may do). docs/api.md, Authentication.",
    "api_token_file": "A file whose first line is `api_token` (a mounted secret).",
    "api_read_token": "The read token: status endpoints, `/metrics` and `/ws/events`, no control; "
    "must differ from `api_token`.",
    "api_read_token_file": "A file whose first line is `api_read_token`.",
    "api_allow_unauthenticated": "Serve data and control endpoints without a token on a non-loopback "
    "`api_host` (refused by default; health and `/metrics` stay open).",
    "max_lag_seconds": "The lag limit: `/lag` reports `over_limit` above it, and the lag metric and "
    "the LagHigh alert use it (not readiness).",
    "value_mode": "How a row is stored: `hash` (one hash per row, a field per non-NULL column) or "
    "`json` (one JSON string per row). docs/mirror.md.",
    "chunk_rows": "A transaction with more row changes is applied in chunks of this many "
    "(docs/mirror.md, big transactions).",
    "plain_inserts": "Hash layout: apply insert-only calls as MULTI/EXEC instead of the script (the "
    "same writes, about half Redis' CPU).",
    "changelog_maxlen": "> 0: also keep a change-log stream `{prefix}:__changes` of about this many "
    "entries, written atomically with the rows.",
    "lease_ttl_seconds": "The writer lease's TTL: a standby takes over within it after the leader dies.",
    "ttl_sweep_seconds": "How often the index entries of ttl rows Redis expired are removed "
    '(`[table."…"]` `ttl`; docs/mirror.md, "Expiry").',
    "resync_chunk_rows": "Rows per SELECT when a table is copied or re-read (bootstrap, after DDL, "
    "`ctl resync`).",
    "verify_rows_per_second": "The background verifier's budget: rows per second compared with the "
    "source; 0: off (docs/mirror.md).",
    "verify_repair": "The background verifier rewrites the rows it finds different (else only counts them).",
    "table_step_rows": "Rows per Redis call of DROP/TRUNCATE/RENAME and resync work (keeps each call short).",
    "api_cors_origins": "Origins the API answers with CORS headers: `*` or exact origins; empty: none.",
    "ws_buffer_events": "Row changes kept in memory for websocket clients that resume (`after=`).",
    "ws_queue_events": "Row changes queued per websocket subscriber; one that falls further behind is "
    "closed (1013).",
    "ws_ping_seconds": "Websocket ping interval, and how long a pong may take.",
    "table": 'Per-table shaping: `[table."schema.table"]` sections of the config file (a glob '
    "allowed, the most specific match wins) with `columns` or `exclude` (the fields kept), `rename` "
    "(a field's name in Redis), `key` (the row's key template) and `[[…index]]` entries (unique, set "
    "and zset index keys), `ttl` (`{ at = column }` or `{ seconds = N }`) and `value` (`hash` or "
    "`json`: the table's rows in that form whatever value_mode says). On a Redis Cluster a "
    "section's `key` and index templates share one literal hash tag "
    "before any placeholder (`app:{{users}}:user:{id}`). In the environment: one JSON object of sections. "
    'docs/mirror.md, "Shaping", "Key templates and index keys", "Expiry" and "Redis Cluster".',
}

HEAD = f"""# Configuration reference

<!-- generated by `{COMMAND}` from service/settings.py: edit there, then run it -->

Every setting of binlog-mirror, from the settings model (`service/settings.py`). A setting is
given, highest priority first, as a flag of `binlog-mirror run`, an environment variable, or a key
of the TOML file named by `--config FILE` / `BINLOG_MIRROR_CONFIG` (an example with every key:
`deploy/binlog-mirror.example.toml`); else its default applies. Lists are comma-separated in
environment variables (`BINLOG_MIRROR_TABLES='shop.*,crm.users'`) and TOML arrays in the file.
An invalid value stops startup with one line naming the setting and where it came from
(README, "Configuration").

"""


def setting_comments() -> dict[str, str]:
    """name -> the comments around its declaration in the Settings class."""
    source = inspect.getsource(Settings)
    lines = source.splitlines()
    comments: dict[int, str] = {}  # line number (1-based) -> comment text
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    out: dict[str, str] = {}
    declared = re.compile(r"^    (\w+): ")
    for number, line in enumerate(lines, start=1):
        match = declared.match(line)
        if not match or match.group(1) not in Settings.model_fields:
            continue
        above: list[str] = []
        n = number - 1
        while n in comments and lines[n - 1].lstrip().startswith("#"):
            above.insert(0, comments[n])
            n -= 1
        parts = [*above, comments.get(number, "")]
        out[match.group(1)] = " ".join(p for p in parts if p and not p.startswith("noqa"))
    return out


def _type(annotation: Any, field: FieldInfo) -> str:
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) in (Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    if get_origin(annotation) is Literal:
        kind = " \\| ".join(str(a) for a in get_args(annotation))
    elif get_origin(annotation) is list:
        kind = "list of strings"
    else:
        name = getattr(annotation, "__name__", str(annotation))
        kind = {"MySQLUrl": "URL", "RedisUrl": "URL", "SecretStr": "secret", "Path": "path"}.get(name, name)
    bounds = []
    for meta in field.metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            value = getattr(meta, attr, None)
            if isinstance(meta, annotated_types.BaseMetadata) and value is not None:
                bounds.append(f"{sign} {value:g}" if isinstance(value, float) else f"{sign} {value}")
        if getattr(meta, "pattern", None):
            bounds.append(f"`{meta.pattern}`")
    return kind + (f" ({', '.join(bounds)})" if bounds else "")


def _default(field: FieldInfo) -> str:
    value = field.default
    if value is None:
        return "unset"
    if isinstance(value, SecretStr):
        return "set"
    if isinstance(value, list):
        return "`[]`" if not value else f"`{value}`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{value:g}`" if isinstance(value, float) else f"`{value}`"


def _run_flags() -> dict[str, str]:
    """flag spelling -> itself, for every option of `binlog-mirror run`."""
    import typer.main

    from service.cli import app

    group: Any = typer.main.get_command(app)
    flags: dict[str, str] = {}
    for param in group.commands["run"].params:
        for opt in [*param.opts, *param.secondary_opts]:
            flags[opt] = opt
    return flags


def render() -> str:
    comments = setting_comments()
    flags = _run_flags()
    rows = [
        "| setting (TOML key) | flag | environment variable | type | default | meaning |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, field in Settings.model_fields.items():
        flag = _FLAGS.get(name, f"--{name.replace('_', '-')}")
        flag_cell = f"`{flag}`" if flag in flags else ""
        meaning = field.description or MEANINGS.get(name) or comments.get(name, "")
        cells = [f"`{name}`", flag_cell, f"`BINLOG_MIRROR_{name.upper()}`"]
        cells += [_type(field.annotation, field), _default(field), meaning.replace("|", "\\|")]
        rows.append("| " + " | ".join(cells) + " |")
    return HEAD + "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is out of date")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date: run `{COMMAND}`", file=sys.stderr)  # noqa: T201
            return 1
        return 0
    args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
