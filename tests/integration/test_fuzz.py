"""Whatever a client sends, the answer is never a 500: random bodies, names, counts and keys."""

from __future__ import annotations

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
bodies = (
    st.dictionaries(
        st.sampled_from(["name", "start", "template", "reset", "timezone", "other"]),
        json_values | st.sampled_from(["INV-{yyyy}-{value:06d}", "daily", "Europe/Berlin", "a-1"]),
        max_size=6,
    )
    | json_values
)
FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@FUZZ
@given(body=bodies)
async def test_create_never_answers_500(client: httpx.AsyncClient, body: object) -> None:
    response = await client.post("/counters", json=body)
    # json=None sends no body, and so no Content-Type: 415, the body is not JSON
    allowed = (201, 409, 422) if body is not None else (415,)
    assert response.status_code in allowed, response.text


@FUZZ
@given(
    name=st.text(max_size=140),
    count=st.none() | st.text(max_size=8),
    key=st.none() | st.text(alphabet=st.characters(max_codepoint=255), max_size=220),
)
async def test_next_never_answers_500(
    client: httpx.AsyncClient, name: str, count: str | None, key: str | None
) -> None:
    params = {"count": count} if count is not None else {}
    headers = {"Idempotency-Key": key.encode("latin-1")} if key is not None else {}
    try:
        response = await client.post(f"/counters/{name}/next", params=params, headers=headers)
    except httpx.InvalidURL:
        return  # not a request a client could send
    assert response.status_code < 500, response.text
