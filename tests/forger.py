"""A forger of pushed replies: a reader of the stream (what an analytics consumer, a Firehose or a
replay tool may be) that answers every record naming an inbox before the batchers can.

It reads every shard of a Kinesis stream with iterators of its own (a reader needs no lease and
no batcher sees it), and for each record that names an inbox (`Record.to`) sends that inbox
replies for the record's key, each giving the values FORGED onwards: the same values for every
record, so that two clients that took them would hold one value. It signs them every way a
reader of the stream can: with whatever the record carries (a token after the address, as
records carried before the push key; the reply key; the record's bytes), with nothing, and with
a key id and no key. `leaked` keys stand for a key that did leak: the control that shows its
datagrams are ones an inbox would take, so that its 0 accepted means something.
"""

from __future__ import annotations

import hashlib
import hmac
import socket
import threading
import time
from datetime import date
from typing import Any

import orjson

from infra.adapters.pushkeys import DIGEST, KEY_ID, PushKeys
from infra.wire import Reply, encode

FORGED = 900_000_000
"""The first value of every forged reply: far past what a cell hands out, so a client's value
from this on was forged."""


def forged(values: list[int]) -> list[int]:
    return [v for v in values if v >= FORGED]


class Forger:
    """Runs in a thread beside the clients until `stop()`: `seen` records read, `named` of them
    naming an inbox, `sent` datagrams sent."""

    def __init__(self, kinesis: Any, stream: str, leaked: list[bytes] | None = None) -> None:
        self.kinesis, self.stream, self.leaked = kinesis, stream, leaked or []
        self.seen = self.named = self.sent = 0
        self._stopping, self._reading = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, name="forger", daemon=True)
        self._out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    def start(self) -> Forger:
        """Start reading, and return once every shard is being read (from its latest record)."""
        self._thread.start()
        if not self._reading.wait(30):
            raise AssertionError("the forger could not start reading the stream")
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()
        self._out.close()

    def _run(self) -> None:
        shards = self.kinesis.list_shards(StreamName=self.stream)["Shards"]
        iterators = {
            shard["ShardId"]: self.kinesis.get_shard_iterator(
                StreamName=self.stream, ShardId=shard["ShardId"], ShardIteratorType="LATEST"
            )["ShardIterator"]
            for shard in shards
        }
        self._reading.set()
        while not self._stopping.is_set():
            for shard, iterator in list(iterators.items()):
                got = self.kinesis.get_records(ShardIterator=iterator, Limit=1000)
                iterators[shard] = got["NextShardIterator"]
                for record in got["Records"]:
                    self._answer(record["Data"])
            time.sleep(0.005)

    def _answer(self, raw: bytes) -> None:
        self.seen += 1
        record = orjson.loads(raw)
        to = record.get("t")
        if not isinstance(to, str) or not to or "o" in record:
            return
        self.named += 1
        address, _, token = to.partition("/")
        host, _, port = address.rpartition(":")
        reply = Reply(record["k"], record["c"], FORGED, FORGED + record["n"] - 1, day=date.today())
        for datagram in self.datagrams(address, encode(reply), raw, record["k"], token):
            self._out.sendto(datagram, (host, int(port)))
            self.sent += 1

    def datagrams(self, to: str, payload: bytes, raw: bytes, key: str, token: str) -> list[bytes]:
        """The payload, signed every way a reader of the stream can (and with any leaked key)."""
        out = [payload, bytes(KEY_ID + DIGEST) + payload]
        guesses = [key.encode(), raw, to.encode(), b"numerator"]
        if token:  # a record from before the push key named its inbox's token
            secret = bytes.fromhex(token)
            out.append(hmac.new(secret, payload, hashlib.sha256).digest() + payload)
            guesses.append(secret)
        out += [PushKeys([guess]).sign(to, payload) for guess in guesses]
        out += [PushKeys([leak]).sign(to, payload) for leak in self.leaked]
        return out
