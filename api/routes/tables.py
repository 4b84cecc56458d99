"""Table-map state of the tables the mirror has seen."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, status

from api.deps import STATUS_RESPONSES, AuthDep, CountedStatusDep
from api.schemas import DetailOut, TableOut, TablesOut, TableSummaryOut

__all__ = ["router"]

router = APIRouter(prefix="/tables", tags=["tables"], dependencies=[AuthDep], responses=STATUS_RESPONSES)


@router.get("", response_model=TablesOut, summary="Every table seen since start, sorted by schema and table")
async def list_tables(s: CountedStatusDep) -> TablesOut:
    return TablesOut(
        tables=[TableSummaryOut.from_domain(t) for t in s.tables],
        unmatched_tables=list(s.unmatched_tables),
    )


@router.get(
    "/{schema}/{table}",
    response_model=TableOut,
    summary="One table: id, columns, key, rows applied per op, last change",
    responses={404: {"model": DetailOut, "description": "No rows event for this table since start."}},
)
async def get_table(schema: str, table: str, s: CountedStatusDep) -> TableOut:
    for t in s.tables:
        if t.schema == schema and t.table == table:
            return TableOut.from_domain(t)
    raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"unknown table {schema}.{table}")
