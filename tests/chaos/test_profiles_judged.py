"""Every chaos profile, the whole pipeline, judged: GSM8K rollouts through verl's agent loop and the project's tools
on an in-loop emulator in virtual time, then the three judges on what happened.

The harness tools must pass every judge under every profile: no fault shown to the model as program output, reward
unchanged (except where the profile makes it impossible: a ten-minute outage outlasts any sensible retry budget, and
the test declares the loss), Retry-After honoured with jitter, retries within budget, no blind re-create, in-flight
within the tool's rate limit, no sandbox leaked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("verl", reason="needs the [verl] extra")

from emulator.faults import profile_names
from harness.chaos.audit import audit_rollout
from harness.chaos.judges import ChaosJudge
from harness.gsm8k.data import BUNDLED_PROBLEMS, load_problems
from harness.rollout.job import RolloutOptions, RolloutResult, run_rollout
from harness.validate import validate_dir

PROBLEMS = len(load_problems(BUNDLED_PROBLEMS))  # each problem once: every program, hence every chain, is distinct
#: Profiles whose faults are keyed to plan time: the model is given slow turns so the rollout spans the window.
TIMED = {"outage": 45.0, "brownout": 45.0}
#: Profiles under which losing reward is the honest outcome, declared.
LOSSY = {"outage"}
#: The tools' rate limits in the fixture configs: the in-flight cap the sandbox must see.
CAPS = {"sandbox-fusion": ("sandbox_fusion.run_code", 10), "daytona": ("daytona", 32)}


def _rollout(profile: str, tmp_path: Path) -> RolloutResult:
    backend = "daytona" if profile.startswith("daytona") else "sandbox-fusion"
    options = RolloutOptions(
        trajectories=PROBLEMS,
        out=tmp_path / profile,
        backend=backend,
        faults=profile,
        virtual_time=True,
        generation_latency=TIMED.get(profile, 0.5),
    )
    return run_rollout(options)


@pytest.mark.parametrize("profile", profile_names())
def test_tools_pass_every_judge(profile: str, tmp_path: Path) -> None:
    result = _rollout(profile, tmp_path)
    assert result.errors == 0
    assert validate_dir(result.dump_path.parent).ok
    judge = ChaosJudge.of(result.emulator)

    audit = audit_rollout(result, result.emulator.journal, expect_reward_loss=profile in LOSSY)
    audit.assert_ok()
    judge.assert_compliant(max_attempts=4)
    route, cap = CAPS[result.options.backend]
    judge.assert_invariants(limits={route: cap})

    if profile in LOSSY:  # the outage really hit and really cost reward, shown honestly
        assert result.infra_faults_shown > 0 and result.mean_reward < 1.0
    else:
        assert result.mean_reward == result.offline_mean_reward
    if profile in TIMED:
        assert result.rollout_s > 60.0  # virtual seconds: the rollout reached the profile's window


def test_vefaas_gateway_costs_no_reward(tmp_path: Path) -> None:
    """The issue's bar: reward under the gateway's 429s and 504s equals reward on a calm service."""
    calm, gateway = _rollout("calm", tmp_path), _rollout("vefaas-gateway", tmp_path)
    assert gateway.faults_injected > 0 and gateway.retried_requests > 0
    assert [t.score for t in gateway.trajectories] == [t.score for t in calm.trajectories]
