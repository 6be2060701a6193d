import urllib.request


def test_served_page():
    body = urllib.request.urlopen("http://127.0.0.1:8765/index.html", timeout=5).read()
    assert body.decode().strip() == "<h1>hi</h1>"
