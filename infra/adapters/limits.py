"""AWS's documented limits that numerator writes, reads and sizes against: the Kinesis adapter
batches under them, the bench's verdict and `numerator plan` measure against them. Nothing here
imports boto3."""

from __future__ import annotations

PUT_RECORDS_MAX = 500  # records in one PutRecords call
PUT_RECORDS_MAX_BYTES = 5 * 1024 * 1024  # bytes in one PutRecords call
SHARD_RECORDS_PER_S = 1_000  # records a second written, per shard
SHARD_BYTES_PER_S = 1_048_576  # bytes a second written, per shard
SHARD_READS_PER_S = 5  # GetRecords calls a second, per shard, shared by every reader
