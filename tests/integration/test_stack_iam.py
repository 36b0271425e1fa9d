"""The CloudFormation template deployed into moto's CloudFormation, and the service run on what it
created under IAM enforcement: every process kind under its own role's credentials does its work,
and an action outside its role is refused.

One moto server of its own (all services, ``devstack.localaws --iam``), so the rest of the suite
runs without enforcement. Every command block of docs/deploy.md runs as written
(:func:`doc_blocks`): the stack is deployed with its ``run: admin`` block; then each role is
assumed (sts:AssumeRole) and enforcement is switched on with moto's ``POST /moto-api/reset-auth 0``
(its ``INITIAL_NO_AUTH_ACTION_COUNT``); the processes start from its ``process:`` blocks and the
operator's and caller's commands run from its ``run:`` blocks, each under its role's credentials.
A platform-admin IAM user made before enforcement stands for the platform team's own access; the
test reads job items with it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError

from devstack.localaws import MotoProcess
from devstack.stack import BEAT_READY, WORKER_READY, ReceiverProcess, stop_all
from imposition.cli.template import roles
from imposition.common.clocks import Clocks
from imposition.common.secrets import FLOWER_LOGIN_CONTEXT
from imposition.common.settings import Settings
from leases.models import ALL_MODELS
from tests.admission.helpers import SAMPLE_PDF, free_port
from tests.support.processes import CeleryProcess, wait_for

pytestmark = pytest.mark.file_duration_s(60)

BIN = Path(sys.executable).parent
DEPLOY_DOC = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"
STACK = f"iam-{uuid.uuid4().hex[:6]}"
#: Settings of every process of this test (the stack is rendered with the same): short maintenance
#: periods, so the sweeper, the outbox drain and the queue sampler run within the test.
ENV = {
    "IMPOSITION_STACK_NAME": STACK,
    "IMPOSITION_SWEEP_INTERVAL_S": "2",
    "IMPOSITION_SAMPLE_INTERVAL_S": "2",
    "IMPOSITION_WEBHOOK_OUTBOX_DRAIN_INTERVAL_S": "2",
    "IMPOSITION_WEBHOOK_ALLOW_PRIVATE_ADDRESSES": "true",
    "IMPOSITION_SLOTS_PER_NODE": "2",
    # the stack's own settings: every role bounded, every taggable resource tagged
    "IMPOSITION_PERMISSIONS_BOUNDARY_ARN": "arn:aws:iam::123456789012:policy/workload-boundary",
    "IMPOSITION_RESOURCE_TAGS": '{"team": "prepress"}',
    "AWS_DEFAULT_REGION": "us-east-1",
    "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
}
SECRET = "s" * 40
#: The process kinds, one role each (imposition.cli.template.roles).
ROLE_NAMES = ("imposer", "maintenance", "notifier", "beat", "flower", "operator", "caller")


def doc_blocks(kind: str) -> list[tuple[str, list[str]]]:
    """The command blocks of docs/deploy.md marked ``<!-- kind: role -->``, in order: (role, lines)."""
    pattern = re.compile(r"<!-- (run|process): (\w+) -->\s*```sh\n(.*?)```", re.DOTALL)
    return [(role, [line for line in body.splitlines() if line.strip()])
            for found, role, body in pattern.findall(DEPLOY_DOC.read_text()) if found == kind]


def run_block(role: str, env: dict[str, str], cwd: Path, nth: int = 0) -> str:
    """Run the ``nth`` ``run: role`` block of docs/deploy.md with bash in ``cwd``; returns its stdout."""
    blocks = [lines for block_role, lines in doc_blocks("run") if block_role == role]
    for lines in blocks[nth:nth + 1]:
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(lines)], cwd=cwd, capture_output=True,
                                text=True, env={**os.environ, **env}, timeout=120)
        assert result.returncode == 0, f"docs/deploy.md, {role}: {lines}: {result.stderr}"
        return result.stdout
    raise AssertionError(f"docs/deploy.md has {len(blocks)} blocks marked run: {role}, not {nth + 1}")


def endpoint_env(url: str, credentials: dict[str, str]) -> dict[str, str]:
    """Environment of a process on the IAM endpoint ``url`` under ``credentials``."""
    env = {**ENV, "AWS_ENDPOINT_URL": url, "AWS_ENDPOINT_URL_DYNAMODB": url,
           "AWS_ACCESS_KEY_ID": credentials["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": credentials["SecretAccessKey"]}
    env["AWS_SESSION_TOKEN"] = credentials.get("SessionToken", "")
    return env


class Deployed:
    """The IAM endpoint, its stack, and credentials: ``admin`` and one per role."""

    def __init__(self, tmp: Path) -> None:
        self.server = MotoProcess(single_threaded=False, iam=True, log=open(tmp / "moto.log", "ab"))
        self.url = self.server.url
        self.admin = {"AccessKeyId": "testing", "SecretAccessKey": "testing"}
        self.deploy_output = run_block("admin", endpoint_env(self.url, self.admin), tmp)
        self.template_path = tmp / "stack.json"
        iam = self.client("iam", self.admin)
        iam.create_user(UserName="platform-admin")
        iam.put_user_policy(UserName="platform-admin", PolicyName="all", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="platform-admin")["AccessKey"]
        self.admin = {"AccessKeyId": key["AccessKeyId"], "SecretAccessKey": key["SecretAccessKey"]}
        outputs = {o["OutputKey"]: o["OutputValue"] for o in
                   self.client("cloudformation", self.admin).describe_stacks(StackName=STACK)["Stacks"][0]["Outputs"]}
        sts = self.client("sts", self.admin)
        self.roles = {name: sts.assume_role(RoleArn=outputs[f"{name.capitalize()}RoleArn"],
                                            RoleSessionName=name)["Credentials"] for name in ROLE_NAMES}
        self.outputs = outputs
        request = urllib.request.Request(f"{self.url}/moto-api/reset-auth", data=b"0", method="POST",
                                         headers={"Content-Type": "application/octet-stream"})  # not a form
        urllib.request.urlopen(request, timeout=10).read()  # enforcement on from the next request

    def client(self, service: str, credentials: dict[str, str]):
        return boto3.client(service, endpoint_url=self.url, region_name="us-east-1",
                            aws_access_key_id=credentials["AccessKeyId"],
                            aws_secret_access_key=credentials["SecretAccessKey"],
                            aws_session_token=credentials.get("SessionToken"))

    def env(self, role: str) -> dict[str, str]:
        return endpoint_env(self.url, self.roles[role])


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    stack = Deployed(tmp_path_factory.mktemp("iam"))
    yield stack
    stack.server.stop()


def settings() -> Settings:
    """This test's settings (as the processes read them from ENV)."""
    return Settings(**{key.removeprefix("IMPOSITION_").lower(): json.loads(value) if value.startswith("{") else value
                       for key, value in ENV.items() if key.startswith("IMPOSITION_")})


