"""Adapters: one module per external system behind a port (memory, Postgres, Kinesis,
DynamoDB, and the AWS clients and secrets they share)."""
