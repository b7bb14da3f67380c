"""template.yaml's HTTP API, offline: for each Authorizer the one `$default` route's integration
and authorization as API Gateway will import them from the SAM transform's OpenAPI body, and the
route as `sam local start-api` reads it (SAM CLI's own template reader: a raw AWS::ApiGatewayV2
route it ignores, which is why the API is SAM's HttpApi)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.cfn import TEMPLATE, transformed, variant

INTEGRATION = (
    "arn:${AWS::Partition}:apigateway:${AWS::Region}:lambda:path/2015-03-31/functions/"
    "${EdgeFunction.Arn}/invocations"
)
JWT = {"Authorizer": "JWT", "JwtIssuer": "https://issuer.example", "JwtAudience": "numbers"}


def route(given: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The `$default` route and the security schemes of the deployed API for `given`."""
    body = variant(transformed(), given)["Resources"]["Api"]["Properties"]["Body"]
    assert list(body["paths"]) == ["$default"]
    any_method = body["paths"]["$default"]["x-amazon-apigateway-any-method"]
    return any_method, body["components"]["securitySchemes"]


@pytest.mark.parametrize("given", [{}, JWT, {"Authorizer": "NONE"}], ids=["IAM", "JWT", "NONE"])
def test_the_one_route_proxies_every_request_to_the_edge_function(given: dict[str, str]) -> None:
    any_method, _ = route(given)
    assert any_method["isDefaultRoute"] is True
    integration = any_method["x-amazon-apigateway-integration"]
    assert integration["type"] == "aws_proxy"
    assert integration["uri"] == {"Fn::Sub": INTEGRATION}
    assert integration["payloadFormatVersion"] == "2.0"  # what functions.handler reads
    assert integration["timeoutInMillis"] == 30000  # API Gateway's most, above EdgeTimeout


def test_iam_callers_sign_with_sigv4() -> None:
    any_method, schemes = route({})
    assert any_method["security"] == [{"sigv4": []}]
    assert schemes["sigv4"]["x-amazon-apigateway-authtype"] == "awsSigv4"
    assert "jwt" not in schemes


def test_jwt_callers_bring_a_token_of_the_issuer_and_audience_given() -> None:
    any_method, schemes = route(JWT)
    assert any_method["security"] == [{"jwt": []}]
    authorizer = schemes["jwt"]["x-amazon-apigateway-authorizer"]
    assert authorizer["type"] == "jwt"
    assert authorizer["identitySource"] == "$request.header.Authorization"
    assert authorizer["jwtConfiguration"] == {
        "issuer": {"Ref": "JwtIssuer"},
        "audience": {"Ref": "JwtAudience"},
    }


def test_with_no_authorizer_api_gateway_lets_every_call_through_to_the_keys_at_the_edge() -> None:
    any_method, schemes = route({"Authorizer": "NONE"})
    assert any_method["security"] == []
    assert "jwt" not in schemes
    edge = variant(transformed(), {"Authorizer": "NONE"})["Resources"]["EdgeFunction"]
    assert edge["Properties"]["Environment"]["Variables"]["AUTH"] == "keys"


# SAM CLI reads templates with deprecated calls of samtranslator and jsonschema
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_sam_local_start_api_finds_the_route_to_the_edge_function(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from samcli.lib.providers.api_provider import ApiProvider
    from samcli.lib.providers.sam_stack_provider import SamLocalStackProvider

    overrides = {"Architecture": "x86_64", "Authorizer": "NONE"}
    with caplog.at_level(logging.ERROR):  # it warns that it skips the sigv4 and jwt schemes
        stacks, _ = SamLocalStackProvider.get_stacks(str(TEMPLATE), parameter_overrides=overrides)
        routes = ApiProvider(stacks).api.routes
    assert [(r.path, r.function_name, r.payload_format_version) for r in routes] == [
        ("$default", "EdgeFunction", "2.0")
    ]
    assert {"GET", "POST", "DELETE"} <= set(routes[0].methods)
