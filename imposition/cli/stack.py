"""``imposition render-template`` and ``imposition deploy``: the service's CloudFormation stack.

``render-template`` prints the template of :mod:`imposition.cli.template` for this process's
settings (``IMPOSITION_*``), indented for review; ``deploy`` creates the stack
``Settings.stack_name`` from it, or updates it, and waits until CloudFormation has finished. Both
follow the AWS SDK's environment (``AWS_ENDPOINT_URL_CLOUDFORMATION`` / ``AWS_ENDPOINT_URL``,
credentials, region).

``deploy`` sends the template as compact JSON (:func:`template_source`): inline (``TemplateBody``)
while that fits CloudFormation's 51,200 bytes, else uploaded to ``Settings.deploy_template_bucket``
and passed by ``TemplateURL`` (up to 1 MB); the quotas are :mod:`imposition.common.aws_quotas`'s.
It passes ``Settings.alarm_topic_arn`` as the template's ``AlarmTopicArn`` parameter.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import click
from botocore.exceptions import ClientError, WaiterError

from imposition.cli.template import ALARM_TOPIC_PARAMETER, render_json
from imposition.common import aws
from imposition.common.aws_quotas import CLOUDFORMATION_TEMPLATE_BODY, CLOUDFORMATION_TEMPLATE_URL
from imposition.common.settings import Settings, get_settings

#: The template names its IAM roles (RoleName), so CloudFormation asks for this acknowledgement.
CAPABILITIES = ["CAPABILITY_NAMED_IAM"]


class DeployFailed(click.ClickException):
    """CloudFormation refused or rolled back the stack: the message names the stack, its status and
    the first failed resource's reason. Exit status 1."""


def _stack_status(cfn: Any, stack_name: str) -> str | None:
    try:
        return cfn.describe_stacks(StackName=stack_name)["Stacks"][0]["StackStatus"]
    except ClientError as exc:
        if "does not exist" in str(exc):
            return None
        raise


def _failure(cfn: Any, stack_name: str) -> str:
    """The first failed event's resource and reason, oldest first."""
    events = cfn.describe_stack_events(StackName=stack_name)["StackEvents"]
    for event in reversed(events):
        if event.get("ResourceStatus", "").endswith("_FAILED"):
            return f"{event['LogicalResourceId']}: {event.get('ResourceStatusReason', '?')}"
    return "no failed resource reported"


def compact(template_text: str) -> str:
    """``template_text`` as compact JSON (no indentation, no spaces after separators); a template
    that is not JSON (YAML) is returned as it is."""
    try:
        return json.dumps(json.loads(template_text), separators=(",", ":"), ensure_ascii=False)
    except ValueError:
        return template_text


def template_url(bucket: str, key: str, region: str) -> str:
    """The ``https://`` URL CloudFormation reads an S3 object by (virtual-hosted style)."""
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"https://{bucket}.s3.{region}.{suffix}/{key}"


def template_source(template_text: str, stack_name: str, settings: Settings) -> dict[str, str]:
    """The template argument of CreateStack and UpdateStack: ``{"TemplateBody": ...}``, the
    compact JSON, while it fits CloudFormation's inline quota; else the compact JSON uploaded to
    ``Settings.deploy_template_bucket`` (key ``<stack>/template-<sha256>.json``) and
    ``{"TemplateURL": ...}``.

    Raises:
        DeployFailed: over the inline quota with no bucket set, or over the quota of a template in S3.
    """
    body = compact(template_text)
    size = len(body.encode("utf-8"))
    if size <= CLOUDFORMATION_TEMPLATE_BODY.value:
        return {"TemplateBody": body}
    if size > CLOUDFORMATION_TEMPLATE_URL.value:
        raise DeployFailed(f"stack {stack_name}: the template is {size} bytes, past CloudFormation's "
                           f"{CLOUDFORMATION_TEMPLATE_URL.value} even by TemplateURL ({CLOUDFORMATION_TEMPLATE_URL.source})")
    bucket = settings.deploy_template_bucket
    if not bucket:
        raise DeployFailed(f"stack {stack_name}: the template is {size} bytes compact, past CloudFormation's inline "
                           f"{CLOUDFORMATION_TEMPLATE_BODY.value}; set IMPOSITION_DEPLOY_TEMPLATE_BUCKET to a bucket "
                           "to pass it through by TemplateURL")
    key = f"{stack_name}/template-{hashlib.sha256(body.encode('utf-8')).hexdigest()}.json"
    try:
        aws.s3().put_object(Bucket=bucket, Key=key, Body=body.encode("utf-8"), ContentType="application/json")
    except ClientError as exc:
        raise DeployFailed(f"stack {stack_name}: could not upload the template to s3://{bucket}/{key}: {exc}") from exc
    return {"TemplateURL": template_url(bucket, key, settings.aws_region)}


