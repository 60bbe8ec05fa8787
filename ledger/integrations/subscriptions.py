"""Saving subscriptions (``ledger.models.Subscription``): the one service the integrations file and
the admin both go through. A subscription is checked whole (every problem, each saying where) and
refused whole; a saved one is audited in its workspace and read by this process's announcer at once
(``ledger.core.announcements``; other processes within its ``CACHE_SECONDS``)."""

import os
import re

from ledger.actions import egress, secret_names
from ledger.core import announcements
from ledger.core.transitions import save_audited
from ledger.integrations import signatures
from ledger.integrations.saving import ENV_NAME, ConfigurationRefused
from ledger.integrations.saving import SLUG as NAME
from ledger.models import SourceScheme, Subscription
from ledger.models.subscriptions import EVENTS

URL = re.compile(r"https?://[^\s/?#]+(/[^\s#]*)?")


class SubscriptionRefused(ConfigurationRefused):
    """A subscription that would not work: ``problems`` says each thing, and where."""


def save_subscription(subscription: Subscription, *, actor: str) -> Subscription:
    """Save ``subscription`` after checking it would work, audited in its workspace."""
    if problems := subscription_problems(subscription):
        raise SubscriptionRefused(problems)
    state = "active" if subscription.active else "inactive"
    save_audited(
        subscription,
        actor=actor,
        noun="subscription",
        workspace=subscription.workspace,
        message=f"subscription {subscription.name} ({state}): {', '.join(subscription.events)} to {subscription.url}",
    )
    announcements.clear_cache()
    return subscription


def subscription_problems(subscription: Subscription) -> list[str]:
    """What would keep ``subscription`` from working, each problem saying where."""
    problems = []
    if not isinstance(subscription.name, str) or not NAME.fullmatch(subscription.name):
        problems.append("name: letters, digits, - and _, at most 50")
    url = subscription.url
    if not isinstance(url, str) or len(url) > 500 or not URL.fullmatch(url):
        problems.append("url: an http:// or https:// URL, at most 500 characters")
    elif problem := egress.destination_problem(url):
        problems.append(f"url: {problem} (refused by the egress policy, {egress.WHERE})")
    events = subscription.events
    if not isinstance(events, list) or not events or not all(isinstance(event, str) for event in events):
        problems.append(f"events: a list of one or more of {', '.join(EVENTS)}")
    elif unknown := [event for event in events if event not in EVENTS]:
        problems.append(f"events: {', '.join(unknown)} is not an event (known: {', '.join(EVENTS)})")
    elif len(set(events)) != len(events):
        problems.append("events: an event is listed twice")
    secret_env = subscription.secret_env
    if not isinstance(secret_env, str) or not ENV_NAME.fullmatch(secret_env):
        problems.append("secret_env: the name of an environment variable (A-Z, 0-9, _), not the secret itself")
    elif subscription.workspace_id and (problem := secret_names.name_problem(subscription.workspace, secret_env)):
        problems.append(f"secret_env: {problem}")
    if not isinstance(subscription.active, bool):
        problems.append("active: true or false")
    return problems


def secret_status(subscription: Subscription) -> str:
    """Whether the secret a subscription names is set here (never its value)."""
    if secret_names.name_problem(subscription.workspace, subscription.secret_env):
        return "not this workspace's variable, rename it"
    value = os.environ.get(subscription.secret_env, "")
    if not value:
        return "missing"
    usable = value.startswith("whsec_") and signatures.usable_secret(SourceScheme.STANDARD_WEBHOOKS, value)
    return "set" if usable else "set, but not a whsec_ secret"
