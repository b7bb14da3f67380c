"""The Lambda edge inside a Lambda container, through SAM CLI: `sam build`, then `sam local
invoke` on every file in events/ and `sam local start-api` (SAM's own API Gateway) in front of it,
the function pointed at `numerator up --aws moto`'s stream, table and secret and a Postgres over
TCP. Needs a Docker daemon (tests/samlocal.py) and builds the stand-in image when absent."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from infra.adapters.postgres import migrate
from numerator import lambdaimage
from tests.checks import Answer, assert_guarantees
from tests.integration.test_handler import event
from tests.samlocal import (
    LOCAL,
    Stack,
    docker_daemon,
    moto_stack,
    sam,
    sam_build,
    start_api,
)

pytestmark = pytest.mark.slow

EVENTS = Path(__file__).parents[2] / "events"
NUMERATOR = [sys.executable, "-m", "numerator"]
TIMEOUT = ("EdgeTimeout=8", "ReplyTimeout=20")


@pytest.fixture(scope="module")
def image() -> str:
    docker_daemon()
    started = time.monotonic()
    tag = lambdaimage.build()
    print(f"stand-in image {tag} ready in {time.monotonic() - started:.1f} s")
    return tag


@pytest.fixture(scope="module")
def built(image: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sam_build(tmp_path_factory.mktemp("sam") / "build")


@pytest.fixture(scope="module")
def tcp_database(database_url: str) -> Iterator[str]:
    """A database of this module's own (it makes API keys)."""
    import psycopg

    name = f"sam_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = database_url.replace("/postgres?", f"/{name}?")
    asyncio.run(migrate(url))
    yield url
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def body(answer: dict[str, Any]) -> dict[str, Any]:
    text = answer["body"]
    if answer.get("isBase64Encoded"):
        text = base64.b64decode(text).decode()
    parsed: dict[str, Any] = json.loads(text)
    return parsed


