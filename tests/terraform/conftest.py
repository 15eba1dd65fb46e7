"""The Terraform tests' control plane and tools, one each for the whole session.

``terraform_tools``: the provider built into a filesystem mirror and the CLI (``tofu``
on PATH, else OpenTofu built from its Go module), by ``terraform/tools.sh``.
``terraform_demo``: the demo (``tests/support/demo.py``: the control plane with SQLite
and its local issuer, a Celery worker, two regions' controllers and three brokers
each), started once and shared by every test here; each test works in tenants or on
objects of its own and removes them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.demo import Demo, running_demo
from tests.support.terraform import TerraformTools, build_tools


@pytest.fixture(scope="session")
def terraform_tools() -> TerraformTools:
    return build_tools()


@pytest.fixture(scope="session")
def terraform_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    data_dir = tmp_path_factory.mktemp("terraform") / "demo"
    with running_demo(data_dir, records=10) as demo:
        yield demo


@pytest.fixture(autouse=True)
def _demo_logs_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed and "terraform_demo" in request.fixturenames:
        demo: Demo = request.getfixturevalue("terraform_demo")
        print(demo.logs()[-20000:])
