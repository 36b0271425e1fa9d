"""``imposition render-template`` and ``imposition deploy``: the service's CloudFormation stack.

``render-template`` prints the template of :mod:`imposition.cli.template` for this process's
settings (``IMPOSITION_*``); ``deploy`` creates the stack ``Settings.stack_name`` from it, or
updates it, and waits until CloudFormation has finished. Both follow the AWS SDK's environment
(``AWS_ENDPOINT_URL_CLOUDFORMATION`` / ``AWS_ENDPOINT_URL``, credentials, region).
"""

from __future__ import annotations

from typing import Any

import click
from botocore.exceptions import ClientError, WaiterError

from imposition.cli.template import render_json
from imposition.common import aws
from imposition.common.settings import get_settings

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


def deploy(template_body: str, stack_name: str, *, wait_delay_s: int = 5) -> str:
    """Create stack ``stack_name`` from ``template_body`` or update it; wait until it is complete.
    Returns ``"created"``, ``"updated"`` or ``"unchanged"``.

    Raises:
        DeployFailed: CloudFormation refused the template or the stack did not complete.
    """
    cfn = aws.client("cloudformation")
    status = _stack_status(cfn, stack_name)
    try:
        if status is None:
            cfn.create_stack(StackName=stack_name, TemplateBody=template_body, Capabilities=CAPABILITIES,
                             EnableTerminationProtection=True)
            waiter, outcome = "stack_create_complete", "created"
        else:
            try:
                cfn.update_stack(StackName=stack_name, TemplateBody=template_body, Capabilities=CAPABILITIES)
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
              help="A template rendered before (imposition render-template > FILE); default: render it now.")
@click.option("--stack-name", default=None, help="Default: IMPOSITION_STACK_NAME (imposition).")
def deploy_command(template_file: str | None, stack_name: str | None) -> None:
    """Create or update the service's CloudFormation stack and wait for it (needs CloudFormation,
    IAM, SQS, DynamoDB, S3 and KMS create rights: a platform team's deploy role)."""
    settings = get_settings()
    if template_file is not None:
        with open(template_file, encoding="utf-8") as source:
            body = source.read()
    else:
        body = render_json(settings)
    name = stack_name or settings.stack_name
    click.echo(f"stack {name} {deploy(body, name)}")
