"""autoscale: scale replicas to keep observed latency inside the user's SLOs (pure core).

`decide(policy, observation, history, now) -> Decision` is the whole contract; the controller
gathers the inputs, applies `desired_replicas` and records the decision into History. Nothing
here does I/O or reads the clock, so every behaviour is tested with plain data and virtual time
(see `simulate` for whole load traces).
"""

from shardwise.autoscale.decision import Decision, Direction, decide
from shardwise.autoscale.history import History, Record
from shardwise.autoscale.observation import Observation
from shardwise.autoscale.policy import (
    Policy,
    PolicyError,
    SloTargets,
    StepLimit,
    parse_duration_ms,
    policy_from_spec,
)

__all__ = [
    "Decision",
    "Direction",
    "History",
    "Observation",
    "Policy",
    "PolicyError",
    "Record",
    "SloTargets",
    "StepLimit",
    "decide",
    "parse_duration_ms",
    "policy_from_spec",
]
