"""Helper the verifier script copies to /app; the tests run it."""

from pathlib import Path

print("ok" if Path("/app/answer.txt").read_text().strip() == "42" else "wrong")