def test_the_deployed_stack_has_what_the_settings_say(deployed):
    s = settings()
    assert f"stack {STACK} created" in deployed.deploy_output
    sqs = deployed.client("sqs", deployed.admin)
    for queue in s.work_queues:
        attributes = sqs.get_queue_attributes(QueueUrl=sqs.get_queue_url(QueueName=queue)["QueueUrl"],
                                              AttributeNames=["All"])["Attributes"]
        assert int(attributes["VisibilityTimeout"]) == Clocks.from_settings(s).visibility_timeout_s
        redrive = json.loads(attributes["RedrivePolicy"])
        assert redrive["deadLetterTargetArn"].endswith(f":{s.dead_letter_queue(queue)}")
        assert int(redrive["maxReceiveCount"]) == s.max_receive_count
    dynamodb = deployed.client("dynamodb", deployed.admin)
    for model in ALL_MODELS:
        table = dynamodb.describe_table(TableName=model.Meta.table_name)["Table"]
        assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
        assert table["DeletionProtectionEnabled"] is True
        assert sorted(i["IndexName"] for i in table.get("GlobalSecondaryIndexes", [])) == sorted(
            index.Meta.index_name for index in vars(model).values() if hasattr(index, "Meta")
            and hasattr(index.Meta, "index_name"))
    with pytest.raises(ClientError, match="DeletionProtectionEnabled"):
        dynamodb.delete_table(TableName=s.jobs_table)
    encryption = deployed.client("s3", deployed.admin).get_bucket_encryption(Bucket=s.bucket)
    assert encryption["ServerSideEncryptionConfiguration"]["Rules"][0]["ApplyServerSideEncryptionByDefault"][
        "SSEAlgorithm"] == "AES256"
    iam = deployed.client("iam", deployed.admin)
    tags = [{"Key": "service", "Value": STACK}, {"Key": "team", "Value": "prepress"}]
    for role in roles(s):
        made = iam.get_role(RoleName=f"{STACK}-{role.name.lower()}")["Role"]
        assert made["Arn"].endswith(role.name.lower())
        assert made["PermissionsBoundary"]["PermissionsBoundaryArn"] == s.permissions_boundary_arn
        assert made["Tags"] == tags
        profile = iam.get_instance_profile(InstanceProfileName=made["RoleName"])["InstanceProfile"]
        assert [r["RoleName"] for r in profile["Roles"]] == [made["RoleName"]]  # EC2, the default platform
    kms = deployed.client("kms", deployed.admin)
    key_tags = kms.list_resource_tags(KeyId=deployed.outputs["WebhookSecretsKeyArn"])["Tags"]
    assert sorted((t["TagKey"], t["TagValue"]) for t in key_tags) == [("service", STACK), ("team", "prepress")]
    # deployed again (the platform admin's rights): the existing stack is updated, not made twice
    again = subprocess.run([str(BIN / "imposition"), "deploy", "--template-file", str(deployed.template_path)],
                           env={**os.environ, **endpoint_env(deployed.url, deployed.admin)}, capture_output=True,
                           text=True, timeout=120)
    assert again.returncode == 0 and re.fullmatch(rf"stack {STACK} (updated|unchanged)\n", again.stdout), again


