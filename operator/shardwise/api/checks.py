"""String checks written once and run twice: as CEL in the CRD (the API server refuses) and in
Python (the pydantic models, so `shardwise plan` on an offline file and the operator say the same).

A check is a regular expression and the sentence to show when a value fails it. The expressions
keep to the syntax RE2 (CEL's `matches`) and Python's `re` read alike: explicit ASCII classes
instead of `\\w`/`\\s` (Unicode in Python, ASCII in RE2), and whole-value patterns written as
bodies (see `Check`), because Python's `$` also matches before a final newline and RE2's does not.

Checks are ordered: the value gets the message of the first one it fails. In CEL each rule is
guarded by the problems before it (`earlier problem || this rule`), so the API server too returns
that one message, not a pile of consequences of the same mistake.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

# Characters that are never part of a name, path or reference: ASCII whitespace.
WHITESPACE = r"[ \t\n\r\f\v]"


def anchored(body: str) -> str:
    """A pattern that matches the whole value only (RE2's `$` is the end of text)."""
    return f"^(?:{body})$"


def cel_string(text: str) -> str:
    """A CEL single-quoted string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass(frozen=True)
class Check:
    """A value fails when `bad` matches somewhere in it, when it is entirely `bad_whole`, when it is
    not entirely `good`, or when `predicate` (with `predicate_cel`, the same test in CEL) says so.

    Whole-value patterns are bodies: CEL anchors them with `anchored`, Python uses `re.fullmatch`
    (Python's `$` would also match before a final newline). `bad` must not use `$` for that reason.
    `message` is what both sides say; `describe`, when set, builds the sentence from the value in
    Python, and `message_cel` is that sentence as a CEL expression (messageExpression). `only_if`
    limits the check to values that pattern matches.
    """

    message: str
    bad: str | None = None
    bad_whole: str | None = None
    good: str | None = None
    only_if: str | None = None
    describe: Callable[[str], str] | None = None
    message_cel: str | None = None
    predicate: Callable[[str], bool] | None = None
    predicate_cel: str | None = None

    def fails(self, value: str) -> bool:
        # re caches compiled patterns; search() is what CEL's matches() does (unanchored).
        if self.only_if is not None and re.search(self.only_if, value) is None:
            return False
        return bool(
            (self.predicate is not None and self.predicate(value))
            or (self.bad is not None and re.search(self.bad, value))
            or (self.bad_whole is not None and re.fullmatch(self.bad_whole, value))
            or (self.good is not None and re.fullmatch(self.good, value) is None)
        )

    def problem_cel(self) -> str:
        """CEL that is true when `self` (the string the rule is on) fails this check."""
        parts = [] if self.predicate_cel is None else [self.predicate_cel]
        if self.bad is not None:
            parts.append(f"self.matches({cel_string(self.bad)})")
        if self.bad_whole is not None:
            parts.append(f"self.matches({cel_string(anchored(self.bad_whole))})")
        if self.good is not None:
            parts.append(f"!self.matches({cel_string(anchored(self.good))})")
        problem = parts[0] if len(parts) == 1 else "(" + " || ".join(parts) + ")"
        if self.only_if is not None:
            return f"(self.matches({cel_string(self.only_if)}) && {problem})"
        return problem


def first_problem(checks: Sequence[Check], value: str) -> str | None:
    """The message of the first check `value` fails, or None."""
    for check in checks:
        if check.fails(value):
            return check.describe(value) if check.describe else check.message
    return None


def cel_rules(checks: Sequence[Check]) -> list[dict[str, Any]]:
    """One x-kubernetes-validations rule per check, each passing when an earlier check already
    failed (the API server then reports only the first problem, as `first_problem` does)."""
    rules = []
    for index, check in enumerate(checks):
        earlier = [c.problem_cel() for c in checks[:index]]
        rule = " || ".join([*earlier, f"!({check.problem_cel()})"])
        entry: dict[str, Any] = {"rule": rule, "message": check.message}
        if check.message_cel:
            entry["messageExpression"] = check.message_cel
        rules.append(entry)
    return rules


def validator(checks: Sequence[Check]) -> Callable[[str], str]:
    """A pydantic AfterValidator running `checks` (ValueError with the first problem)."""
    def validate(value: str) -> str:
        problem = first_problem(checks, value)
        if problem is not None:
            raise ValueError(problem)
        return value
    return validate
