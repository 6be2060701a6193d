import os
from pathlib import Path


def test_word_matches_the_exported_variable():
    assert Path(os.environ["WORD_FILE"]).read_text().strip() == os.environ["EXPECTED_WORD"]
