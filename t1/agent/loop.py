"""The multi-turn bash agent: sample a turn, run its tool call in the sandbox, append, repeat.

    traj = run_agent(task, sandbox, engine, tokenizer, cfg.agent, sampling, reward_spec)

Ids in, ids out: the prompt of turn t+1 is the prompt of turn t + the ids the engine sampled +
the glue and observation ids our loop appends (t1.agent.chat.next_prompt), so TITO's strict relation
holds by construction and nothing the model sampled is ever re-tokenized.

A turn's text is parsed for one `<tool_call>` (t1.agent.chat.parse_tool_call):
* a command   -> run in the task's persistent shell; its (capped) output is the observation;
* malformed   -> an error observation, and the loop goes on;
* no call     -> the final answer: the agent stops (COMPLETED).
Budgets end the loop as TRUNCATED: max turns, context tokens (also a turn cut because the
context was full), wall time. Then the task's verifier runs in the same sandbox and the
reward is attached (t1.verify.reward: `noop` is the task's measured no-op (passed, total), which
`reward.subtract_noop` subtracts; a result the verifier marks `tampered` scores as the no-op
would, with the reason in the metadata). Each turn keeps the engine's raw output ids
(`Turn.engine_ids`, never touched afterwards) so TITO's drift check has an independent
reference. Cancellation (the
over-sampling tail) aborts the running generation and returns ABORTED with the turns so far
(and skips the verifier); a missing routing capture aborts too (never silently dropped or
padded).

Virtual clock: a `cancel` token with a `tick` method (t1.rollout.oversample.CancelToken) is
charged what the trajectory does, in sampled-token units: each sampled token 1, each command run
TURN_COST more, a command that ran into its timeout `command_timeout_s` x TOKENS_PER_S more.
Deterministic over-sampling admits by that clock: it depends on the trajectory alone, never on
the machine's load.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass

import numpy as np

from t1.agent import chat
from t1.agent.terminal import render_terminal
from t1.agent.trajectory import Status, Trajectory, Turn
from t1.config import AgentConfig
from t1.engine.base import Engine, GenerateRequest, SamplingParams
from t1.tasks.model import Task
from t1.verify.reward import RewardSpec
from t1.verify.verifier import VERIFIER_TRIES, score_retrying

CUT_MARK = "\n[... {n} tokens of output cut ...]\n"

# The virtual clock's prices (module docstring), fitted to the agent's wall seconds of 806
# tiny-config trajectories (PPO rollouts and an evaluation, 8 workers on 2 cores): 0.0045 s per
# sampled token and 0.20 s per turn (LOG.md, 2026-12-06). Only the order they give matters.
TURN_COST = 45.0
TOKENS_PER_S = 220.0


def _tick(cancel, cost: float) -> None:
    tick = getattr(cancel, "tick", None)
    if tick is not None:
        tick(cost)


@dataclass(frozen=True)
class AgentOptions:
    """Per-run switches that are not budgets (those live in AgentConfig)."""

    require_routing: bool = True  # R³ needs every loss position's routing: abort without it
    system_prompt: str = chat.SYSTEM_PROMPT


SYSTEM_SUFFIX = "\nYou are in {workdir} inside a Linux sandbox without network access."


def system_prompt_for(task: Task, base: str = chat.SYSTEM_PROMPT) -> str:
    return base + SYSTEM_SUFFIX.format(workdir=task.workdir)


def cap_observation(tokenizer, text: str, cap_tokens: int) -> str:
    """Keep the head and tail of a long observation, in tokens, and mark the cut."""
    ids = chat.encode(tokenizer, text)
    if len(ids) <= cap_tokens:
        return text
    head, tail = ids[: cap_tokens // 2], ids[len(ids) - cap_tokens // 2 :]

    def dec(x: list[int]) -> str:
        return tokenizer.decode(x, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    return dec(head) + CUT_MARK.format(n=len(ids) - len(head) - len(tail)) + dec(tail)


def format_observation(exit_code: int, output: str, timed_out: bool) -> str:
    """The tool response the policy reads: the output as a terminal shows it (progress bars
    collapsed to their last state: t1/agent/terminal.py), then the exit code."""
    note = " (timed out, interrupted)" if timed_out else ""
    return f"{render_terminal(output).rstrip()}\n[exit code {exit_code}{note}]"


def run_agent(
    task: Task,
    sandbox,
    engine: Engine,
    tokenizer,
    cfg: AgentConfig,
    sampling: SamplingParams,
    reward: RewardSpec,
    cancel: threading.Event | None = None,
    options: AgentOptions | None = None,
    verify: bool = True,
    noop: tuple[int, int] | None = None,
) -> Trajectory:
    """Run one trajectory of `task` in an already started `sandbox`; never raises for the task."""
    options = options or AgentOptions()
    session = uuid.uuid4().hex
    glue = chat.glue_of(tokenizer)
    messages = chat.initial_messages(
        task.instruction, system_prompt_for(task, options.system_prompt)
    )
    prompt = chat.prompt_ids(tokenizer, messages)
    turns: list[Turn] = []
    status, reason = None, ""
    t0 = time.monotonic()
    routing_start = 0
    current = {"request": None}

    def _abort_current() -> None:
        if current["request"] is not None:
            engine.abort(current["request"])

    if cancel is not None and hasattr(cancel, "on_cancel"):
        cancel.on_cancel(_abort_current)
    try:
        for turn_index in range(cfg.max_turns):
            if cancel is not None and cancel.is_set():
                status, reason = (
                    Status.ABORTED,
                    "cancelled: over-sampling admitted enough trajectories",
                )
                break
            if time.monotonic() - t0 > min(cfg.wall_s, task.agent_timeout_s):
                status, reason = (
                    Status.TRUNCATED,
                    f"wall time {min(cfg.wall_s, task.agent_timeout_s):g} s",
                )
                break
            room = cfg.context_tokens - len(prompt)
            if room <= 0:
                status, reason = Status.TRUNCATED, f"context budget {cfg.context_tokens} tokens"
                break
            seed = None if sampling.seed is None else sampling.seed * 1000 + turn_index
            req = GenerateRequest(
                input_ids=list(prompt),
                sampling=SamplingParams(
                    temperature=sampling.temperature,
                    top_p=sampling.top_p,
                    max_new_tokens=min(sampling.max_new_tokens, room),
                    stop_token_ids=tuple(sampling.stop_token_ids) or (glue.im_end, glue.endoftext),
                    seed=seed,
                ),
                session_id=session,
                routing_start=routing_start,
                return_routing=options.require_routing,
            )
            current["request"] = req.request_id
            if cancel is not None and cancel.is_set():  # set between the check above and here
                current["request"] = None
                status, reason = (
                    Status.ABORTED,
                    "cancelled: over-sampling admitted enough trajectories",
                )
                break
            try:
                (res,) = engine.generate([req])
            except Exception as e:
                status, reason = Status.FAILED, f"engine error: {type(e).__name__}: {e}"
                break
            finally:
                current["request"] = None
            try:
                res.check()
            except ValueError as e:
                status, reason = Status.ABORTED, f"engine result malformed: {e}"
                break
            if options.require_routing and res.routing is None:
                status, reason = (
                    Status.ABORTED,
                    f"turn {turn_index}: the engine returned no routing capture",
                )
                break
            turn = Turn(
                prompt_ids=prompt,
                sampled_ids=res.output_ids,
                engine_ids=res.output_ids,
                logprobs=res.output_logprobs,
                routing=res.routing,
                routing_start=res.routing_start,
                finish_reason=res.finish_reason,
            )
            turns.append(turn)
            _tick(cancel, len(res.output_ids))
            if res.finish_reason == "abort":
                status, reason = Status.ABORTED, "cancelled during generation (over-sampling tail)"
                break
            call = chat.parse_tool_call(chat.turn_text(tokenizer, res.output_ids))
            turn.command, turn.error = call.command, call.error
            if (
                res.finish_reason == "length"
                and len(prompt) + len(res.output_ids) >= cfg.context_tokens
            ):
                status, reason = (
                    Status.TRUNCATED,
                    f"context budget {cfg.context_tokens} tokens (turn {turn_index} cut)",
                )
                break
            if call.final:
                status, reason = Status.COMPLETED, "final answer"
                break
            if call.error:
                observation = f"error: {call.error}"
            else:
                budget = min(
                    cfg.command_timeout_s, max(1.0, task.agent_timeout_s - (time.monotonic() - t0))
                )
                r = sandbox.exec(call.command, timeout=budget)
                observation = format_observation(r.exit_code, r.output, r.timed_out)
                _tick(
                    cancel, TURN_COST + (cfg.command_timeout_s * TOKENS_PER_S if r.timed_out else 0)
                )
            observation = cap_observation(tokenizer, observation, cfg.observation_cap_tokens)
            nxt, appended = chat.next_prompt(tokenizer, prompt, res.output_ids, observation)
            turn.appended_ids = np.asarray(appended, dtype=np.int32)
            turn.observation = observation
            routing_start = len(prompt) + len(res.output_ids) - 1
            prompt = nxt
        else:
            status, reason = Status.TRUNCATED, f"max turns {cfg.max_turns}"
    finally:
        engine.close_session(session)

    traj = Trajectory(
        task_id=task.id,
        status=status,
        turns=turns,
        reason=reason,
        metadata={
            "category": task.category,
            "difficulty": task.difficulty,
            "seconds_agent": time.monotonic() - t0,
        },
    )
    if verify and status in (Status.COMPLETED, Status.TRUNCATED):
        if cancel is not None and cancel.is_set():  # dropped anyway: skip the verifier's cost
            traj.status, traj.reason = Status.ABORTED, f"cancelled before the verifier ({reason})"
        else:
            attach_reward(traj, task, sandbox, reward, noop)
    return traj


VERIFIER_TRIES = VERIFIER_TRIES  # read at each call (tests set it)


def verify_with_retry(task: Task, sandbox, metadata: dict):
    """`score_retrying` (t1.verify.verifier: once more at twice the timeout when the verifier
    errs; an error is never rewarded). Writes `seconds_verifier` (all runs) and, after a retry,
    `verifier_tries` and `verifier_first_error` into `metadata`."""
    v, n, first, seconds = score_retrying(task, sandbox, VERIFIER_TRIES)
    metadata["seconds_verifier"] = seconds
    if n > 1:
        metadata.update({"verifier_tries": n, "verifier_first_error": first})
    return v


def attach_reward(
    traj: Trajectory,
    task: Task,
    sandbox,
    reward: RewardSpec,
    noop: tuple[int, int] | None = None,
) -> None:
    """Run the task's verifier in the agent's sandbox; attach outcomes and reward (or FAILED).

    `noop` = (passed, total) of the task with no agent action (its pool's record); required
    when `reward.subtract_noop`. A verifier result marked `tampered` scores as the no-op does
    (0 when subtracting), never what the report claims."""
    v = verify_with_retry(task, sandbox, traj.metadata)
    traj.assertions = [(a.name, a.outcome) for a in v.assertions]
    if v.error or v.total == 0:
        traj.status, traj.reason = Status.FAILED, f"verifier: {v.error or 'no assertions'}"
        return
    if reward.subtract_noop and noop is None:
        traj.status, traj.reason = (
            Status.FAILED,
            f"reward: reward.subtract_noop is on but task {task.id} ({task.path}) has no "
            "measured no-op score (its pool was built without `t1 pool --noop`)",
        )
        return
    noop_passed, noop_total = noop or (0, 0)
    passed, resolved = v.passed, v.resolved
    tampered = getattr(v, "tampered", None)
    if tampered:
        passed, resolved = min(noop_passed, v.total), False
        traj.metadata["tampered"] = tampered if isinstance(tampered, str) else "tampered"
    malformed = sum(t.error is not None for t in traj.turns)
    traj.reward = reward.score(passed, v.total, noop_passed, noop_total, malformed)
    traj.metadata.update({"passed": passed, "total": v.total, "resolved": resolved})
    if noop is not None:
        traj.metadata.update({"noop_passed": noop_passed, "noop_total": noop_total})
