import subprocess


def test_helper_was_copied_and_approves():
    out = subprocess.run(["python3", "/app/check_answer.py"], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr
