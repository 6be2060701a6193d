"""Verifier of static-site-server: the server the agent left running, contacted on localhost."""

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

BASE = "http://127.0.0.1:8000"


def get(path):
    return urllib.request.urlopen(BASE + path, timeout=5)


def test_draft_file_kept():
    assert Path("/app/site/draft.html").read_text().strip() == "<p>draft</p>"


@pytest.mark.parametrize("name", ["index.html", "health.json"])
def test_file_on_disk(name):
    assert (Path("/app/site") / name).is_file()


def test_index_served():
    assert get("/").status == 200


def test_index_content():
    assert "Hello from T1" in get("/index.html").read().decode()


def test_health_json():
    assert json.loads(get("/health.json").read()) == {"status": "ok"}


def test_draft_served():
    assert "draft" in get("/draft.html").read().decode()


def test_missing_page_is_404():
    with pytest.raises(urllib.error.HTTPError) as e:
        get("/no-such-page.html")
    assert e.value.code == 404
