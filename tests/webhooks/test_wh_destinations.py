"""The SSRF guard: webhook URLs reach public addresses only, when set and again at every connection.

The session allows private addresses (its receivers listen on 127.0.0.1); these tests turn that off
in this process with the ``private_addresses`` fixture.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tests.webhooks.conftest import finished_job, hook_url, job_item
from imposition.webhooks import delivery
from imposition.webhooks.destinations import refusal_reason
from imposition.webhooks.endpoints import endpoint_for, set_webhook
from imposition.webhooks.errors import UnsafeWebhookDestination, WebhookConfigError

REFUSED = {
    "127.0.0.1": "loopback", "127.8.9.10": "loopback", "::1": "loopback",
    "::ffff:127.0.0.1": "loopback",  # IPv4-mapped: judged as its IPv4 address
    "169.254.169.254": "link-local",  # cloud instance metadata
    "fe80::1%eth0": "link-local",
    "10.0.0.5": "private", "172.16.3.4": "private", "192.168.1.1": "private", "fc00::1": "private",
    "224.0.0.1": "multicast", "ff0e::1": "multicast",
    "0.0.0.0": "unspecified", "::": "unspecified",
    "240.0.0.1": "reserved", "255.255.255.255": "reserved",
    "100.64.0.1": "not globally reachable",  # carrier-grade NAT, RFC 6598
    "2002:7f00:1::": "6to4 of a loopback address",
}
PUBLIC = ("93.184.216.34", "8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8", "2002:808:808::")


@pytest.mark.parametrize("address", sorted(REFUSED))
def test_addresses_that_are_not_public_are_refused_and_named(address):
    assert refusal_reason(address) == REFUSED[address]


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_are_accepted(address):
    assert refusal_reason(address) is None


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "[::1]", "169.254.169.254", "10.1.2.3", "0",
                                  "2130706433"])  # "0" and a decimal integer: spellings of 0.0.0.0, 127.0.0.1
def test_set_webhook_refuses_hosts_that_are_or_resolve_to_private_addresses(host, private_addresses, new_tenant,
                                                                            webhook_secret):
    private_addresses(False)
    tenant = new_tenant()
    with pytest.raises(UnsafeWebhookDestination, match="public addresses only"):
        set_webhook(tenant, f"http://{host}:8080/hook", webhook_secret)
    assert endpoint_for(tenant) is None


def test_set_webhook_accepts_public_hosts_and_refuses_unresolvable_ones(private_addresses, new_tenant,
                                                                         webhook_secret):
    private_addresses(False)
    tenant = new_tenant()
    set_webhook(tenant, "https://93.184.216.34/hooks/x", webhook_secret)  # a literal: no DNS needed
    assert endpoint_for(tenant).url == "https://93.184.216.34/hooks/x"
    with pytest.raises(WebhookConfigError, match="does not resolve"):
        set_webhook(new_tenant(), "https://no-such-host.invalid/hook", webhook_secret)  # RFC 6761: never resolves


def test_the_cli_refuses_a_private_webhook_url_with_a_usage_error(private_addresses, new_tenant, webhook_secret,
                                                                  monkeypatch):
    from imposition.cli.main import main as cli

    private_addresses(False)
    monkeypatch.setenv("WEBHOOK_SECRET_FOR_TEST", webhook_secret)
    tenant = new_tenant()
    result = CliRunner().invoke(cli, ["tenant", "set-webhook", tenant, "http://169.254.169.254/latest/meta-data/",
                                      "--secret-env", "WEBHOOK_SECRET_FOR_TEST"])
    assert result.exit_code == 2, result.output
    assert "link-local" in result.output and webhook_secret not in result.output
    assert endpoint_for(tenant) is None


def test_delivery_checks_the_address_it_connects_to(private_addresses, new_tenant, webhook_secret, start_receiver):
    """A URL accepted earlier whose name now resolves to a private address (DNS rebinding, or a
    switch turned off) is refused at the connection, and the switch lets the same URL through."""
    receiver = start_receiver()
    tenant = new_tenant()
    url = hook_url(receiver.port, tenant).replace("127.0.0.1", "localhost")  # a name, resolved at connect
    set_webhook(tenant, url, webhook_secret)  # the session allows it
    job_id = finished_job(tenant)

    private_addresses(False)
    refused = delivery.deliver_round(job_id, tenant)
    assert refused.status == "failed" and refused.attempts == 1  # refused: not retried within the round
    assert "'localhost' resolves to" in refused.error and "(loopback)" in refused.error
    assert receiver.tenant_counts(tenant)["accepted"] == 0

    private_addresses(True)
    assert delivery.deliver_round(job_id, tenant).status == delivery.DELIVERED
    assert receiver.tenant_counts(tenant)["jobs"] == {job_id: 1}
    assert job_item(job_id).webhook_status == delivery.DELIVERED
