# One image for the replicator + API. Run ONE replica per source: the binlog reader is a single
# writer (a Redis lease fences out a second instance, but it would only stand by).
# It ships the mypyc-compiled build (`make fast`); `--build-arg COMPILE=0` builds a pure-Python one.
FROM python:3.11-slim AS build
ARG COMPILE=1
WORKDIR /src
COPY pyproject.toml README.md ./
# From pyproject.toml: the dependencies, installed first (own layer; mypyc type-checks against
# them, as `make fast` does in the dev venv), and the dev extra's mypy and stubs.
RUN python -c 'import pathlib, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
      pathlib.Path("/tmp/requirements.txt").write_text("\n".join(p["dependencies"])); \
      dev = [r for r in p["optional-dependencies"]["dev"] if r.startswith(("mypy", "types-"))]; \
      pathlib.Path("/tmp/mypyc-requirements.txt").write_text("\n".join(dev))' \
 && pip install --no-cache-dir --prefix=/install -r /tmp/requirements.txt
# Build stage only (the runtime stage gets neither): a C compiler, mypy and the stubs.
RUN if [ "$COMPILE" = 1 ]; then \
      apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
      && rm -rf /var/lib/apt/lists/* \
      && pip install --no-cache-dir "setuptools>=68" -r /tmp/mypyc-requirements.txt; \
    fi
COPY service ./service
COPY api ./api
# The build writes *.so next to their .py; they are package data (pyproject.toml), so they install.
RUN if [ "$COMPILE" = 1 ]; then \
      PYTHONPATH=/install/lib/python3.11/site-packages python -m service.devtools.build_decoder; \
    fi \
 && pip install --no-cache-dir --no-deps --prefix=/install .

FROM python:3.11-slim
RUN useradd --system --uid 10001 mirror
COPY --from=build /install /usr/local
USER mirror
ENV BINLOG_MIRROR_API_HOST=0.0.0.0 BINLOG_MIRROR_API_PORT=8080
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=3s CMD python -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8080/health/live')" || exit 1
# Settings come from the environment: BINLOG_MIRROR_MYSQL, BINLOG_MIRROR_REDIS, BINLOG_MIRROR_TABLES, ...
ENTRYPOINT ["binlog-mirror", "run"]
