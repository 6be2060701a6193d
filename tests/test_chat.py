"""Chat glue: appended prompts equal the template's render; tool-call parsing."""

from __future__ import annotations

import pytest

from t1.agent import chat as C
from t1.agent import tokenizer as T
from t1.agent import tokenizer_train as TT


@pytest.fixture(scope="module", params=["bpe", "qwen3.5"])
def tok(request):
    return TT.bpe_tokenizer() if request.param == "bpe" else T.build_qwen35_tokenizer()


def _sample(tok, text):
    """Ids as a model might sample them: the turn's text, then the stop token."""
    return C.encode(tok, text) + [tok.convert_tokens_to_ids(T.IM_END)]


def test_appended_prompt_renders_like_the_template(tok):
    msgs = C.initial_messages("Write hi to a.txt")
    p0 = C.prompt_ids(tok, msgs)
    assert tok.decode(p0).endswith(
        "<|im_start|>user\nWrite hi to a.txt<|im_end|>\n<|im_start|>assistant\n"
    )
    s0 = _sample(tok, "Sure.\n" + C.tool_call_text("echo hi > a.txt"))
    p1, appended = C.next_prompt(tok, p0, s0, "")
    assert p1 == p0 + s0 + appended
    call = {
        "type": "function",
        "function": {"name": "bash", "arguments": {"command": "echo hi > a.txt"}},
    }
    msgs += [
        {"role": "assistant", "content": "Sure.", "tool_calls": [call]},
        {"role": "tool", "content": ""},
    ]
    assert tok.decode(p1) == C.render_text(tok, msgs)


def test_turn_cut_before_the_stop_token_gets_it_as_context(tok):
    s = C.encode(tok, "thinking about")
    _, appended = C.next_prompt(tok, [1, 2], s, "x")
    assert appended[0] == tok.convert_tokens_to_ids(T.IM_END)
    _, appended = C.next_prompt(tok, [1, 2], s + [tok.convert_tokens_to_ids(T.IM_END)], "x")
    assert appended[0] != tok.convert_tokens_to_ids(T.IM_END)


def test_template_options(tok):
    msgs = [
        *C.initial_messages("q"),
        {"role": "assistant", "reasoning_content": "r1", "content": "a1"},
        {"role": "tool", "content": "o"},
        {"role": "assistant", "reasoning_content": "r2", "content": "a2"},
    ]
    full = C.render_text(tok, msgs, add_generation_prompt=False)
    assert "<think>\nr1\n</think>\n\na1" in full and "<think>\nr2\n</think>" in full
    stripped = C.render_text(tok, msgs, add_generation_prompt=False, strip_reasoning=True)
    assert "r1" not in stripped and "<think>\nr2\n</think>" in stripped
    tight = C.render_text(tok, msgs, add_generation_prompt=False, im_end_newline=False)
    assert "<|im_end|>\n" not in tight and tight.count("<|im_end|>") == full.count("<|im_end|>")


def test_turn_text_drops_the_stop_token(tok):
    assert C.turn_text(tok, _sample(tok, "done")) == "done"


@pytest.mark.parametrize(
    "text, command",
    [
        (
            '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la"}}\n</tool_call>',
            "ls -la",
        ),
        (
            'I will look.\n<tool_call>{"name":"bash","arguments":{"command":"cat \\"a b\\""}}</tool_call>\n',
            'cat "a b"',
        ),
        (
            '<tool_call>\n```json\n{"name": "bash", "arguments": "{\\"command\\": \\"pwd\\"}"}\n```\n</tool_call>',
            "pwd",
        ),
        (
            '<tool_call>{"name": "bash", "arguments": {"command": "x", "timeout": 3}}</tool_call><|im_end|>',
            "x",
        ),
    ],
)
def test_parse_tool_call_commands(text, command):
    assert C.parse_tool_call(text) == C.ToolCall(command=command)


@pytest.mark.parametrize(
    "text, error",
    [
        (
            '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}',
            "1 <tool_call> but 0 </tool_call>",
        ),
        ("<tool_call>{bash ls}</tool_call>", "not valid JSON"),
        ('<tool_call>["bash"]</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "python", "arguments": {}}</tool_call>', "unknown tool 'python'"),
        ('<tool_call>{"name": "bash", "arguments": {"cmd": "ls"}}</tool_call>', 'string "command"'),
        (
            '<tool_call>{"name": "bash", "arguments": {"command": "  "}}</tool_call>',
            "empty command",
        ),
        ('<tool_call>{"name": "bash"}</tool_call>', '"arguments"'),
        ("</tool_call>oops<tool_call>", "before"),
        (
            2 * '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>',
            "one tool call per turn",
        ),
    ],
)
def test_parse_tool_call_errors(text, error):
    call = C.parse_tool_call(text)
    assert call.command is None and error in call.error and not call.final


def test_no_tool_call_is_a_final_answer():
    assert C.parse_tool_call("The file is written.").final


def test_tool_call_text_round_trips():
    cmd = "printf \"%s\\n\" 'a' | tee /tmp/ü"
    assert C.parse_tool_call(C.tool_call_text(cmd)).command == cmd