def _parameters(template_text: str, settings: Settings) -> list[dict[str, str]]:
    """The stack's parameters: ``AlarmTopicArn`` from the settings, when the template declares it."""
    try:
        declared = json.loads(template_text).get("Parameters", {})
    except ValueError:
        declared = {}
    if ALARM_TOPIC_PARAMETER not in declared:
        return []
    return [{"ParameterKey": ALARM_TOPIC_PARAMETER, "ParameterValue": settings.alarm_topic_arn}]


def deploy(template_text: str, stack_name: str, *, settings: Settings | None = None, wait_delay_s: int = 5) -> str:
    """Create stack ``stack_name`` from ``template_text`` or update it, the template passed as
    :func:`template_source` says; wait until it is complete. Returns ``"created"``, ``"updated"``
    or ``"unchanged"``.

    Raises:
        DeployFailed: the template is past CloudFormation's quotas, CloudFormation refused it, or
            the stack did not complete.
    """
    settings = settings or get_settings()
    cfn = aws.client("cloudformation")
    status = _stack_status(cfn, stack_name)
    request: dict[str, Any] = {"StackName": stack_name, "Capabilities": CAPABILITIES,
                               "Parameters": _parameters(template_text, settings),
                               **template_source(template_text, stack_name, settings)}
    try:
        if status is None:
            cfn.create_stack(**request, EnableTerminationProtection=True)
            waiter, outcome = "stack_create_complete", "created"
        else:
            try:
                cfn.update_stack(**request)
            except ClientError as exc:
                if "No updates are to be performed" in str(exc):
                    return "unchanged"
                raise
            waiter, outcome = "stack_update_complete", "updated"
        cfn.get_waiter(waiter).wait(StackName=stack_name, WaiterConfig={"Delay": wait_delay_s, "MaxAttempts": 360})
    except WaiterError as exc:
        raise DeployFailed(f"stack {stack_name}: {_stack_status(cfn, stack_name)}; {_failure(cfn, stack_name)}") from exc
    except ClientError as exc:
        raise DeployFailed(f"stack {stack_name}: {exc}") from exc
    return outcome


@click.command("render-template")
def render_template_command() -> None:
    """Print the CloudFormation template (JSON) of queues, tables, bucket, webhook key and roles,
    rendered from this environment's settings."""
    click.echo(render_json(get_settings()), nl=False)


@click.command("deploy")
@click.option("--template-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A template rendered before (imposition render-template > FILE); default: render it now. "
                   "Sent compact; past 51,200 bytes by TemplateURL (IMPOSITION_DEPLOY_TEMPLATE_BUCKET).")
@click.option("--stack-name", default=None, help="Default: IMPOSITION_STACK_NAME (imposition).")
def deploy_command(template_file: str | None, stack_name: str | None) -> None:
    """Create or update the service's CloudFormation stack and wait for it (needs CloudFormation,
    IAM, SQS, DynamoDB, S3 and KMS create rights: a platform team's deploy role)."""
    settings = get_settings()
    if template_file is not None:
        with open(template_file, encoding="utf-8") as source:
            text = source.read()
    else:
        text = render_json(settings)
    name = stack_name or settings.stack_name
    click.echo(f"stack {name} {deploy(text, name, settings=settings)}")
