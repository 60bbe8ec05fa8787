"""The Python client (clients/python) against the app's OpenAPI document: every route it calls
(its table, opsconsole_claims.routes.ROUTES, which its methods build their requests from) is a
path and method of the document, with the same path parameters; every query parameter it may send
is one of the route's; every body field it may send is accepted by one alternative of the route's
body schema, and that alternative requires no field the client never sends. A route renamed, a
field dropped or a new required field on the server fails here, not in a flow.

The document is the one ninja serves at /api/v1/openapi.json, built by the API object itself."""

import copy
import itertools
import re

import pytest
from opsconsole_claims.routes import ROUTES, Route

from opsconsole.api.endpoints import api


@pytest.fixture(scope="module")
def schema() -> dict:
    return api.get_openapi_schema()


def _resolve(node: dict, schema: dict) -> dict:
    while "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        node = schema["components"]["schemas"][name]
    return node


def body_alternatives(node: dict, schema: dict) -> list[tuple[set[str], set[str]]]:
    """Each object the body may be, as (its properties, its required fields): one per branch of an
    anyOf or oneOf, each allOf part merged in (the conditions of if/then/else add no field)."""
    node = _resolve(node, schema)
    own = (set(node.get("properties", {})), set(node.get("required", [])))
    branches = node.get("anyOf") or node.get("oneOf")
    choices = [body_alternatives(branch, schema) for branch in branches] if branches else [[own]]
    alternatives = [merged for choice in choices for merged in choice]
    for part in node.get("allOf", []):
        alternatives = [
            (a[0] | b[0], a[1] | b[1]) for a, b in itertools.product(alternatives, body_alternatives(part, schema))
        ]
    return [(props | own[0], required | own[1]) for props, required in alternatives]


def problems(route: Route, schema: dict) -> list[str]:
    """What in the document does not take the request this route of the client sends."""
    found = schema["paths"].get(route.template, {}).get(route.method.lower())
    if found is None:
        listed = sorted(f"{method.upper()} {path}" for path, item in schema["paths"].items() for method in item)
        return [f"{route.method} {route.template} is not in the document (it has: {', '.join(listed)})"]
    said = []
    parameters = found.get("parameters", [])
    in_path = {parameter["name"] for parameter in parameters if parameter["in"] == "path"}
    if in_path != set(re.findall(r"{(\w+)}", route.template)):
        said.append(f"path parameters {sorted(in_path)}, the client fills {route.template}")
    in_query = {parameter["name"] for parameter in parameters if parameter["in"] == "query"}
    if unknown := set(route.query) - in_query:
        said.append(f"no query parameter {sorted(unknown)} (it has {sorted(in_query)})")
    body = found.get("requestBody")
    if not route.body:
        if body and body.get("required"):
            said.append("a body is required, and the client sends none")
        return said
    if body is None:
        return [*said, f"no body, and the client sends {list(route.body)}"]
    alternatives = body_alternatives(body["content"]["application/json"]["schema"], schema)
    if not any(set(route.body) <= props and required <= set(route.body) for props, required in alternatives):
        shown = [f"fields {sorted(props)}, required {sorted(required)}" for props, required in alternatives]
        said.append(f"no body schema takes the fields {list(route.body)}: {'; '.join(shown)}")
    return said


@pytest.mark.parametrize("name", sorted(ROUTES))
def test_the_route_the_client_calls_is_in_the_openapi_document_and_takes_its_fields(name, schema):
    assert problems(ROUTES[name], schema) == [], f"the Python client's route {name!r}"


def test_every_route_of_the_api_a_flow_calls_is_one_the_client_calls(schema):
    """The client keeps up with the API: each route under /api/v1 but the signed webhooks' (a
    sender's, not a flow's) and the document's own is one of the client's."""
    called = {(route.method.lower(), route.template) for route in ROUTES.values()}
    published = {
        (method, path)
        for path, item in schema["paths"].items()
        for method in item
        if not path.startswith("/api/v1/hooks/")
    }
    assert published - called == set()


# The check itself, shown to fail for each change it is there to catch.


def test_a_route_renamed_a_field_dropped_or_a_field_required_fails_the_check(schema):
    renamed = copy.deepcopy(schema)
    renamed["paths"]["/api/v1/operations/{key}/agree"] = renamed["paths"].pop("/api/v1/operations/{key}/approve")
    assert "is not in the document" in problems(ROUTES["approve"], renamed)[0]

    dropped = copy.deepcopy(schema)
    body = dropped["paths"]["/api/v1/operations/{key}/resolve"]["post"]["requestBody"]
    del body["content"]["application/json"]["schema"]["properties"]["note"]
    assert "no body schema takes the fields ['external_id', 'note']" in problems(ROUTES["resolve"], dropped)[0]

    required = copy.deepcopy(schema)
    required["components"]["schemas"]["ClaimByKey"]["required"].append("nonce")
    required["components"]["schemas"]["ClaimByKey"]["properties"]["nonce"] = {"type": "string"}
    assert problems(ROUTES["claim_by_key"], required)
    assert problems(ROUTES["claim"], required) == []

    query = copy.deepcopy(schema)
    operations = query["paths"]["/api/v1/operations"]["get"]
    operations["parameters"] = [parameter for parameter in operations["parameters"] if parameter["name"] != "age"]
    assert problems(ROUTES["operations"], query) == [
        "no query parameter ['age'] (it has ['action', 'cursor', 'destination', 'limit', 'q', 'state'])"
    ]
