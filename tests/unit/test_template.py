"""The CloudFormation template of imposition.cli.template: cfn-lint finds nothing in it, whatever the
settings; its clocks, keys and indexes are the ones the code uses; each process kind has one role."""

from __future__ import annotations

import json

import pytest
from cfnlint.api import ManualArgs, lint

from imposition.cli.template import queue_id, render, render_json, roles, table_id
from imposition.common.clocks import Clocks
from imposition.common.settings import Settings
from leases.models import ALL_MODELS, TTL_ATTRIBUTES, JobItem, LeaseItem

SHORT_CLOCKS = {"lease_ttl_s": 30, "heartbeat_interval_s": 5, "sweep_interval_s": 5, "visibility_margin_s": 3}
#: The production defaults, given explicitly: the test session's environment shortens the clocks.
PRODUCTION_CLOCKS = {"lease_ttl_s": 600, "heartbeat_interval_s": 60, "sweep_interval_s": 60, "visibility_margin_s": 60}


def findings(template_text: str) -> list[str]:
    """cfn-lint's findings (errors, warnings, informational) on ``template_text``, one line each."""
    return [f"{m.rule.id} {m.message} ({'/'.join(str(p) for p in m.path)})"
            for m in lint(template_text, config=ManualArgs(regions=["us-east-1"]))]


#: The stack's own settings, away from their defaults: ECS, operator principals, a boundary, tags.
STACK_SETTINGS = {"compute_platform": "ecs", "operator_principals": ("arn:aws:iam::111122223333:role/on-call",),
                  "permissions_boundary_arn": "arn:aws:iam::111122223333:policy/press-boundary",
                  "resource_tags": {"team": "prepress"}}


@pytest.mark.parametrize("overrides", [PRODUCTION_CLOCKS, SHORT_CLOCKS, {"job_retention_days": 60, "stack_name": "press-eu",
                                                          "bucket": "press-eu-plates", "max_receive_count": 9},
                                       STACK_SETTINGS])
def test_cfn_lint_finds_nothing(overrides):
    assert findings(render_json(Settings(**overrides))) == []


def test_cfn_lint_finds_a_broken_template():
    """The check above can fail: a queue with a visibility above the SQS limit is reported."""
    template = render(Settings())
    template["Resources"][queue_id("imposition")]["Properties"]["VisibilityTimeout"] = 50_000
    assert any("VisibilityTimeout" in line for line in findings(json.dumps(template)))


@pytest.mark.parametrize("overrides, visibility_s", [(PRODUCTION_CLOCKS, 720), (SHORT_CLOCKS, 30 + 5 + 3)])
def test_queues_follow_the_clocks_and_settings(overrides, visibility_s):
    settings = Settings(**overrides)
    resources = render(settings)["Resources"]
    for name in settings.work_queues:
        properties = resources[queue_id(name)]["Properties"]
        assert properties["VisibilityTimeout"] == Clocks.from_settings(settings).visibility_timeout_s
        assert properties["RedrivePolicy"]["maxReceiveCount"] == settings.max_receive_count
    assert resources[queue_id("imposition")]["Properties"]["VisibilityTimeout"] == visibility_s


