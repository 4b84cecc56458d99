"""aiomysql I/O: the replication connection, preflight, and `BinlogSource` (committed transactions,
in service.transport.source). Nothing is imported here, so a light module of the package (columns,
connection) does not pull in the whole source and its dependencies."""
