"""How the tenant-isolation tests judge what an attack step reached (tests/tenant_attacks.py)."""

import json
import os

from tests.tenant_attacks import attack_step, breaches, target_environs


def row(attempt: str, detail: str, outcome: str = "succeeded") -> dict:
    return {"attempt": attempt, "outcome": outcome, "detail": detail}


def test_reading_a_targeted_pid_is_a_breach_only_when_it_is_the_target():
    targets = {"portal_pid": os.getpid()}
    secrets = target_environs(targets)
    assert secrets and "PATH=" in secrets[0]
    # In the unit's pid namespace the portal's number named one of the unit's own processes.
    unit_process = row("environ of portal_pid", "HOME=/tmp/lakeport-cu/x\0PATH=/usr/bin\0")
    assert breaches([unit_process], secrets) == []
    # Without that namespace it is the portal's own environment.
    portal = row("environ of portal_pid", open(f"/proc/{os.getpid()}/environ").read())
    assert breaches([portal], secrets) == ["environ of portal_pid revealed a secret"]


def test_any_other_attempt_that_succeeds_is_a_breach():
    assert breaches([row("database by DSN", "(12,)")], []) == ["database by DSN succeeded: (12,)"]
    assert breaches([row("database by DSN", "OperationalError: refused", "failed")], []) == []


def test_portal_settings_in_any_visible_process_are_a_breach():
    environs = {
        "7": {"PATH": "/bin", "LAKEPORT_JARS_DIR": "/jars"},
        "9": {"LAKEPORT_SECRET_KEY": "k"},
    }
    assert breaches([row("environ of every visible process", json.dumps(environs))], []) == [
        "process 9 has LAKEPORT_SECRET_KEY"
    ]
    own = {"PATH": "/bin", "LAKEPORT_DATABASE_URL": "postgresql://x"}
    assert breaches([row("environment", json.dumps(own))], []) == [
        "environment has LAKEPORT_DATABASE_URL"
    ]


def test_the_attack_step_is_code_a_step_can_hold():
    code = attack_step({"portal_pid": 1, "other_ports": [1]})["code"]
    compile(
        code, "attacks", "exec"
    )  # a step's code is a source string: no null bytes, valid Python
