"""`make lab` seen through a real browser: JupyterLab, started with the Makefile's own command line, serves a
copy of chapter 00 to headless Chromium (Debian's `chromium`, driven by Playwright); a cell runs and its output
appears on the page, and JupyterLab does not ask about its news feed."""

import json
import os
import re
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from workbook import BUILD_DIR, REPO_ROOT

CHAPTER = "00_setup_check.ipynb"
CELL_TO_RUN = 'from workbook import CSRC_DIR\n\nprint((CSRC_DIR / "setup_check" / "add_one.cpp").read_text())'
NEWS_PROMPT = "Would you like to get notified about official Jupyter news?"
NOTIFICATION_SETTINGS = "@jupyterlab/apputils-extension:notification"
SCREENSHOT = BUILD_DIR / "browser" / "00_setup_check.png"
SECONDS = 30
WAIT_MS = SECONDS * 1000


@pytest.fixture
def chromium():
    for name in ("chromium", "chromium-browser"):
        if path := shutil.which(name):
            return path
    pytest.skip(
        "Chromium is not installed, so JupyterLab cannot be tested in a browser here "
        "(`make setup` installs Debian's `chromium` where apt-get is available)"
    )


def make_lab_command(notebook_dir, port, token):
    """The command `make lab` runs (without its set-up step), serving `notebook_dir` on `port`."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("MAKE")}
    recipe = subprocess.run(
        ["make", "--no-print-directory", "-n", "-o", "setup", "lab"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    words = shlex.split(recipe.replace("\\\n", " "))
    assert words[1:4] == ["-m", "jupyter", "lab"], recipe
    options = [word for word in words[4:] if not word.startswith("--notebook-dir=")]
    return [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        *options,
        f"--notebook-dir={notebook_dir}",
        f"--port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
    ]


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def request(url, token, method="GET"):
    call = urllib.request.Request(url, method=method, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(call, timeout=10) as response:
        return json.loads(response.read() or "null")


def chapter_copy_with_cell_cleared(directory):
    """A copy of the chapter whose cell to run shows no output yet; returns that output as stored."""
    notebook = json.loads((REPO_ROOT / "notebooks" / CHAPTER).read_text())
    cell = next(cell for cell in notebook["cells"] if "".join(cell["source"]) == CELL_TO_RUN)
    stored = "".join("".join(output["text"]) for output in cell["outputs"])
    cell["outputs"], cell["execution_count"] = [], None
    (directory / CHAPTER).write_text(json.dumps(notebook))
    return stored


@pytest.fixture
def lab(tmp_path):
    """JupyterLab on a free localhost port, with its config, data and runtime folders in `tmp_path`."""
    home = tmp_path / "jupyter"
    served = tmp_path / "served"
    served.mkdir()
    port, token = free_port(), secrets.token_hex(16)
    env = dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTER_DATA_DIR=str(home / "data"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        IPYTHONDIR=str(home / "ipython"),
        PYTHONPATH=str(REPO_ROOT),
    )
    log = tmp_path / "lab.log"
    with log.open("w") as output:
        server = subprocess.Popen(
            make_lab_command(served, port, token), cwd=REPO_ROOT, env=env, stdout=output, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SECONDS
        while True:
            try:
                request(f"{url}/api/status", token)
                break
            except (urllib.error.URLError, ConnectionError):
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start; its log:\n{log.read_text()[-3000:]}")
                time.sleep(0.2)
        yield url, token, served
        request(f"{url}/api/shutdown", token, method="POST")
        assert server.wait(timeout=SECONDS) == 0, log.read_text()[-3000:]
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_a_chapter_runs_in_jupyterlab_in_chromium_without_the_news_prompt(chromium, lab):
    from playwright.sync_api import expect, sync_playwright

    url, token, served = lab
    stored_output = chapter_copy_with_cell_cleared(served)
    schema = request(f"{url}/lab/api/settings/{NOTIFICATION_SETTINGS}", token)["schema"]
    assert schema["properties"]["fetchNews"]["default"] == "false", "make lab's settings override is not applied"

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(WAIT_MS)
            page.goto(f"{url}/lab/tree/{CHAPTER}?token={token}")
            cell = page.locator(".jp-CodeCell", has_text=CELL_TO_RUN.splitlines()[0])
            editor = cell.locator(".jp-InputArea-editor")
            editor.wait_for()
            expect(cell.locator(".jp-OutputArea-output")).to_have_count(0)
            # A cell run before the kernel is up can be dropped on a busy machine: wait for "| Idle".
            expect(page.get_by_text(re.compile(r"\| Idle$"))).to_be_visible(timeout=WAIT_MS)
            editor.click()
            page.keyboard.press("Control+Enter")
            output = cell.locator(".jp-OutputArea-output")
            expect(output).to_contain_text(stored_output.splitlines()[0], timeout=WAIT_MS)
            expect(cell.locator(".jp-InputPrompt")).to_have_text("[1]:", timeout=WAIT_MS)
            cell.evaluate("element => element.scrollIntoView()")
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=SCREENSHOT)
            shown_output = output.inner_text()
            news_prompts = page.get_by_text(NEWS_PROMPT).count()
        finally:
            browser.close()

    assert shown_output.strip() == stored_output.strip()
    assert news_prompts == 0, "JupyterLab asked about its news feed"
