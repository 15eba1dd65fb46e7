"""The platform administrator's pages in Chromium, signed in through the local issuer's
form as an operator: the overview of regions, clusters and brokers, decommissioning a
broker (the wrong name typed first), the tenant list, creating a tenant (a field error
first, what was typed kept) and changing its quotas. A tenant's member gets the 404 of a
missing page there. Every page is checked with axe-core and screenshotted."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from controlplane.accounts import services
from controlplane.quotas.models import Quota
from controlplane.regions.models import Broker
from controlplane.tenants.models import Tenant
from tests.controlplane.api_base import make_cluster
from tests.support.controlplane import make_tenant
from tests.web.conftest import Ui
from tests.web.test_console_pages import PASSWORD, SYSTEM, _member, _sign_in


def test_an_operator_manages_brokers_and_tenants(ui: Ui, console: str) -> None:
    cluster = make_cluster()
    cluster.brokers.filter(broker_id=1).update(kafka_port=41001)
    make_tenant("acme", region=cluster.region)
    services.set_local_password("ops", PASSWORD, platform_admin=True, actor=SYSTEM)
    page = ui.page

    _sign_in(ui, console, "ops", "/console/platform/")
    expect(page.get_by_role("heading", level=1)).to_have_text("Regions, clusters and brokers")
    expect(page.locator("tbody tr[id^=broker-]")).to_have_count(3)
    expect(page.get_by_role("columnheader", name="Kafka address")).to_be_visible()
    first = Broker.objects.get(cluster=cluster, broker_id=1)
    expect(page.locator(f"#broker-{first.pk}")).to_contain_text("127.0.0.1:41001")
    ui.check("platform-overview")

    broker = Broker.objects.get(cluster=cluster, broker_id=2)
    row = page.locator(f"#broker-{broker.pk}")
    row.get_by_label("Type c1/2 to confirm").fill("c1/3")
    row.get_by_role("button", name="Decommission").click()
    expect(page.locator(f"#broker-{broker.pk}")).to_contain_text("c1/2")
    ui.check("platform-decommission-error")
    broker.refresh_from_db()
    assert broker.phase == "ready"
    page.locator(f"#broker-{broker.pk}").get_by_label("Type c1/2 to confirm").fill("c1/2")
    page.locator(f"#broker-{broker.pk}").get_by_role("button", name="Decommission").click()
    expect(page.locator(f"#broker-{broker.pk}")).to_contain_text("decommissioning")
    broker.refresh_from_db()
    assert broker.phase == "decommissioning"

    page.goto(console + "/console/platform/tenants/")
    expect(page.get_by_role("link", name="acme", exact=True)).to_be_visible()
    page.get_by_label("Name", exact=True).fill("Initech <b>Corp</b>")
    page.get_by_role("button", name="Create", exact=True).click()
    expect(page.get_by_label("Name", exact=True)).to_have_value("Initech <b>Corp</b>")
    expect(page.locator("main")).to_contain_text("This field is required.")
    ui.check("platform-tenant-create-error")
    page.get_by_label("Slug").fill("initech")
    page.get_by_role("button", name="Create", exact=True).click()
    expect(page).to_have_url(re.compile(r"/console/platform/tenants/initech/$"))
    assert Tenant.objects.filter(slug="initech").exists()
    ui.check("platform-tenant")

    page.get_by_label("max_topics", exact=True).fill("-1")
    page.get_by_role("button", name="Save quotas").click()
    expect(page.get_by_label("max_topics", exact=True)).to_have_value("-1")
    ui.check("platform-quota-error")
    page.get_by_label("max_topics", exact=True).fill("77")
    page.get_by_role("button", name="Save quotas").click()
    expect(page.get_by_label("max_topics", exact=True)).to_have_value("77")
    assert Quota.objects.get(tenant__slug="initech").max_topics == 77


def test_a_tenant_member_gets_the_404_of_a_missing_page(ui: Ui, console: str) -> None:
    cluster = make_cluster()
    acme = make_tenant("acme", region=cluster.region)
    _member("admin", acme, "tenant-admin")
    _sign_in(ui, console, "admin", "/console/t/acme/")
    expect(ui.page.get_by_role("heading", level=1)).to_have_text(acme.name)
    for url in ("/console/platform/", "/console/platform/tenants/acme/"):
        response = ui.page.goto(console + url)
        assert response is not None
        assert response.status == 404
        expect(ui.page.get_by_role("heading", level=1)).to_have_text("Not found")
