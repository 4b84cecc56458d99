# One image for the replicator + API. Run ONE replica per source: the binlog reader is a single
# writer (a Redis lease fences out a second instance, but it would only stand by).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY service ./service
COPY api ./api
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
RUN useradd --system --uid 10001 mirror
COPY --from=build /install /usr/local
USER mirror
ENV BINLOG_MIRROR_API_HOST=0.0.0.0 BINLOG_MIRROR_API_PORT=8080
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=3s CMD python -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8080/health/live')" || exit 1
# Settings come from the environment: BINLOG_MIRROR_MYSQL, BINLOG_MIRROR_REDIS, BINLOG_MIRROR_TABLES, ...
ENTRYPOINT ["binlog-mirror", "run"]