def test_tables_have_the_models_keys_indexes_and_ttl():
    settings = Settings(leases_table="press-leases")
    resources = render(settings)["Resources"]
    leases = resources[table_id(LeaseItem)]["Properties"]
    assert leases["TableName"] == "press-leases"
    assert leases["KeySchema"] == [{"AttributeName": "job_id", "KeyType": "HASH"}]
    assert leases["GlobalSecondaryIndexes"] == [{
        "IndexName": "by-expiry", "Projection": {"ProjectionType": "ALL"},
        "KeySchema": [{"AttributeName": "expiry_partition", "KeyType": "HASH"},
                      {"AttributeName": "expires_at", "KeyType": "RANGE"}]}]
    for model in ALL_MODELS:
        properties = resources[table_id(model)]["Properties"]
        assert properties["BillingMode"] == "PAY_PER_REQUEST"
        assert properties["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
        assert properties["DeletionProtectionEnabled"] is True
        assert resources[table_id(model)]["DeletionPolicy"] == "Retain"
        ttl = properties.get("TimeToLiveSpecification", {}).get("AttributeName")
        assert ttl == TTL_ATTRIBUTES.get(model)


def test_bucket_is_private_encrypted_and_expires_from_the_settings():
    bucket = render(Settings(job_retention_days=45, s3_abort_incomplete_upload_days=2))["Resources"]["PlatesBucket"]
    properties = bucket["Properties"]
    assert properties["PublicAccessBlockConfiguration"] == dict.fromkeys(
        ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets"), True)
    assert properties["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
    rules = {rule["Id"]: rule for rule in properties["LifecycleConfiguration"]["Rules"]}
    assert (rules["imposition-job-objects"]["Prefix"], rules["imposition-job-objects"]["ExpirationInDays"]) == (
        "tenants/", 45)
    assert rules["imposition-incomplete-uploads"]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 2}


def test_the_webhook_key_is_made_under_the_alias_the_processes_use():
    resources = render(Settings(webhook_secret_kms_key_id="alias/press-hooks"))["Resources"]
    assert resources["WebhookSecretsKeyAlias"]["Properties"]["AliasName"] == "alias/press-hooks"
    with pytest.raises(ValueError, match=r"webhook_secret_kms_key_id='arn:aws:kms:.*alias"):
        render(Settings(webhook_secret_kms_key_id="arn:aws:kms:eu-central-1:111122223333:key/1234"))


def test_one_role_per_process_kind_none_with_a_wildcard_action():
    settings = Settings(stack_name="press")
    resources = render(settings)["Resources"]
    made = {r["Properties"]["RoleName"] for r in resources.values() if r["Type"] == "AWS::IAM::Role"}
    assert made == {f"press-{kind}" for kind in
                    ("imposer", "maintenance", "notifier", "beat", "flower", "operator", "caller")}
    for role in roles(settings):
        for statement in role.statements:
            assert statement["Effect"] == "Allow"
            assert all("*" not in action for action in statement["Action"]), (role.name, statement)
            # only CloudWatch's GetMetricData, which has no resource-level permission, names "*"
            assert statement["Resource"] != "*" or statement["Action"] == ["cloudwatch:GetMetricData"]


def _role_properties(template: dict) -> dict[str, dict]:
    return {r["Properties"]["RoleName"]: r["Properties"] for r in template["Resources"].values()
            if r["Type"] == "AWS::IAM::Role"}


@pytest.mark.parametrize("platform, service", [("ec2", "ec2.amazonaws.com"), ("ecs", "ecs-tasks.amazonaws.com")])
def test_each_role_trusts_only_the_compute_that_runs_it(platform, service):
    template = render(Settings(stack_name="press", compute_platform=platform))
    roles_made = _role_properties(template)
    assert len(roles_made) == 7
    for name, properties in roles_made.items():
        trust = properties["AssumeRolePolicyDocument"]
        assert [statement["Principal"] for statement in trust["Statement"]] == [{"Service": service}], name
        assert ":root" not in json.dumps(trust) and "AWS" not in json.dumps(trust["Statement"][0]["Principal"])
        if platform == "ecs":  # a task of this account only (the confused-deputy condition)
            assert trust["Statement"][0]["Condition"] == {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}
    profiles = {r["Properties"]["InstanceProfileName"]: r["Properties"]["Roles"]
                for r in template["Resources"].values() if r["Type"] == "AWS::IAM::InstanceProfile"}
    expected = {name: [{"Ref": logical}] for logical, r in template["Resources"].items()
                if r["Type"] == "AWS::IAM::Role" for name in [r["Properties"]["RoleName"]]}
    assert profiles == (expected if platform == "ec2" else {})


def test_only_the_operator_role_trusts_the_principals_the_settings_name():
    principals = ["arn:aws:iam::111122223333:role/on-call", "arn:aws:iam::111122223333:user/alice"]
    for name, properties in _role_properties(render(Settings(stack_name="press", operator_principals=principals))).items():
        trusted = [statement["Principal"]["AWS"] for statement in properties["AssumeRolePolicyDocument"]["Statement"]
                   if "AWS" in statement["Principal"]]
        assert trusted == ([principals] if name == "press-operator" else []), name


def test_a_boundary_and_the_settings_tags_go_on_every_role_and_every_taggable_resource():
    """Taggable: every resource type whose CloudFormation schema (cfn-lint's) has a Tags property."""
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

    boundary = "arn:aws:iam::111122223333:policy/press-boundary"
    settings = Settings(stack_name="press", permissions_boundary_arn=boundary,
                        resource_tags={"team": "prepress", "cost-centre": "4711"})
    expected = [{"Key": "service", "Value": "press"}, {"Key": "cost-centre", "Value": "4711"},
                {"Key": "team", "Value": "prepress"}]
    resources = render(settings)["Resources"]
    for logical, resource in resources.items():
        schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", resource["Type"]).schema
        if "Tags" in schema.get("properties", {}):
            assert resource["Properties"]["Tags"] == expected, logical
        if resource["Type"] == "AWS::IAM::Role":
            assert resource["Properties"]["PermissionsBoundary"] == boundary, logical
    assert all("PermissionsBoundary" not in r["Properties"] for r in render(Settings())["Resources"].values())


def test_a_trust_policy_past_iams_quota_is_refused_at_render():
    principals = [f"arn:aws:iam::111122223333:role/on-call-{i:03d}" for i in range(50)]
    with pytest.raises(ValueError, match=r"OperatorRole: trust policy of \d+ characters, past IAM's 2048"):
        render(Settings(operator_principals=principals))


@pytest.mark.parametrize("bad", [
    {"operator_principals": ["arn:aws:iam::1111:role/short-account"]},
    {"operator_principals": ["arn:aws:s3:::bucket"]},
    {"resource_tags": {"aws:reserved": "x"}},
    {"resource_tags": {"service": "mine"}},
    {"permissions_boundary_arn": "press-boundary"},
], ids=lambda bad: next(iter(bad)))
def test_principals_tags_and_boundary_are_checked_in_the_settings(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        Settings(**bad)


def test_alarms_watch_each_queue_dead_letter_queue_and_table_and_the_quiet_tenants_and_notify_the_topic():
    import re
    from pathlib import Path

    settings = Settings(stack_name="press", alarm_oldest_message_age_s=1800, alert_for_s=600, alert_dlq_for_s=300,
                        alert_starving_wait_p95_s=180)
    template = render(settings)
    assert template["Parameters"]["AlarmTopicArn"]["Default"] == ""  # deployable without a topic
    alarms = [r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::CloudWatch::Alarm"]
    notify = {"Fn::If": ["AlarmTopicGiven", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]}
    guide = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    runbooks = guide.split("\n## CloudWatch alarms\n", 1)[1].split("\n## ", 1)[0]
    for alarm in alarms:
        assert alarm["AlarmActions"] == alarm["OKActions"] == notify, alarm["AlarmName"]
        anchor = re.fullmatch(r".* Runbook: https://imposition\.example\.com/docs/operations\.md#(\w+)",
                              alarm["AlarmDescription"]).group(1)
        assert re.search(rf"^### {anchor}$", runbooks, re.IGNORECASE | re.MULTILINE), anchor

    def watching(metric: str) -> dict[str, dict]:
        return {a["Dimensions"][0]["Value"]["Fn::GetAtt"][0]: a for a in alarms if a.get("MetricName") == metric}

    oldest = watching("ApproximateAgeOfOldestMessage")
    assert set(oldest) == {queue_id(name) for name in settings.work_queues}
    assert {(a["Threshold"], a["EvaluationPeriods"], a["Period"]) for a in oldest.values()} == {(1800, 10, 60)}
    dead_letters = watching("ApproximateNumberOfMessagesVisible")
    assert len(dead_letters) == 3 and all(logical.endswith("DeadLetterQueue") for logical in dead_letters)
    assert {(a["Threshold"], a["EvaluationPeriods"]) for a in dead_letters.values()} == {(0, 5)}
    quiet = watching("ApproximateAgeOfOldestMessageInQuietGroups")
    assert {logical: (a["Threshold"], a["EvaluationPeriods"]) for logical, a in quiet.items()} == {
        queue_id("imposition"): (180, 10)}
    throttles = {next(m["MetricStat"]["Metric"]["Dimensions"][0]["Value"]["Ref"] for m in a["Metrics"] if "MetricStat" in m): a
                 for a in alarms if "Metrics" in a}
    assert set(throttles) == {table_id(model) for model in ALL_MODELS}
    jobs = throttles[table_id(JobItem)]
    read = {(m["MetricStat"]["Metric"]["MetricName"],
             next((d["Value"] for d in m["MetricStat"]["Metric"]["Dimensions"] if d["Name"] == "GlobalSecondaryIndexName"),
                  None)) for m in jobs["Metrics"] if "MetricStat" in m}
    indexes = [None, *(i["IndexName"] for i in template["Resources"][table_id(JobItem)]["Properties"]["GlobalSecondaryIndexes"])]
    assert read == {(metric, index) for metric in ("ReadThrottleEvents", "WriteThrottleEvents") for index in indexes}
    assert (jobs["Threshold"], jobs["EvaluationPeriods"], jobs["DatapointsToAlarm"]) == (0, 10, 10)
