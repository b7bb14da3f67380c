#!/bin/bash
# LocalStack's ready hook (/etc/localstack/init/ready.d): the stream, the reply table and the
# database secret numerator needs — the same definition as `numerator aws init` and
# template.yaml (tests/unit/test_deploy.py compares the three). Safe to run again.
set -euo pipefail
STREAM=${STREAM_NAME:-numerator}
TABLE=${REPLY_TABLE:-numerator-replies}
SHARDS=${SHARDS:-4}

awslocal kinesis describe-stream-summary --stream-name "$STREAM" >/dev/null 2>&1 ||
  awslocal kinesis create-stream --stream-name "$STREAM" --shard-count "$SHARDS"
awslocal kinesis wait stream-exists --stream-name "$STREAM"

awslocal dynamodb describe-table --table-name "$TABLE" >/dev/null 2>&1 ||
  awslocal dynamodb create-table --table-name "$TABLE" \
    --attribute-definitions AttributeName=k,AttributeType=S AttributeName=f,AttributeType=S \
    --key-schema AttributeName=k,KeyType=HASH AttributeName=f,KeyType=RANGE \
    --billing-mode PAY_PER_REQUEST
awslocal dynamodb wait table-exists --table-name "$TABLE"
awslocal dynamodb update-time-to-live --table-name "$TABLE" \
  --time-to-live-specification Enabled=true,AttributeName=x >/dev/null 2>&1 || true

# The edge's DATABASE_SECRET_ARN under `sam local start-api` (localstack/env.json).
awslocal secretsmanager describe-secret --secret-id numerator-database >/dev/null 2>&1 ||
  awslocal secretsmanager create-secret --name numerator-database \
    --secret-string 'postgresql://numerator:numerator@postgres:5432/numerator'
echo "numerator: stream $STREAM ($SHARDS shard(s)), table $TABLE (TTL x), secret numerator-database"
