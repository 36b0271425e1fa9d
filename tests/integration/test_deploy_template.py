"""``imposition deploy`` sends a template CloudFormation accepts (:mod:`imposition.cli.stack`): the
rendered template, compact, inline; one past CloudFormation's inline quota by ``TemplateURL`` from
``IMPOSITION_DEPLOY_TEMPLATE_BUCKET``. Against a moto server of its own that refuses past the quotas
as AWS does (:mod:`devstack.conformance`), through the real command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import boto3
import pytest

from devstack.localaws import MotoProcess
from imposition.cli.stack import template_source
from imposition.common.aws_quotas import CLOUDFORMATION_TEMPLATE_BODY
from imposition.common.settings import Settings

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def endpoint():
    server = MotoProcess(single_threaded=False)
    yield server.url
    server.stop()


def _env(url: str, **settings: str) -> dict[str, str]:
    return {**os.environ, "AWS_ENDPOINT_URL": url, "AWS_ENDPOINT_URL_DYNAMODB": url, "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
            **{f"IMPOSITION_{name.upper()}": value for name, value in settings.items()}}


def _run(url: str, *args: str, **settings: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "imposition"), *args], env=_env(url, **settings), capture_output=True,
                          text=True, timeout=120)


def _client(url: str, service: str):
    return boto3.client(service, endpoint_url=url, region_name="us-east-1", aws_access_key_id="testing",
                        aws_secret_access_key="testing")


def _names() -> dict[str, str]:
    """Settings that give a deploy names of its own on the shared endpoint."""
    tag = uuid.uuid4().hex[:6]
    return {"stack_name": f"deploy-{tag}", "bucket": f"plates-{tag}", "imposition_queue": f"imposition-{tag}",
            "maintenance_queue": f"maintenance-{tag}", "notifications_queue": f"notifications-{tag}",
            "tenants_table": f"tenants-{tag}", "leases_table": f"leases-{tag}", "jobs_table": f"jobs-{tag}",
            "cluster_table": f"cluster-{tag}", "tokens_table": f"tokens-{tag}",
            "webhook_secret_kms_key_id": f"alias/hooks-{tag}"}


def test_the_rendered_template_is_deployed_inline_as_compact_json(endpoint, tmp_path):
    names = _names()
    rendered = _run(endpoint, "render-template", **names)
    assert rendered.returncode == 0, rendered.stderr
    source = template_source(rendered.stdout, names["stack_name"], Settings())
    assert list(source) == ["TemplateBody"]
    assert len(source["TemplateBody"].encode()) <= CLOUDFORMATION_TEMPLATE_BODY.value
    assert json.loads(source["TemplateBody"]) == json.loads(rendered.stdout)  # the same template, compact

    (tmp_path / "stack.json").write_text(rendered.stdout)
    topic = "arn:aws:sns:us-east-1:123456789012:prepress-pages"
    deployed = _run(endpoint, "deploy", "--template-file", str(tmp_path / "stack.json"), **names, alarm_topic_arn=topic)
    assert deployed.returncode == 0, deployed.stderr
    assert deployed.stdout == f"stack {names['stack_name']} created\n"
    cfn = _client(endpoint, "cloudformation")
    sent = cfn.get_template(StackName=names["stack_name"])["TemplateBody"]
    assert (json.loads(sent) if isinstance(sent, str) else sent) == json.loads(rendered.stdout)
    # the alarms' topic, passed as the template's parameter
    stack = cfn.describe_stacks(StackName=names["stack_name"])["Stacks"][0]
    assert {p["ParameterKey"]: p["ParameterValue"] for p in stack["Parameters"]} == {"AlarmTopicArn": topic}


def _padded_template(text: str, compact_bytes: int) -> str:
    """``text`` (a template) with a ``Metadata`` entry making its compact JSON about ``compact_bytes`` long."""
    template = json.loads(text)
    template["Metadata"] = {"Padding": "x" * (compact_bytes - len(json.dumps(template, separators=(",", ":"))))}
    return json.dumps(template, indent=2)


def test_a_template_past_the_inline_quota_is_passed_by_template_url(endpoint, tmp_path):
    names = _names()
    text = _padded_template(_run(endpoint, "render-template", **names).stdout, 60_000)
    (tmp_path / "stack.json").write_text(text)
    # no bucket to pass it by: refused before anything is made, naming the setting
    refused = _run(endpoint, "deploy", "--template-file", str(tmp_path / "stack.json"), **names)
    assert refused.returncode == 1 and "IMPOSITION_DEPLOY_TEMPLATE_BUCKET" in refused.stderr, refused.stderr
    cfn = _client(endpoint, "cloudformation")
    assert names["stack_name"] not in {s["StackName"] for s in cfn.describe_stacks()["Stacks"]}

    bucket = f"templates-{uuid.uuid4().hex[:6]}"
    _client(endpoint, "s3").create_bucket(Bucket=bucket)
    deployed = _run(endpoint, "deploy", "--template-file", str(tmp_path / "stack.json"), **names,
                    deploy_template_bucket=bucket)
    assert deployed.returncode == 0, deployed.stderr
    assert deployed.stdout == f"stack {names['stack_name']} created\n"
    uploaded = _client(endpoint, "s3").list_objects_v2(Bucket=bucket, Prefix=names["stack_name"] + "/")["Contents"]
    assert len(uploaded) == 1 and uploaded[0]["Size"] > CLOUDFORMATION_TEMPLATE_BODY.value
    assert uploaded[0]["Size"] == len(json.dumps(json.loads(text), separators=(",", ":")).encode())
