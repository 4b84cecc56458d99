"""Dev tooling, kept apart from the service: the local MariaDB + Redis stack (`stack`, its TLS
material in `stack_tls`), the demo writes of `binlog-mirror run` without a source (`demo`) and
the optional mypyc build of the decoding core (`build_decoder`).

Only the CLI, the tests and the benchmarks import it; the service never does (pyproject.toml's
import-linter contracts).
"""
