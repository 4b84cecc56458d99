"""`replay` without a JVM (service/batch/replay_local.py): how many workers a local master means,
the range size that keeps them busy, and worker processes writing the change log one process
writes, file for file, on the fixture binlogs; a task's error names the file and offset."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from service.batch.replay_local import MIN_SPLIT, TaskFailed, balanced_split, local_workers, replay_locally
from service.errors import ConfigError
from service.transactions import TableFilter

BINLOGS = Path(__file__).resolve().parents[1] / "fixtures" / "binlog" / "mariadb-10.11"
FILES = [str(BINLOGS / n) for n in ("01-setup.000001", "02-full.000002", "07-statement-events.000007")]


def test_workers_of_a_local_master() -> None:
    assert local_workers("local") == 1
    assert local_workers("local[3]") == 3 and local_workers("local[4,2]") == 4  # local[N,F]: F retries
    assert local_workers("local[*]") >= 1
    with pytest.raises(ConfigError, match="local\\[N\\]"):
        local_workers("local[x]")


def test_ranges_small_enough_for_every_worker(tmp_path: Path) -> None:
    big = tmp_path / "big.000001"
    with big.open("wb") as fh:
        fh.truncate(100 << 20)
    assert balanced_split([str(big)], 2, 64 << 20) == 25 << 20  # 4 ranges of 25 MiB, not 64 + 36
    assert balanced_split([str(big)], 1, 64 << 20) == 64 << 20  # one worker: as asked
    assert balanced_split([str(big)], 16, 64 << 20) == MIN_SPLIT
    assert balanced_split([str(big)], 2, 2048) == 2048  # smaller ranges asked for: kept


def _files(root: Path) -> dict[str, object]:
    out: dict[str, object] = {"_replay.json": (root / "_replay.json").read_bytes()}
    for f in sorted(root.rglob("*.parquet")):
        out[str(f.relative_to(root))] = pq.read_table(f)
    return out


def test_worker_processes_write_what_one_process_writes(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    a = replay_locally(FILES, str(one), TableFilter(), 1, canonical=True, split_bytes=4096)
    b = replay_locally(FILES, str(two), TableFilter(), 2, canonical=True, split_bytes=4096)
    assert (a.changes, a.by_table, a.ddl, a.transactions, a.end) == (
        b.changes, b.by_table, b.ddl, b.transactions, b.end
    )  # fmt: skip
    assert a.changes > 0 and a.ddl > 0
    got, want = _files(two), _files(one)
    assert list(got) == list(want) and len(got) > 3 + len(FILES)  # split: several parts per file
    for name, table in want.items():
        assert got[name] == table if isinstance(table, bytes) else table.equals(got[name]), name  # type: ignore[attr-defined]
    assert not Path(f"{two}.__tmp__").exists()


def test_a_corrupt_file_fails_in_its_worker_with_the_file_and_offset(tmp_path: Path) -> None:
    for f in FILES[:2]:
        shutil.copy(f, tmp_path / Path(f).name)
    bad = tmp_path / Path(FILES[1]).name
    with bad.open("r+b") as fh:
        fh.truncate(bad.stat().st_size - 7)
    inputs = [str(tmp_path / Path(f).name) for f in FILES[:2]]
    with pytest.raises(TaskFailed) as caught:
        replay_locally(inputs, str(tmp_path / "out"), TableFilter(), 2)
    last = str(caught.value).splitlines()[-1]
    assert last.startswith("service.errors.TruncatedEvent: ") and bad.name in last and "offset" in last
    assert "Traceback" in str(caught.value.__cause__.__cause__)  # type: ignore[union-attr]  # the worker's
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.__tmp__").exists()
