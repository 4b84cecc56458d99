"""Compare a mirror with its source row by row, and repair what differs (`binlog-mirror verify`).

Each selected table is read from the source in key order, in key-range chunks (as a resync reads
it), and each row is compared with its Redis key in the sink's own layout and value encoding
(`service.sink.keys`, `service.sink.values`): the hash's fields or the JSON document, exactly as
the mirror would write that row. Keys the mirror holds for the table (its `__keys` set and any
row key found by SCAN) that no source row has are extra.

The service may run meanwhile: a row that differs may only be one the mirror has not applied yet.
Suspects are read again, from the source and from Redis, once the mirror's checkpoint has passed
the source's binlog position read with them (or the checkpoint stopped moving: the service is
stopped or idle), up to `rounds` times; only what still differs is reported.

`repair` rewrites exactly those rows through the sink (`RedisMirror.apply`), with its guarantees:
the writer lease is taken first (refused while a running service holds it), and each call is atomic
and fenced by the lease and the checkpoint chain. A repair is a transaction that ends where the
mirror's checkpoint already is: a differing or missing row is written whole from the source, an
extra key is deleted (its `__keys` entry, change-log entry and sequence number go with it).
Transactions the mirror has not applied yet (a stopped service) are applied after it and lead
to the same rows.

The parts: verifier.py (Verifier: a whole run over the selected tables), run.py (VerifyRun: one
table's check and recheck), reading.py (the rows on each side), repairs.py (writing the fixes
through the sink), report.py (what was found).
"""

from service.rowcompare import compare_row, expected_value
from service.verify.repairs import LeaseHeld
from service.verify.report import Difference, TableReport, VerifyReport
from service.verify.run import VerifyRun
from service.verify.verifier import Verifier

__all__ = [
    "Difference",
    "LeaseHeld",
    "TableReport",
    "VerifyReport",
    "VerifyRun",
    "Verifier",
    "compare_row",
    "expected_value",
]
