# The batcher image: `numerator batcher` as a non-root user, healthy while its /healthz answers.
#   docker buildx build --platform linux/arm64 -t numerator:0.1.0 .   (template.yaml runs arm64)
# The one-off migration is the same image with the command `migrate`:
#   docker run --rm -e DATABASE_URL=... numerator:0.1.0 migrate
FROM python:3.12-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY infra infra
COPY functions functions
COPY batcher batcher
COPY numerator numerator
COPY bench bench
RUN pip install --no-cache-dir --prefix=/install . \
    # The embedded Postgres (pgserver, ~90 MB) is for `numerator up` on a laptop; the batcher
    # only ever talks to DATABASE_URL.
    && rm -rf /install/lib/python3.12/site-packages/pgserver*

FROM python:3.12-slim
COPY --from=build /install /usr/local
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin numerator
USER 10001
ENV MODE=aws PYTHONUNBUFFERED=1
EXPOSE 8081
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8081/healthz', timeout=2).status != 200)"]
ENTRYPOINT ["numerator"]
CMD ["batcher", "--host", "0.0.0.0", "--port", "8081"]
