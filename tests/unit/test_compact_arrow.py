"""When `compact` and `load` run without a JVM (service/batch/compact_arrow.py): a local master,
paths pyarrow reads, and for compact a change log small enough to fold in memory."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from service.batch import compact_arrow
from service.batch.compact_arrow import fits_in_memory, local_paths


def test_local_paths_only_for_a_local_master_and_pyarrow_paths(tmp_path: Path) -> None:
    assert local_paths("local[*]", str(tmp_path), f"file:{tmp_path}/out")
    assert local_paths("local", str(tmp_path)) and local_paths("local[2]", str(tmp_path))
    assert not local_paths("spark://host:7077", str(tmp_path))  # a cluster: Spark
    assert not local_paths("yarn", str(tmp_path))
    assert not local_paths("local[*]", "viewfs://cluster/state")  # Hadoop-only: Spark


def test_a_change_log_too_big_for_memory_goes_to_spark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "changes" / "s" / "t").mkdir(parents=True)
    pq.write_table(pa.table({"seq": list(range(1000))}), tmp_path / "changes" / "s" / "t" / "part-0.parquet")
    assert fits_in_memory(str(tmp_path))
    monkeypatch.setattr(compact_arrow, "_MEMORY_SHARE", 10**15)  # as if the memory were tiny
    assert not fits_in_memory(str(tmp_path))
