"""template.yaml as CloudFormation would make it for given parameters: the conditions evaluated,
each Fn::If replaced by the branch taken, the resources whose condition is false left out — so a
test can hold each variant (Edge=lambda, Edge=fargate) to what it must and must not contain, and
find a reference to a resource the variant does not make. Also the template itself, parsed
(`template`) and through the SAM transform (`transformed`), for every test that reads it."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from samtranslator.yaml_helper import yaml_parse

ROOT = Path(__file__).parents[1]
TEMPLATE = ROOT / "template.yaml"
NO_VALUE = {"Ref": "AWS::NoValue"}
FARGATE = {
    "Edge": "fargate",
    "Authorizer": "NONE",
    "CertificateArn": "arn:aws:acm:us-east-1:123456789012:certificate/numerator",
}


def template() -> dict[str, Any]:
    parsed: dict[str, Any] = yaml_parse(TEMPLATE.read_text())
    return parsed


def transformed() -> dict[str, Any]:
    from samtranslator.translator.transform import transform

    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # for the ARNs SAM writes

    class NoManagedPolicies:  # the template names no managed policy for SAM to look up
        def load(self) -> dict[str, str]:
            return {}

    packaged = template()  # as `sam package` leaves it: the code uploaded to S3
    packaged["Resources"]["EdgeFunction"]["Properties"]["CodeUri"] = "s3://numerator/edge.zip"
    out: dict[str, Any] = transform(packaged, {}, NoManagedPolicies())  # type: ignore[arg-type]
    return out


def conditions(template: dict[str, Any], given: dict[str, str]) -> dict[str, bool]:
    parameters = {
        name: given.get(name, spec.get("Default", ""))
        for name, spec in template.get("Parameters", {}).items()
    }
    truth: dict[str, bool] = {}

    def value(node: Any) -> Any:
        if isinstance(node, dict) and "Ref" in node:
            return parameters[node["Ref"]]
        if isinstance(node, dict) and "Fn::Join" in node:
            separator, parts = node["Fn::Join"]
            parts = value(parts)
            return separator.join(parts.split(",") if isinstance(parts, str) else parts)
        return node

    def holds(node: Any) -> bool:
        (kind, args), *_ = node.items()
        rules = {
            "Fn::Equals": lambda: str(value(args[0])) == str(value(args[1])),
            "Fn::Not": lambda: not holds(args[0]),
            "Fn::And": lambda: all(holds(a) for a in args),
            "Fn::Or": lambda: any(holds(a) for a in args),
            "Condition": lambda: named(args),
        }
        return bool(rules[kind]())

    def named(name: str) -> bool:
        if name not in truth:
            truth[name] = holds(template["Conditions"][name])
        return truth[name]

    for name in template.get("Conditions", {}):
        named(name)
    return truth


def resolve(node: Any, truth: dict[str, bool]) -> Any:
    """`node` with every Fn::If decided and AWS::NoValue dropped."""
    if isinstance(node, dict):
        if set(node) == {"Fn::If"}:
            name, yes, no = node["Fn::If"]
            return resolve(yes if truth[name] else no, truth)
        out = {k: resolve(v, truth) for k, v in node.items()}
        return {k: v for k, v in out.items() if v != NO_VALUE}
    if isinstance(node, list):
        # an item may be an Fn::If whose branch taken is AWS::NoValue: decided, then dropped
        return [out for out in (resolve(item, truth) for item in node) if out != NO_VALUE]
    return node


def variant(template: dict[str, Any], given: dict[str, str]) -> dict[str, Any]:
    """The template's resources and outputs for these parameters."""
    truth = conditions(template, given)

    def kept(section: str) -> dict[str, Any]:
        items = template.get(section, {}).items()
        return {
            name: resolve(item, truth)
            for name, item in items
            if "Condition" not in item or truth[item["Condition"]]
        }

    return {"Resources": kept("Resources"), "Outputs": kept("Outputs"), "truth": truth}


def referenced(node: Any) -> set[str]:
    """The logical ids `node` names with Ref, Fn::GetAtt, Fn::Sub or DependsOn."""
    out: set[str] = set()
    if isinstance(node, dict):
        for kind, args in node.items():
            if kind == "Ref" and isinstance(args, str):
                out.add(args)
            elif kind == "Fn::GetAtt":
                out.add(args[0] if isinstance(args, list) else args.split(".")[0])
            elif kind == "Fn::Sub":
                text, names = (args, {}) if isinstance(args, str) else args
                found = {m.split(".")[0] for m in re.findall(r"\$\{([\w.:]+)\}", text)}
                out |= found - set(names)
                out |= referenced(names)
            elif kind == "DependsOn":
                out |= {args} if isinstance(args, str) else set(args)
            else:
                out |= referenced(args)
    elif isinstance(node, list):
        for item in node:
            out |= referenced(item)
    return out


def dangling(template: dict[str, Any], made: dict[str, Any]) -> set[str]:
    """What the variant `made` refers to that neither it nor the parameters define."""
    known = set(made["Resources"]) | set(template.get("Parameters", {}))
    names = referenced(made["Resources"]) | referenced(made["Outputs"])
    return {name for name in names if not name.startswith("AWS::")} - known
