"""One exception tree for numerator; adapters wrap their backends' errors in it.

NumeratorError
├── SettingsError          a variable in the environment is missing or malformed
├── Refused                a command cannot run as asked (its options, a port taken)
├── Invalid                a field of what a client sent is malformed (`field`, `problem`)
│   ├── InvalidCounter     a counter definition (name, template, reset, time zone)
│   └── InvalidKey         an API key's name or scopes
├── CounterExists          create: the name is taken
├── KeyExists              create key: an unrevoked key has that name
├── StoreError             Postgres refused the work for a reason other than availability
│   └── UnsupportedPostgres  a server version outside the supported range
├── Unavailable            a backend cannot serve now; retry later (503)
│   ├── StoreUnavailable   Postgres is down or refused the transaction
│   ├── StreamFull         the stream will not take more records now (back-pressure, throttling)
│   ├── LeaseLost          another batcher owns the shard (fencing)
│   └── AwsUnavailable     Kinesis or DynamoDB cannot be reached, or throttles past its retries
├── AwsRefused             Kinesis or DynamoDB refused the call (access, validation): not retried
├── MissingResource        the stream or table named in the settings does not exist
├── ShardEnded             a closed shard (after a reshard) has been read to its end
└── ReplyTimeout           no reply came within the reply timeout (504)
"""


class NumeratorError(Exception):
    """Root of every error numerator raises on purpose."""


class SettingsError(NumeratorError):
    def __init__(self, variable: str, problem: str) -> None:
        super().__init__(f"{variable}: {problem}")
        self.variable = variable


class Refused(NumeratorError):
    pass


class Invalid(NumeratorError, ValueError):
    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class InvalidCounter(Invalid):
    pass


class CounterExists(NumeratorError):
    pass


class InvalidKey(Invalid):
    pass


class KeyExists(NumeratorError):
    pass


class StoreError(NumeratorError):
    pass


class UnsupportedPostgres(StoreError):
    pass


class Unavailable(NumeratorError):
    pass


class StoreUnavailable(Unavailable):
    pass


class StreamFull(Unavailable):
    pass


class LeaseLost(Unavailable):
    pass


class ReplyTimeout(NumeratorError):
    pass


class AwsUnavailable(Unavailable):
    pass


class MissingResource(NumeratorError):
    pass


class ShardEnded(NumeratorError):
    pass


class AwsRefused(NumeratorError):
    """Not Unavailable: a retry gets the same refusal (a policy, a key, a malformed call), so
    nothing retries it and the edge answers it without Retry-After."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
