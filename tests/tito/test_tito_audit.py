"""`t1 tito-audit DIR --json FILE` over trajectories written with t1/agent/trajectory.py."""

from __future__ import annotations

import json

from tito_helpers import own_loop_turns, sample, text_log

from t1.agent import chat
from t1.agent.trajectory import Status, Trajectory, save_trajectory
from t1.cli import main
from t1.tito import turns_from_text_log

CALL = chat.tool_call_text("ls")
OBS = ["a.txt\n", "1\n"]
KEYS = {
    "schema_version",
    "status",
    "trajectories",
    "loss_tokens",
    "drift_tokens",
    "drift_rate",
    "placeholder_rate",
    "placeholder_in_loss",
    "relations",
}


def _write(tok, root) -> int:
    """Four trainable trajectories (strict, normalized, retokenized, split) and one ABORTED."""
    strict = own_loop_turns(tok, [CALL, CALL, "Done."], OBS)
    normalized = own_loop_turns(tok, [CALL, "Done."], OBS, server_options={"im_end_newline": False})
    split_pieces = chat.encode(tok, "<think>\nlook\n</think>\n\n") + sample(tok, CALL)
    log = [(split_pieces, {"reasoning_content": "look", "content": CALL}, OBS[0])]
    log += [
        (sample(tok, CALL), {"content": CALL}, OBS[1]),
        (sample(tok, "Done."), {"content": "Done."}, None),
    ]
    split = turns_from_text_log(
        text_log(tok, log, {"strip_reasoning": True}), tok, strip_reasoning=True
    )
    nl = [(sample(tok, "\nLet me look.\n" + CALL), {"content": "\nLet me look.\n" + CALL}, OBS[0])]
    nl += [(sample(tok, "Done."), {"content": "Done."}, None)]
    retok = turns_from_text_log(text_log(tok, nl), tok)
    runs = [("strict", strict, Status.COMPLETED), ("normalized", normalized, Status.TRUNCATED)]
    runs += [("split", split, Status.COMPLETED), ("retok", retok, Status.COMPLETED)]
    for name, turns, status in runs:
        save_trajectory(Trajectory(name, status, turns=turns, reward=0.5), root / "step-0" / name)
    save_trajectory(
        Trajectory("cancelled", Status.ABORTED, reason="over-sampling"), root / "step-0" / "x"
    )
    return sum(len(t.sampled_ids) for _, turns, _ in runs for t in turns)


def test_audit_counts_relations_and_reports_zero_drift(tok, tmp_path, capsys):
    loss = _write(tok, tmp_path / "run")
    out = tmp_path / "audit.json"
    code = main(
        ["tito-audit", str(tmp_path / "run"), "--json", str(out), "--tokenizer", tok.name_or_path]
    )
    assert code == 0
    data = json.loads(out.read_text())
    assert set(data) == KEYS and set(data["relations"]) == {
        "strict",
        "normalized",
        "retokenized",
        "split",
    }
    assert data["trajectories"] == 4 and data["loss_tokens"] == loss
    assert (data["drift_tokens"], data["drift_rate"], data["placeholder_in_loss"]) == (0, 0.0, 0)
    assert data["relations"] == {"strict": 3, "normalized": 1, "retokenized": 1, "split": 1}
    # the only placeholders: the last sampled id of each segment (nothing depends on its routing)
    assert 0 < data["placeholder_rate"] < 0.01
    table = capsys.readouterr().out
    assert "not trained: ABORTED 1" in table and "retokenized" in table


def test_audit_fails_on_a_broken_trajectory(tok, tmp_path, capsys):
    turns = own_loop_turns(tok, [CALL, "Done."], OBS)
    turns[1].routing, turns[1].routing_start = turns[1].routing[1:], turns[1].routing_start + 1
    save_trajectory(Trajectory("broken", Status.COMPLETED, turns=turns), tmp_path / "broken")
    assert main(["tito-audit", str(tmp_path)]) == 1
    assert "no routing capture" in capsys.readouterr().out
