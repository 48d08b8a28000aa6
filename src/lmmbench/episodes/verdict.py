"""The equivalence verdicts of an episodic run: against its serial run (``--compare-serial``) and against another
run's traces (``--reference``).

``--compare-serial`` (criterion): the run is **equivalent** to the serial evaluation when (1) every batched call,
recomputed one request at a time on the same recorded inputs, agrees within the dtype's tolerance
(``episodes.batch_check``) and (2) every episode has the same success and step count as in the closed-loop serial
run. Either failing makes it **not equivalent**, naming the first call that disagrees (episode, step, slot) or the
first episode whose outcome differs; an action check that could not finish (a memory that cannot be copied, a
request that raises alone) leaves it **undecided**. The two halves are reported apart: in a closed loop a tiny
action difference may legitimately move later observations, so the traces' largest difference is shown, not judged.
When every episode ended alike (the same success and step count: all at ``--max-steps``, all failed) equal outcomes
prove nothing, and the verdict says the outcomes cannot discriminate.

``--reference`` (criterion): the same episodes have the same success and step count, and the traces agree (float
actions within the dtype's tolerance, token ids exactly). It cannot recompute anything: the reference run's inputs
are not recorded.

A "not equivalent" verdict makes the command exit ``core.exit_codes.NOT_EQUIVALENT``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["outcomes_discriminate", "reference_verdict", "serial_verdict", "verdict_text"]


def outcomes_discriminate(reference: Mapping[str, Any], max_steps: int | None = None) -> tuple[bool, str | None]:
    """Whether the reference's outcomes can tell runs apart: False (with why) when every episode ended alike."""
    ends = {(o.success, o.steps) for o in reference.values()}
    if len(ends) != 1:
        return True, None
    ((success, steps),) = ends
    how = {True: "succeeded", False: "failed", None: "ended without a success verdict"}[success]
    at = " at --max-steps" if max_steps is not None and steps == max_steps else ""
    return False, (f"every one of the {len(reference)} episode(s) {how} after {steps} steps{at}: equal outcomes "
                   "cannot discriminate")


def _outcome_part(cmp: dict[str, Any], discriminates: bool, why: str | None) -> dict[str, Any]:
    mismatches = cmp["outcome_mismatches"]
    return {"episodes_compared": cmp["episodes_compared"], "same_outcomes": cmp["same_outcomes"],
            "mismatches": mismatches, "first_mismatch": mismatches[0] if mismatches else None,
            "discriminate": discriminates, "cannot_discriminate": why,
            "same_transcripts": cmp.get("same_transcripts"),
            "first_token_divergence": cmp.get("first_token_divergence"),
            "closed_loop_max_action_abs_diff": cmp.get("max_action_abs_diff"),
            "closed_loop_max_action_abs_diff_text": cmp.get("max_action_abs_diff_text")}


def _mismatch_text(m: dict[str, Any]) -> str:
    return (f"episode {m['episode']} success {m['success'][0]} vs {m['success'][1]}, steps {m['steps'][0]} vs "
            f"{m['steps'][1]}")


def serial_verdict(actions: dict[str, Any] | None, cmp: dict[str, Any], serial: Mapping[str, Any],
                   max_steps: int | None = None) -> dict[str, Any]:
    """The ``--compare-serial`` verdict from the batch check's report (``actions``) and the outcome comparison
    ``cmp`` (``compare.compare_runs(run, serial)``)."""
    discriminates, why = outcomes_discriminate(serial, max_steps)
    outcomes = _outcome_part(cmp, discriminates, why)
    reasons: list[str] = []
    first = (actions or {}).get("first_disagreement")
    if actions is not None and actions.get("agree") is False and first is not None:
        what = f" ({first['mismatch']})" if first.get("mismatch") else ""
        reasons.append(f"{first['kind']} call {first['call']} (episode {first['episode']}, step {first['step']}, "
                       f"slot {first['slot']}) differs from the same request alone by {first['rel_diff']:.3g} "
                       f"relative{what} (tolerance {first['tolerance']:g})")
    if not cmp["same_outcomes"]:
        reasons.append(f"{len(cmp['outcome_mismatches'])} episode(s) end otherwise than serially, first "
                       + _mismatch_text(cmp["outcome_mismatches"][0]))
    if reasons:
        verdict = "not equivalent"
    elif actions is None or actions.get("agree") is None:
        verdict = "undecided"
        reasons.append((actions or {}).get("error") or "no action check ran")
    else:
        verdict = "equivalent"
    return {"verdict": verdict, "criterion": "batched calls recomputed one request at a time agree within the "
            "dtype's tolerance, and every episode's success and steps equal the serial run's",
            "reasons": reasons, "actions": actions, "outcomes": outcomes}


def reference_verdict(cmp: dict[str, Any], reference: Mapping[str, Any],
                      max_steps: int | None = None) -> dict[str, Any]:
    """The ``--reference`` verdict from ``compare.compare_runs(run, reference, tolerance)``."""
    discriminates, why = outcomes_discriminate(reference, max_steps) if reference else (False, "no episodes")
    outcomes = _outcome_part(cmp, discriminates, why)
    reasons: list[str] = []
    if not cmp["episodes_compared"]:
        return {"verdict": "undecided", "reasons": ["the reference holds none of this run's episodes"],
                "outcomes": outcomes, "traces": cmp}
    if not cmp["same_outcomes"]:
        reasons.append(f"{len(cmp['outcome_mismatches'])} episode(s) end otherwise than in the reference, first "
                       + _mismatch_text(cmp["outcome_mismatches"][0]))
    if cmp.get("actions_within_tolerance") is False:
        reasons.append(f"traces differ by up to {cmp['max_action_abs_diff']:.3g} (tolerance {cmp['tolerance']:g})")
    if cmp.get("first_token_divergence"):
        reasons.append(f"tokens diverge first at {cmp['first_token_divergence']}")
    return {"verdict": "not equivalent" if reasons else "equivalent",
            "criterion": f"same success and steps per episode, traces within {cmp['tolerance']:g} (float) or equal "
                         "(token ids)", "reasons": reasons, "outcomes": outcomes, "traces": cmp}


def verdict_text(against: str, verdict: dict[str, Any]) -> str:
    """One line: the verdict against ``against`` (serial run / reference), its basis and its caveat."""
    head = f"{verdict['verdict']} to the {against}"
    if verdict["verdict"] != "equivalent":
        return f"{head}: {'; '.join(verdict['reasons'])}"
    parts: list[str] = []
    actions = verdict.get("actions")
    if actions is not None:
        recomputed = actions["action_calls_recomputed"] + actions["planning_calls_recomputed"]
        parts.append(f"{recomputed} batched call(s) ({actions['requests_recomputed']} requests) recomputed one at a "
                     f"time agree within {actions['rtol']:g} relative ({actions['dtype']}; largest "
                     f"{actions['max_rel_diff']:.2g})")
        if not recomputed:
            parts[-1] = "no call had more than one request (nothing batched to recompute)"
    outcomes = verdict["outcomes"]
    parts.append(f"same outcomes on {outcomes['episodes_compared']} episode(s)"
                 + (f" ({outcomes['cannot_discriminate']})" if outcomes["cannot_discriminate"] else ""))
    return f"{head}: {'; '.join(parts)}"