def test_each_process_kind_does_its_work_under_its_own_role(deployed, tmp_path):
    s = settings()
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    # the tenant's side (reads the tenant's secret to verify): the platform admin's rights, not a role's
    receiver = ReceiverProcess(tmp_path / "receiver.log", env=endpoint_env(deployed.url, deployed.admin))
    port = free_port()
    variables = {"TENANT": tenant, "HOOK_URL": receiver.url(tenant), "HOOK_SECRET": SECRET,
                 "INPUT_PDF": str(SAMPLE_PDF), "IMPOSITION_FLOWER_PORT": str(port), "STATE_DIRECTORY": str(tmp_path)}
    processes: dict[str, CeleryProcess] = {}
    try:
        for nth in (0, 1):  # Flower's login; the tenant
            run_block("operator", {**deployed.env("operator"), **variables}, tmp_path, nth=nth)
        for role, lines in doc_blocks("process"):
            assert len(lines) == 1, f"docs/deploy.md, process {role}: one command a block"
            process = CeleryProcess(["bash", "-c", f"exec {lines[0]}"], tmp_path / f"{role}.log",
                                    env={**deployed.env(role), **variables})
            process.ready = {"beat": BEAT_READY, "flower": "Visit me at"}.get(role, WORKER_READY)
            processes[role] = process
        assert set(processes) == set(ROLE_NAMES) - {"operator", "caller"}
        for process in processes.values():
            process.await_ready()

        job_id = run_block("caller", {**deployed.env("caller"), **variables}, tmp_path).strip()
        (tmp_path / "job-id").write_text(job_id)
        jobs = deployed.client("dynamodb", deployed.admin)

        def job() -> dict:
            return jobs.get_item(TableName=s.jobs_table, Key={"job_id": {"S": job_id}}, ConsistentRead=True)["Item"]

        wait_for(lambda: job().get("webhook_status", {}).get("S") == "delivered", 90,
                 what="the job imposed and its webhook delivered")
        assert job()["status"]["S"] == "succeeded"
        assert receiver.tenant_counts(tenant)["confirmed"] == 1
        assert "imposer@" in job()["worker"]["S"]  # the doc's node name, under the imposer role
        shown = run_block("operator", {**deployed.env("operator"), **variables}, tmp_path, nth=2)
        assert job_id in shown and "succeeded" in shown
        # the caller reads its job and downloads its plate with its own role
        for args in (("job", "show", job_id), ("job", "download", job_id, "-o", str(tmp_path / "plate.pdf"))):
            result = subprocess.run([str(BIN / "imposition"), *args], env={**os.environ, **deployed.env("caller")},
                                    capture_output=True, text=True, timeout=120)
            assert result.returncode == 0, (args, result.stderr[-2000:])
        assert (tmp_path / "plate.pdf").read_bytes().startswith(b"%PDF")
        maintenance = processes["maintenance"]
        for task in ("imposition.sweep", "imposition.sample_queues", "imposition.drain_webhook_outbox"):
            ran = re.compile(rf"Task {re.escape(task)}\[[^\]]+\] succeeded")
            wait_for(lambda ran=ran: ran.search(maintenance.log()), 30, what=f"{task} run by the maintenance worker")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthcheck", timeout=10) as answer:
            assert answer.read() == b"OK"
        with pytest.raises(urllib.error.HTTPError, match="401"):  # its pages ask for the login it unsealed
            urllib.request.urlopen(f"http://127.0.0.1:{port}/tasks", timeout=10)
        for process in processes.values():  # a refusal a process caught and logged would show here
            assert "AccessDenied" not in process.log() and "not authorized" not in process.log(), process.log()[-3000:]
    finally:
        stop_all(list(processes.values()))
        receiver.stop()


