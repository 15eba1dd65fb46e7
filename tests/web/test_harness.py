"""The browser-test harness itself: axe-core fails a page with a serious or critical
violation, and every checked page leaves a screenshot."""

from __future__ import annotations

import pytest

from tests.web.conftest import Ui


def test_the_accessibility_check_fails_on_a_critical_violation(ui: Ui) -> None:
    # A form field with no label and an image with no text: both critical for axe.
    ui.page.set_content(
        '<!doctype html><html lang="en"><head><title>t</title></head><body><main>'
        '<input type="text"><img src="data:,"></main></body></html>'
    )
    with pytest.raises(AssertionError, match="critical"):
        ui.check("unlabelled")
    assert ui.shots[0].exists()
    assert ui.shots[0].stat().st_size > 0


def test_a_clean_page_passes(ui: Ui) -> None:
    ui.page.set_content(
        '<!doctype html><html lang="en"><head><title>t</title></head><body><main>'
        '<h1>Fine</h1><label for="f">Name</label><input id="f" type="text"></main></body></html>'
    )
    ui.check("clean")
