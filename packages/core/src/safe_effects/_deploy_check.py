"""What a deploy checks before its workers send: settings that only show at the first lost answer.

A Stripe key that cannot read events, an SES configuration set that publishes nothing, a SendGrid webhook that
posts elsewhere: each leaves a lost answer unknown, and nothing says so until one is lost. An adapter that can
ask its provider offers an optional ``deploy_check(env)`` hook, which ``safe-effects check`` runs with the
environment the reconciler would run with. It reads, and sends nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DeployCheck:
    """One subject's findings: what was asked and found right, what is wrong, and what could not be asked."""

    subject: str  # "store", or a provider's name
    checked: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()  # each names what it would leave unknown (or refused), and what to change
    unchecked: tuple[str, ...] = ()  # each says what to set so that it can be checked

    @property
    def ok(self) -> bool:
        return not self.problems


def deploy_check_of(adapter: object, provider: str, env: Mapping[str, str]) -> DeployCheck:
    """The adapter's own ``deploy_check(env)``, or a finding that it offers none; a hook that raises is a
    problem named by its error, never a pass."""
    hook = getattr(adapter, "deploy_check", None)
    if not callable(hook):
        return DeployCheck(provider, unchecked=(f"the {provider} adapter offers no deploy check",))
    try:
        found = hook(env)
    except Exception as error:  # a provider outage or an adapter bug: the operator needs its name, not a pass
        return DeployCheck(provider, problems=(f"the check itself failed: {type(error).__name__}: {error}",))
    if not isinstance(found, DeployCheck):
        raise TypeError(f"the {provider} adapter's deploy_check returned {type(found).__name__}, not a DeployCheck")
    return found
