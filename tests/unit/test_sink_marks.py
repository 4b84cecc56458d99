"""TableMarks: which tables' updates carry whole rows, changed only by its named methods."""

from __future__ import annotations

from service.checkpoint import BinlogPosition
from service.sink.marks import TableMarks

AT = BinlogPosition("mysql-bin.000002", 400)


def test_marks_make_updates_carry_whole_rows() -> None:
    marks = TableMarks()
    assert not marks.whole_rows("db:a")
    marks.begin_resync("db:a")
    marks.gap("db:b")
    marks.restore(["db:a"], {"db:c": AT})
    assert [marks.whole_rows(t) for t in ("db:a", "db:b", "db:c", "db:d")] == [True, True, True, False]
    assert marks.resyncs_planned("db:a") == 1 and marks.settle_at("db:c") == AT


def test_marks_move_with_a_rename_and_go_with_a_drop() -> None:
    marks = TableMarks()
    marks.begin_resync("db:a")
    marks.gap("db:a")
    marks.restore(["db:a", "db:x"], {"db:a": AT})
    marks.renamed("db:a", "db:x")
    assert (set(marks.resyncs), set(marks.gaps), dict(marks.settling)) == ({"db:x"}, {"db:x"}, {"db:x": AT})
    assert marks.resyncs_planned("db:x") == 1  # a resync moved to it: a finished copy of the old one is stale
    marks.truncated("db:x")
    assert marks.gaps == set() and marks.resyncing("db:x")
    marks.dropped("db:x")
    assert not marks.whole_rows("db:x")


def test_a_finished_resync_settles_and_ends_its_marks_unless_a_newer_one_began() -> None:
    marks = TableMarks()
    marks.begin_resync("db:a")
    marks.gap("db:a")
    marks.resync_done("db:a", AT, still_current=False)
    assert marks.resyncing("db:a") and marks.has_gap("db:a") and marks.settle_at("db:a") == AT
    marks.resync_done("db:a", None, still_current=True)
    assert not marks.resyncing("db:a") and not marks.has_gap("db:a")
    assert marks.settled_by(BinlogPosition("mysql-bin.000002", 400)) == []  # not past it
    assert marks.settled_by(BinlogPosition("mysql-bin.000002", 401)) == ["db:a"]
    assert not marks.whole_rows("db:a")