def _plate_key(deployed) -> str:
    """A key under tenants/ written with the operator's rights (what a plate is)."""
    key = f"tenants/t-plate/jobs/{uuid.uuid4().hex}/plate.pdf"
    deployed.client("s3", deployed.admin).put_object(Bucket=settings().bucket, Key=key, Body=b"%PDF-1.7")
    return key


def _queue_url(deployed, queue: str) -> str:
    return deployed.client("sqs", deployed.admin).get_queue_url(QueueName=queue)["QueueUrl"]


# role → (an allowed call, a refused call), each (service, operation, parameters)
def _cases(deployed) -> dict[str, tuple[tuple, tuple]]:
    s = settings()
    plate = {"Bucket": s.bucket, "Key": _plate_key(deployed)}
    job_key = {"TableName": s.jobs_table, "Key": {"job_id": {"S": "j-none"}}}
    imposition, maintenance = _queue_url(deployed, s.imposition_queue), _queue_url(deployed, s.maintenance_queue)
    dlq = _queue_url(deployed, s.dead_letter_queue(s.imposition_queue))
    return {
        "imposer": (("s3", "get_object", plate), ("sqs", "purge_queue", {"QueueUrl": imposition})),
        "maintenance": (("dynamodb", "get_item", job_key), ("s3", "get_object", plate)),
        "notifier": (("dynamodb", "get_item", job_key), ("s3", "get_object", plate)),
        "beat": (("sqs", "get_queue_attributes", {"QueueUrl": maintenance}),
                 ("sqs", "send_message", {"QueueUrl": imposition, "MessageBody": "{}"})),
        "flower": (("sqs", "get_queue_attributes", {"QueueUrl": imposition}), ("dynamodb", "get_item", job_key)),
        "operator": (("sqs", "receive_message", {"QueueUrl": dlq}),
                     ("dynamodb", "delete_table", {"TableName": s.jobs_table})),
        "caller": (("sqs", "send_message", {"QueueUrl": imposition, "MessageBody": "{}"}),
                   ("sqs", "purge_queue", {"QueueUrl": imposition})),
    }


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_an_action_outside_the_role_is_refused(deployed, role):
    allowed, refused = _cases(deployed)[role]
    service, operation, parameters = allowed
    try:
        getattr(deployed.client(service, deployed.roles[role]), operation)(**parameters)
    except ClientError as exc:  # allowed: a missing item or object may still answer, but not 403
        assert exc.response["ResponseMetadata"]["HTTPStatusCode"] != 403, exc
    service, operation, parameters = refused
    client = deployed.client(service, deployed.roles[role])
    with pytest.raises(ClientError) as denied:
        getattr(client, operation)(**parameters)
    # moto answers a JSON-protocol client's refusal in XML, so botocore reads no error code: the status
    # and moto's message, which names the refused IAM action, tell (S3's own says AccessDenied)
    action = f"{service}:{client.meta.method_to_api_mapping[operation]}"
    assert denied.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403, denied.value
    if service == "s3":
        assert denied.value.response["Error"]["Code"] == "AccessDenied", denied.value
    else:
        assert f"not authorized to perform: {action}" in str(denied.value), denied.value


def test_every_command_block_of_the_deploy_doc_is_run_here():
    """Each ``sh`` block of docs/deploy.md is one this module runs, but the settings block, which only
    exports variables (the test sets its own)."""
    text = DEPLOY_DOC.read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, re.DOTALL)
    marked = doc_blocks("run") + doc_blocks("process")
    unmarked = [body for body in blocks if all(body.splitlines() != lines for _, lines in marked)]
    assert len(marked) == len(blocks) - 1
    assert len(unmarked) == 1 and all(line.startswith("export ") for line in unmarked[0].splitlines())
    assert {role for role, _ in marked} == {"admin", *ROLE_NAMES}


def test_the_webhook_key_encrypts_for_the_operator_and_decrypts_for_the_notifier_only(deployed):
    """The stack's KMS key for webhook secrets: the operator (``tenant set-webhook``) may encrypt, the
    notifier (signing a delivery) may decrypt; neither may do the other, nor may a caller."""
    key = settings().webhook_secret_kms_key_id
    kms = {role: deployed.client("kms", deployed.roles[role]) for role in ("operator", "notifier", "caller")}
    blob = kms["operator"].encrypt(KeyId=key, Plaintext=SECRET.encode())["CiphertextBlob"]
    key_arn = deployed.outputs["WebhookSecretsKeyArn"]
    assert kms["notifier"].decrypt(CiphertextBlob=blob, KeyId=key_arn)["Plaintext"] == SECRET.encode()
    for role, call in (("operator", lambda c: c.decrypt(CiphertextBlob=blob, KeyId=key_arn)),
                       ("caller", lambda c: c.decrypt(CiphertextBlob=blob, KeyId=key_arn)),
                       ("notifier", lambda c: c.encrypt(KeyId=key, Plaintext=b"forged"))):
        with pytest.raises(ClientError) as denied:
            call(kms[role])
        assert denied.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403, (role, denied.value)
        assert "not authorized to perform: kms:" in str(denied.value), (role, denied.value)


