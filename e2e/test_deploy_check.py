"""The operator's deployment check (`e2e/deploy_check.py`, `make deploy-check`) on the suite's
stack: every step passes on a healthy one, and a provider that sends no `groups` claim for the
second user (a Keycloak client without its group-membership mapper) fails the group share's step
with that cause, after the steps before it passed and before the ones that need it ran."""

from __future__ import annotations

import time

from devstack.oidc_provider import change_user
from e2e.deploy_check import DeployCheck, check

STEPS = [name for name, _needs, _action in DeployCheck(None, None).steps()] + ["clean up"]


def run_check(target, browser):
    said: list[str] = []
    began = time.monotonic()
    done = check(target, browser, say=said.append, unit_timeout=240, run_timeout=240)
    print("\n".join(said) + f"\n({time.monotonic() - began:.0f} s)")
    return done, "\n".join(said)


def test_every_step_of_the_deploy_check_passes_on_a_healthy_stack(target, browser):
    target.person("bob")  # skips where there is no second user
    done, said = run_check(target, browser)
    assert [(v.step, v.outcome) for v in done.verdicts] == [(step, "PASS") for step in STEPS], said
    assert said.splitlines()[-1].startswith("deploy check: PASSED"), said


def test_a_provider_without_the_groups_claim_fails_the_group_share_step_and_names_the_mapper(
    target, browser, stack
):
    bob = target.person("bob").username
    assert change_user(stack.oidc, bob, groups_claim=False)["groups_claim"] is False
    try:
        done, said = run_check(target, browser)
    finally:
        restored = change_user(stack.oidc, bob, groups_claim=True)
    assert "groups_claim" not in restored
    outcomes = {v.step: v for v in done.verdicts}
    before = STEPS[: STEPS.index("second user")]
    assert [outcomes[step].outcome for step in before] == ["PASS"] * len(before), said
    failed = outcomes["second user"]
    assert failed.outcome == "FAIL", said
    assert f"{bob} does not see" in failed.detail and "`groups` claim" in failed.detail, said
    assert "group-membership mapper" in failed.fix, said
    # The revocation needs only the share; the second user's loss of access needs what failed.
    assert (outcomes["revoke"].outcome, outcomes["lost access"].outcome) == ("PASS", "SKIP"), said
    assert outcomes["clean up"].outcome == "PASS", said
    assert "FAIL  second user" in said and "fix: " in said
    assert said.splitlines()[-1].startswith("deploy check: FAILED at second user"), said
