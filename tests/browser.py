"""Headless Chromium for the tests that drive a page (the inspector, /docs), through Selenium."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest


@contextmanager
def headless_chromium() -> Iterator[Any]:
    """A Selenium driver of Debian's chromium, quit at the end; the test is skipped where either is missing."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (the [serve] extra)")
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver_path:
        pytest.skip("Debian's chromium and chromium-driver are not installed (scripts/setup.sh installs them as root)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1800"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver_path))
    try:
        yield driver
    finally:
        driver.quit()
