"""The Lambda edge inside a Lambda container, through SAM CLI: `sam build`, then `sam local
invoke` on every file in events/ and `sam local start-api` (SAM's own API Gateway) in front of it,
the function pointed at `numerator up --aws moto`'s stream, table and secret and a Postgres over
TCP. Needs a Docker daemon (tests/samlocal.py) and builds the stand-in image when absent."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
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
from numerator.samlocal import sam_build
from numerator.samstack import Stack, local_stack
from tests.cfn import ROOT, TEMPLATE
from tests.checks import Answer, assert_guarantees
from tests.samlocal import docker_daemon, start_api

pytestmark = pytest.mark.slow

EVENTS = ROOT / "events"
SAM_LOCAL = "## `sam local start-api` and `sam local invoke` (Docker)"
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
    return sam_build(TEMPLATE, tmp_path_factory.mktemp("sam") / "build")


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


def sam_local_blocks() -> list[str]:
    """The `sh` blocks of docs/deploy.md's sam local section, as written."""
    section = (ROOT / "docs" / "deploy.md").read_text().split(SAM_LOCAL, 1)[1]
    section = section.split("\n## ", 1)[0]
    return re.findall(r"^```sh\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL)


def said_url(process: subprocess.Popen[str], log: Any, patience: float) -> str:
    """The URL `numerator sam-local start-api` prints once it answers."""
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        log.seek(0)
        found = re.search(r"start-api at (http://\S+) ", log.read())
        if found:
            return found.group(1)
        assert process.poll() is None, log.read()[-5000:]
        time.sleep(1)
    raise AssertionError(f"no URL within {patience} s: {log.read()[-5000:]}")


def answers(output: str) -> list[dict[str, Any]]:
    """The answers `numerator sam-local invoke` printed, each body read: as it came (JSON and
    problems are text, not base64)."""
    found = []
    for line in output.splitlines():
        if line.startswith('{"statusCode"'):
            answer = json.loads(line)
            assert answer["isBase64Encoded"] is False, answer
            answer["body"] = json.loads(answer["body"])
            found.append(answer)
    return found


def invoke_rest(done: set[str], env: dict[str, str]) -> list[list[dict[str, Any]]]:
    """`numerator sam-local invoke` of the events/ files not in `done`, three commands at a time
    (each is a container of its own; most of its time is SAM's and Docker's), those that create
    a counter first, the one with an Idempotency-Key twice in one command (in turn)."""
    rest = sorted(
        (p.name for p in EVENTS.glob("*.json") if p.name not in done),
        key=lambda n: "create" not in n,
    )
    groups = [[name, name] if name == "http-api-next-count.json" else [name] for name in rest]

    def run(names: list[str]) -> list[dict[str, Any]]:
        command = [*NUMERATOR, "sam-local", "invoke", *(f"events/{n}" for n in names)]
        done = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stdout + done.stderr[-3000:]
        assert "invoking on the stack of the sam-local start-api that runs" in done.stderr
        print(done.stderr.strip())
        return answers(done.stdout)

    with ThreadPoolExecutor(3) as pool:
        return [answered for answered in pool.map(run, groups)]


def containers_on(build: Path) -> list[str]:
    """The containers (running or not) that mount a function from `build`."""
    ids = subprocess.run(["docker", "ps", "-aq"], capture_output=True, text=True, check=True)
    if not ids.stdout.split():
        return []
    mounts = "{{.Id}} {{range .Mounts}}{{.Source}} {{end}}"
    shown = subprocess.run(
        ["docker", "inspect", "--format", mounts, *ids.stdout.split()],
        capture_output=True,
        text=True,
        check=False,  # a container removed meanwhile
    )
    return [line for line in shown.stdout.splitlines() if str(build) in line]


def test_docs_deploy_sam_local_blocks_run_as_written(tmp_path: Path) -> None:
    """docs/deploy.md's sam local blocks, run as written: the first serves (`numerator sam-local
    start-api`) until SIGTERM, the second uses it from the same folder; then /next, ?count=3
    with an Idempotency-Key twice, and `sam local invoke` of every file in events/ joining the
    same stack. Every value is handed out once; every body reads as JSON as it came."""
    docker_daemon()
    serve, use = sam_local_blocks()
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "NUMERATOR_URL")},
        "XDG_DATA_HOME": str(tmp_path / "data"),  # the embedded Postgres: a fresh one
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",  # the venv's
    }
    began = time.monotonic()
    with (tmp_path / "serve.log").open("w+") as log:
        server = subprocess.Popen(
            ["bash", "-c", serve],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            url = said_url(server, log, 600)
            print(f"sam-local start-api answered after {time.monotonic() - began:.0f} s")
            used = subprocess.run(
                ["bash", "-e", "-c", use],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert used.returncode == 0, used.stdout + used.stderr[-3000:]
            mine = [int(v) for v in re.findall(r"^INV-\d{4}-(\d{6})$", used.stdout, re.M)]
            with httpx.Client(base_url=url, timeout=60) as client:
                one = client.post("/counters/inv/next")
                key = {"Idempotency-Key": "docs-deploy"}
                three = client.post("/counters/inv/next?count=3", headers=key)
                again = client.post("/counters/inv/next?count=3", headers=key)
                missing = client.post("/counters/events-missing/next")
            assert one.status_code == 200 and three.status_code == 200, (one.text, three.text)
            assert again.json() == three.json()
            mine += [one.json()["value"], *(v["value"] for v in three.json()["values"])]
            assert mine == [1, 2, 3, 4, 5], (used.stdout, mine)
            assert (
                missing.status_code == 404
                and missing.headers["content-type"] == "application/problem+json"
            )
            assert missing.json()["detail"] == "no counter named 'events-missing'"
            first = answers(used.stdout)
            rest = invoke_rest({"http-api-create.json", "http-api-next.json"}, env)
        finally:
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGTERM)
            server.wait(90)
        log.seek(0)
        said = log.read()
        assert server.returncode == 0 and "numerator sam-local: stopped" in said, said[-3000:]
    assert not (ROOT / ".aws-sam" / "numerator" / "env.json").exists()
    assert not containers_on(ROOT / ".aws-sam" / "numerator" / "build"), "left running"
    print(f"the blocks and every event in {time.monotonic() - began:.0f} s")
    demo = [a for group in [first, *rest] for a in group]
    assert sorted(a["statusCode"] for a in demo) == [200] * 7 + [201] * 2 + [422]
    replayed = [g for g in rest if len(g) == 2]
    assert len(replayed) == 1 and replayed[0][0] == replayed[0][1]  # the same Idempotency-Key
    taken = [a["body"] for a in first + [a for g in rest for a in g[:1]] if "counter" in a["body"]]
    values = [v["value"] for b in taken for v in b.get("values", [b])]
    assert sorted(values) == list(range(1, len(values) + 1)) == list(range(1, 9)), values
    (bad,) = [a for a in demo if a["statusCode"] == 422]
    assert bad["headers"]["content-type"] == "application/problem+json"
    assert bad["body"]["field"] == "count", bad


@pytest.fixture
def api(built: Path, tcp_database: str, tmp_path: Path) -> Iterator[tuple[str, Stack]]:
    """`sam local start-api` with Authorizer=NONE (numerator's keys at the edge), one warm
    container, in front of `numerator up --aws moto`."""
    with (
        local_stack(tcp_database, tmp_path / "env.json") as stack,
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
        local_stack(tcp_database, tmp_path / "env.json") as stack,
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
        up = psutil.Process(stack.up.pid)
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
        # (the handler's wait ends LAMBDA_MARGIN_S, 1 s, before it: 7 s after the invocation began)
        assert took > 6.5, f"answered after {took:.2f} s, long before the 8 s deadline"
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
