"""Every botocore session of a process shares one loader of parsed service models (imposition.common.aws)."""

from __future__ import annotations

from pynamodb.connection import Connection

from imposition.common import aws


def test_boto3_pynamodb_and_kombu_sessions_share_the_parsed_service_models():
    aws.preload_service_models()
    loader = aws.service_models()
    dynamodb = loader.load_service_model("dynamodb", "service-2")
    assert loader.load_service_model("dynamodb", "service-2") is dynamodb  # parsed once, then cached
    assert aws.botocore_session().get_component("data_loader") is loader
    assert aws.new_botocore_session().get_component("data_loader") is loader  # kombu's, one per queue
    assert aws.new_botocore_session() is not aws.botocore_session()
    connection = aws.on_shared_session(Connection(region="us-east-1"))
    assert connection.session is aws.botocore_session()
