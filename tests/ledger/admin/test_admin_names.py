"""The admin names every table in English: plurals as a person writes them ("Tallies", not "Tallys")."""

import re

import pytest
from django.apps import apps
from django.contrib import admin
from django.utils.text import capfirst

OURS = [model for label in ("ledger", "reconciliation") for model in apps.get_app_config(label).get_models()]
# Names that take no plural of their own, declared so on the model.
UNCOUNTABLE = {"destination health"}


def english_plural(name: str) -> str:
    """The regular English plural of a (lower-case) noun phrase's last word."""
    if re.search(r"[^aeiou]y$", name):
        return name[:-1] + "ies"
    if re.search(r"(s|x|z|ch|sh)$", name):
        return name + "es"
    return name + "s"


@pytest.mark.parametrize("model", OURS, ids=[model.__name__ for model in OURS])
def test_every_table_has_its_english_plural(model):
    name, plural = str(model._meta.verbose_name), str(model._meta.verbose_name_plural)
    assert plural == (name if name in UNCOUNTABLE else english_plural(name))


def test_the_rule_the_check_uses_is_english():
    """Control: the rule itself, on the names the admin once got wrong and on ones it got right."""
    assert [english_plural(name) for name in ("tally", "mismatch", "delivery", "policy", "attempt", "key")] == [
        "tallies",
        "mismatches",
        "deliveries",
        "policies",
        "attempts",
        "keys",
    ]


def test_the_admin_index_says_tallies_mismatches_and_api_tokens(admin_client):
    page = admin_client.get("/admin/").content.decode()

    for title in ("Tallies", "Mismatches", "API tokens", "Request statuses", "Destination health"):
        assert f">{title}<" in page, title
    assert "Tallys" not in page
    assert "Mismatchs" not in page


def test_every_registered_table_of_ours_is_on_the_index(admin_client):
    """So the index check above covers every table the admin shows."""
    page = admin_client.get("/admin/").content.decode()
    for model in OURS:
        if admin.site.is_registered(model):
            assert f">{capfirst(model._meta.verbose_name_plural)}<" in page, model.__name__