def invoke(built: Path, stack: Stack, file: Path) -> tuple[dict[str, Any], str]:
    """`sam local invoke` of one event file: the function's answer and SAM's log."""
    done = sam(
        "local",
        "invoke",
        "EdgeFunction",
        "--template-file",
        str(built),
        "--event",
        str(file),
        "--env-vars",
        str(stack.env_vars),
        "--skip-pull-image",
        "--parameter-overrides",
        *LOCAL,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer, done.stderr


def test_sam_local_invoke_answers_every_event_file(
    built: Path, tcp_database: str, tmp_path: Path
) -> None:
    """Each file of events/ in a container of its own, answered as `numerator invoke` answers it
    (tests/integration/test_handler.py): the default Authorizer, IAM, so no keys at the edge."""
    name = f"sam-{uuid.uuid4().hex[:8]}"
    with moto_stack(tcp_database, tmp_path) as stack:

        def run(file: str, counter: str = name) -> dict[str, Any]:
            path = tmp_path / file
            path.write_text(json.dumps(event(file, counter)))
            began = time.monotonic()
            answer, log = invoke(built, stack, path)
            report = re.search(r"REPORT RequestId.*", log)
            assert report, log[-2000:]
            # each `sam local invoke` is a cold container: docs/performance.md
            print(f"{file}: sam local invoke {time.monotonic() - began:.1f} s; {report.group(0)}")
            assert "statusCode" in answer, (file, answer, log[-3000:])
            return answer

        files = {p.name for p in EVENTS.glob("*.json")}
        created = run("http-api-create.json")
        assert created["statusCode"] == 201, body(created)

        def replayed() -> tuple[dict[str, Any], dict[str, Any]]:
            first = run("http-api-next-count.json")
            return first, run("http-api-next-count.json")  # the same Idempotency-Key

        # Each invoke is a container of its own and most of its time is SAM's and Docker's, so
        # three at a time; the values are checked whatever order the batcher took them in.
        with ThreadPoolExecutor(3) as pool:
            three = pool.submit(replayed)
            later = {
                file: pool.submit(run, file)
                for file in (
                    "http-api-next.json",
                    "rest-api-next.json",
                    "rest-api-next-count.json",
                    "http-api-next-bad-count.json",
                    "http-api-create-base64.json",
                    "http-api-get.json",
                    "function-url-next.json",  # FunctionUrl=true's event, AWS_IAM
                )
            }
            answers = {file: future.result() for file, future in later.items()}
            first, again = three.result()
        assert body(again) == body(first)
        year = time.gmtime().tm_year
        one = body(answers["http-api-next.json"])
        assert one["formatted"] == f"INV-{year}-{one['value']:06d}" and one["counter"] == name
        taken = [[one["value"]], [body(answers["rest-api-next.json"])["value"]]]
        taken.append([body(answers["function-url-next.json"])["value"]])
        for many in (body(first), body(answers["rest-api-next-count.json"])):
            taken.append([v["value"] for v in many["values"]])
        assert [len(values) for values in taken] == [1, 1, 1, 3, 2]
        assert all(vs == list(range(vs[0], vs[0] + len(vs))) for vs in taken), taken
        assert sorted(v for values in taken for v in values) == list(range(1, 9)), taken
        bad = answers["http-api-next-bad-count.json"]
        assert bad["statusCode"] == 422 and body(bad)["field"] == "count"
        assert bad["headers"]["content-type"] == "application/problem+json"
        got = answers["http-api-get.json"]
        assert got["statusCode"] == 200 and 0 <= body(got)["value"] <= 8
        encoded = answers["http-api-create-base64.json"]
        assert encoded["statusCode"] == 201 and body(encoded)["name"] == f"{name}-b64"
        assert files == {
            "http-api-create.json",
            "http-api-next.json",
            "http-api-next-count.json",
            "http-api-next-bad-count.json",
            "http-api-get.json",
            "rest-api-next.json",
            "rest-api-next-count.json",
            "http-api-create-base64.json",
            "function-url-next.json",
        }, "a new file in events/: answer it here too"


@pytest.fixture
def api(built: Path, tcp_database: str, tmp_path: Path) -> Iterator[tuple[str, Stack]]:
    """`sam local start-api` with Authorizer=NONE (numerator's keys at the edge), one warm
    container, in front of `numerator up --aws moto`."""
    with (
        moto_stack(tcp_database, tmp_path) as stack,
        start_api(built, stack.env_vars, tmp_path / "sam.log", "Authorizer=NONE") as url,
    ):
        yield url, stack


def test_sam_local_start_api_serves_the_edge_in_its_container(
    api: tuple[str, Stack], tcp_database: str
) -> None:
    url, _ = api
    name = f"sam-{uuid.uuid4().hex[:8]}"
    made = subprocess.run(
        [
            *NUMERATOR,
            *("keys", "create", "sam", "--scope", "admin", "--json"),
            "--database-url",
            tcp_database,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    auth = {"Authorization": f"Bearer {json.loads(made)['secret']}"}
    # SAM's gateway sends sourceIp 127.0.0.1, a loopback client, which numerator serves without
    # a key only while no key exists (guarantee 8): with one, a call without it is refused.
    for _ in range(3):  # a 503 says when to come again (Retry-After), as a client would
        refused = httpx.post(url + "/counters", json={"name": name}, timeout=60)
        if refused.status_code != 503:
            break
        health = httpx.get(url + "/healthz", timeout=60)
        print(f"first call after the key: 503 {refused.text}; /healthz {health.text}")
        time.sleep(float(refused.headers.get("retry-after", "1")))
    assert refused.status_code == 401, refused.text
    with httpx.Client(base_url=url, headers=auth, timeout=60) as client:
        created = client.post("/counters", json={"name": name})
        assert created.status_code == 201, created.text
        bad = client.post(f"/counters/{name}/next", params={"count": "0"})
        assert bad.status_code == 422, bad.text  # the handler's problem, not SAM's 502
        assert bad.headers["content-type"] == "application/problem+json"
        three = client.post(f"/counters/{name}/next?count=3", headers={"Idempotency-Key": "k3"})
        again = client.post(f"/counters/{name}/next?count=3", headers={"Idempotency-Key": "k3"})
        assert three.status_code == 200 and again.json() == three.json(), (three, again.text)

        def one(_: int) -> Answer:
            sent = time.monotonic()
            answer = client.post(f"/counters/{name}/next")
            assert answer.status_code == 200, answer.text
            value = answer.json()["value"]
            return Answer(name, value, value, sent, time.monotonic())

        began = time.monotonic()
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(one, range(200)))
        took = time.monotonic() - began
    print(f"200 /next through sam local start-api in {took:.1f} s")
    assert [v["value"] for v in three.json()["values"]] == [1, 2, 3]
    assert_guarantees(answers, start=4)  # unique, no holes, in real-time order


ECHO = """import json

def handler(event, context):
    return {"statusCode": 200, "headers": {"content-type": "application/json"},
            "body": json.dumps(event)}
"""


def shape(node: Any, path: str = "") -> set[str]:
    """The paths of an event's keys (headers and query parameters as the containers they are);
    a key whose value is null or empty counts as absent (API Gateway leaves such a key out; SAM's
    sends `"body": ""`, `"cookies": []`, `"pathParameters": {}`)."""
    if not isinstance(node, dict):
        return set()
    out = set()
    for key, value in node.items():
        if value in (None, "", [], {}):
            continue
        here = f"{path}.{key}"
        out.add(here)
        if key not in {"headers", "queryStringParameters", "pathParameters", "stageVariables"}:
            out |= shape(value, here)
    return out


def test_the_events_files_have_the_shape_sams_gateway_sends(built: Path, tmp_path: Path) -> None:
    """The built template with the edge function's code swapped for one that answers with its
    event: what SAM's local API Gateway sends for `POST /counters/NAME/next?count=3` has the
    keys of events/http-api-next-count.json, no more and no fewer."""
    from samtranslator.yaml_helper import yaml_parse

    (tmp_path / "echo").mkdir()
    (tmp_path / "echo" / "echo.py").write_text(ECHO)
    derived = yaml_parse(built.read_text())
    function = derived["Resources"]["EdgeFunction"]["Properties"]
    function.update(CodeUri=str(tmp_path / "echo"), Handler="echo.handler", VpcConfig={})
    function.pop("VpcConfig")
    template = tmp_path / "echo.json"
    template.write_text(json.dumps(derived))
    with start_api(template, None, tmp_path / "sam.log") as url:
        sent = httpx.post(
            url + "/counters/events-demo/next?count=3",
            headers={"Idempotency-Key": "retry-1", "content-type": "application/json"},
            timeout=60,
        )
    assert sent.status_code == 200, sent.text
    theirs = shape(sent.json())
    ours = shape(json.loads((EVENTS / "http-api-next-count.json").read_text()))
    # SAM's gateway names the path a `$default` route matched as a path parameter; API Gateway
    # sends none for `$default`, and the handler (Mangum) reads rawPath.
    assert sent.json()["pathParameters"] == {"any_path": "counters/events-demo/next"}
    assert (sorted(ours - theirs), sorted(theirs - ours - {".pathParameters"})) == ([], [])
    assert sent.json()["queryStringParameters"] == {"count": "3"}
    assert sent.json()["requestContext"]["http"]["method"] == "POST"


def test_a_lowered_function_timeout_is_answered_before_it_and_every_value_explained(
    built: Path, tcp_database: str, tmp_path: Path
) -> None:
    """EdgeTimeout=8 (above ReplyTimeout's 5 s it would be moot: 20 here) and a frozen batcher:
    the handler answers 504 before Lambda's deadline (not SAM's 502 for a function that timed
    out), and once the batcher runs again the value it held is void `abandoned` or never
    allocated. (Not the template's least, 3 s: the emulator counts the function's init, about
    3 s of imports on a busy 2-core machine, against it and resets the container.)"""
    import psutil

    name = f"sam-{uuid.uuid4().hex[:8]}"
    with (
        moto_stack(tcp_database, tmp_path) as stack,
        start_api(built, stack.env_vars, tmp_path / "sam.log", *TIMEOUT) as url,
        httpx.Client(base_url=url, timeout=60) as client,
    ):
        for _ in range(5):  # the first request's cold start may take long here
            created = client.post("/counters", json={"name": name})
            if created.status_code in (201, 409):
                break
        assert created.status_code in (201, 409), created.text
        first = client.post(f"/counters/{name}/next")
        assert first.status_code == 200 and first.json()["value"] == 1, first.text
        up = psutil.Process(stack.service.process.pid)
        (batcher,) = [p for p in up.children(recursive=True) if "batcher" in p.cmdline()]
        batcher.suspend()
        try:
            began = time.monotonic()
            held = client.post(f"/counters/{name}/next")
            took = time.monotonic() - began
        finally:
            batcher.resume()
        assert held.status_code == 504, held.text
        assert held.headers["content-type"] == "application/problem+json"
        # Held until just before the deadline, then answered by the handler: SAM's gateway adds
        # its own second or so to what the client sees, and says when a function timed out.
        assert took > 7.0, f"answered after {took:.2f} s, long before the 8 s deadline"
        assert "timed out" not in (tmp_path / "sam.log").read_text()
        deadline = time.monotonic() + 60
        while True:
            after = client.post(f"/counters/{name}/next")
            report = client.get(f"/counters/{name}/report").json()
            if after.status_code == 200 or time.monotonic() > deadline:
                break
        assert after.status_code == 200, after.text
        print(f"held request answered 504 after {took:.2f} s; next value {after.json()['value']}")
        assert report["unexplained_gaps"] == 0, report
        if after.json()["value"] == 2:  # the cancel reached the batcher first: never allocated
            assert report["voided"] == {}, report
        else:
            assert after.json()["value"] == 3 and report["voided"] == {"abandoned": 1}, report
