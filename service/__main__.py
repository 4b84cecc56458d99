from __future__ import annotations

from service.cli import app

app(prog_name="binlog-mirror")