def test_flower_decrypts_its_login_and_only_under_its_context(deployed):
    """Flower's role may decrypt with the webhook key (its login, imposition.observability.flower); a
    caller may not; the notifier only under a tenant's context. moto does not evaluate IAM conditions, so that the decrypt is allowed only under
    the login's encryption context (imposition.common.secrets.FLOWER_LOGIN_CONTEXT), not a tenant's
    webhook secret, is checked in the rendered policy."""
    key = settings().webhook_secret_kms_key_id
    operator, flower, caller = (deployed.client("kms", deployed.roles[role]) for role in ("operator", "flower", "caller"))
    login = operator.encrypt(KeyId=key, Plaintext=b"ops:" + SECRET.encode(),
                             EncryptionContext=FLOWER_LOGIN_CONTEXT)["CiphertextBlob"]
    assert flower.decrypt(CiphertextBlob=login, EncryptionContext=FLOWER_LOGIN_CONTEXT)["Plaintext"].startswith(b"ops:")
    with pytest.raises(ClientError, match="not authorized to perform: kms:Decrypt"):
        caller.decrypt(CiphertextBlob=login, EncryptionContext=FLOWER_LOGIN_CONTEXT)
    (decrypt,) = [statement for role in roles(settings()) if role.name == "Flower" for statement in role.statements
                  if "kms:Decrypt" in statement["Action"]]
    assert decrypt["Condition"] == {"StringEquals": {"kms:EncryptionContext:purpose": "flower-login"}}
    (notifier_decrypt,) = [statement for role in roles(settings()) if role.name == "Notifier"
                           for statement in role.statements if "kms:Decrypt" in statement["Action"]]
    assert notifier_decrypt["Condition"] == {"Null": {"kms:EncryptionContext:tenant_id": "false"}}, (
        "the notifier decrypts tenants' secrets only, never Flower's login")


def test_the_capacity_envelope_of_the_deploy_doc(deployed, tmp_path):
    """The doc's envelope commands (section 9): the slot counter binds first, at 94 nodes; in 16
    items the give way's read of 200 waiting tenants binds first, at 450, and the counter at 600
    (25 ms transactions)."""
    production = {"IMPOSITION_SLOTS_PER_NODE": "8", "IMPOSITION_HEARTBEAT_INTERVAL_S": "60",
                  "IMPOSITION_LEASE_TTL_S": "600", "IMPOSITION_NODE_TTL_S": "180"}  # the session's are short
    lines = run_block("operator", {**deployed.env("operator"), **production}, tmp_path, nth=3).splitlines()
    one, sixteen = lines[1:9], lines[10:]
    assert lines[9].startswith("limit") and len(sixteen) == 8, lines
    assert one[0].startswith("cluster item 'slots' (transaction conflicts)") and one[0].split()[-1] == "94", lines
    assert sixteen[0].startswith("by-pending GSI 'pending' (reads)") and sixteen[0].split()[-1] == "450", lines
    assert [line.split()[-1] for line in sixteen if line.startswith("cluster item 'slots' (transaction")] == ["600"]


@pytest.mark.parametrize("args", [
    ("tenant", "create", "t-operator"),
    ("tenant", "set-cap", "t-operator", "3"),
    ("tenant", "show", "t-operator"),
    ("tenant", "list"),
    ("jobs", "list", "--limit", "5"),
    ("audit",),
    ("status",),
    ("dlq", "list"),
    ("dlq", "redrive", "--all"),
    ("dlq", "purge", "--yes"),
], ids=" ".join)
def test_the_operators_commands_run_under_the_operator_role(deployed, tmp_path, args):
    """The operator role covers the operator's command line (docs/operations.md), not only section 5's."""
    result = subprocess.run([str(BIN / "imposition"), *args], env={**os.environ, **deployed.env("operator")},
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, (args, result.stdout[-2000:], result.stderr[-2000:])
    assert "not authorized" not in result.stdout + result.stderr, (args, result.stderr)
