"""The private code of kombu and moto we override or patch has the shape we wrote against.

``tasks/sqs_transport.py`` overrides private methods of kombu's SQS channel, so kombu is pinned to
the minor version they come from (pyproject.toml: ``kombu>=5.7,<5.8``). A release inside that bound,
or a change of the bound, that changes one of their signatures fails here, naming the method, before
a worker misbehaves. The same holds for the moto internals ``devstack/localaws.py`` patches (moto
pinned ``>=5.2,<5.3``). The signatures are recorded as ``inspect.signature`` prints them; after
reading the new code, record the new ones.
"""

from __future__ import annotations

import importlib
import inspect
import tomllib
from functools import cached_property
from pathlib import Path

import pytest
from kombu.transport import SQS
from packaging.requirements import Requirement
from packaging.version import Version

from tasks.sqs_transport import Channel

REPO = Path(__file__).resolve().parents[2]

#: kombu 5.7's SQS.Channel methods that tasks.sqs_transport.Channel overrides → their signatures.
KOMBU_OVERRIDDEN = {
    "__init__": "(self, *args, **kwargs)",
    "_new_boto_client": "(self, service: '_SUPPORTED_BOTO_SERVICES', region, access_key_id, secret_access_key, "
                        "session_token=None, config=None)",
    "_schedule_queue": "(self, queue)",
    "predefined_queues": "(self)",
    "_get_from_sqs": "(self, queue_name, queue_url, connection, count=1, callback=None)",
    "basic_cancel": "(self, consumer_tag)",
    "_restore": "(self, message, unwanted_delivery_info=('sqs_message', 'sqs_queue'))",
    "_on_messages_ready": "(self, queue, qname, messages)",
    "_loop1": "(self, queue, messages_fetched=None)",
}

_DYNAMO = "moto.dynamodb.models.dynamo_type"
#: moto 5.2's methods that devstack/localaws.py replaces or calls from its replacements → signatures.
MOTO_PATCHED = {
    "moto.dynamodb.models:DynamoDBBackend.transact_write_items":
        "(self, transact_items: list[dict[str, typing.Any]]) -> None",
    "moto.dynamodb.models:DynamoDBBackend.get_keys_value":
        f"(self, table: moto.dynamodb.models.table.Table, keys: dict[str, typing.Any]) -> "
        f"tuple[{_DYNAMO}.DynamoType, {_DYNAMO}.DynamoType | None]",
    "moto.dynamodb.models.table:Table.query":
        f"(self, hash_key: {_DYNAMO}.DynamoType | None, range_comparison: str | None, range_objs: "
        f"list[{_DYNAMO}.DynamoType], limit: int, exclusive_start_key: dict[str, typing.Any], scan_index_forward: "
        f"bool, projection_expressions: list[list[str]] | None, index_name: str | None = None, consistent_read: "
        f"bool = False, filter_expression: Any = None, hash_key_conditions: list[tuple[str, {_DYNAMO}.DynamoType]] "
        f"| None = None, range_key_conditions: list[tuple[str, str, list[{_DYNAMO}.DynamoType]]] | None = None, "
        f"**filter_kwargs: Any) -> tuple[list[{_DYNAMO}.Item], int, dict[str, typing.Any] | None]",
    "moto.dynamodb.models.table:Table.get_item":
        f"(self, hash_key: {_DYNAMO}.DynamoType, range_key: {_DYNAMO}.DynamoType | None = None, "
        f"projection_expression: list[list[str]] | None = None) -> {_DYNAMO}.Item | None",
    "moto.dynamodb.models.table:Table.delete_item":
        f"(self, hash_key: {_DYNAMO}.DynamoType, range_key: {_DYNAMO}.DynamoType | None) -> {_DYNAMO}.Item | None",
    "moto.dynamodb.responses:DynamoHandler._authenticate_and_authorize_normal_action":
        "(self, resource: str = '*') -> None",
    "moto.iam.access_control:IAMPolicy.__init__": "(self, policy: 'Any')",
    "moto.iam.access_control:IAMRequest.__init__":
        "(self, account_id: 'str', method: 'str', path: 'str', data: 'dict[str, str]', body: 'bytes', "
        "headers: 'dict[str, str]', action: 'str')",
    "moto.sqs.responses:SQSResponse._determine_resource": "(self) -> str",
}


def _kombu_base(name: str):
    for base in SQS.Channel.__mro__:
        if name in vars(base):
            value = vars(base)[name]
            return value.func if isinstance(value, cached_property) else value
    return None


def _requirement(name: str) -> Requirement:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    texts = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    return next(Requirement(t) for t in texts if Requirement(t).name == name)


@pytest.mark.parametrize("name, minor", [("kombu", "5.7"), ("moto", "5.2")])
def test_the_patched_libraries_are_pinned_to_one_minor_version(name, minor):
    """Any version the bound admits is of the minor release the signatures were recorded from."""
    specifier = _requirement(name).specifier
    assert Version(f"{minor}.0") in specifier and Version(f"{minor}.99") in specifier, specifier
    major, minor_number = map(int, minor.split("."))
    assert Version(f"{major}.{minor_number + 1}.0") not in specifier, specifier
    assert importlib.import_module(name).__version__.startswith(f"{minor}."), "constraints.txt outside the bound"


def test_every_kombu_method_we_override_keeps_its_recorded_signature():
    overridden = {name for name in vars(Channel) if (not name.startswith("__") or name == "__init__")
                  and _kombu_base(name) is not None}
    assert overridden == set(KOMBU_OVERRIDDEN), "record the signature of each kombu method Channel overrides"
    changed = {name: str(inspect.signature(_kombu_base(name))) for name in KOMBU_OVERRIDDEN
               if str(inspect.signature(_kombu_base(name))) != KOMBU_OVERRIDDEN[name]}
    assert not changed, f"kombu changed what tasks/sqs_transport.py overrides; read it, then record: {changed}"


def test_every_moto_method_localaws_patches_keeps_its_recorded_signature():
    changed = {}
    for path, recorded in MOTO_PATCHED.items():
        module, attribute = path.split(":")
        owner, method = attribute.split(".")
        now = str(inspect.signature(getattr(getattr(importlib.import_module(module), owner), method)))
        if now != recorded:
            changed[path] = now
    assert not changed, f"moto changed what devstack/localaws.py patches; read it, then record: {changed}"
    # the hooks localaws.py sets without replacing a method: a response's _determine_resource (KMS),
    # read by BaseResponse.call_action, and the copy module DynamoDBBackend.transact_write_items uses
    from moto.core.responses import BaseResponse
    from moto.dynamodb import models

    assert "_determine_resource" in inspect.getsource(BaseResponse.call_action)
    assert models.copy is importlib.import_module("copy")
