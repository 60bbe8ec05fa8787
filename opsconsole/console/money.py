"""Money as people read it: ``25.00 EUR`` rather than ``amount_cents 2500``.

An action names its money fields (``ActionDefinition.money_fields``: an amount, an integer in its
currency's minor units, and the field naming the currency). Most currencies have two decimals;
``MINOR_UNITS`` lists the ISO 4217 currencies with another number. Only presentation: what is
stored, fingerprinted and sent stays the integer, and a value masked for this person
(``ledger.core.privacy``) or redacted is no number, so it is shown as it is.
"""

from decimal import Decimal

# ISO 4217 currencies whose minor unit is not a hundredth (every other code has two decimals).
MINOR_UNITS = {
    **dict.fromkeys(
        [
            "BIF",
            "CLP",
            "DJF",
            "GNF",
            "ISK",
            "JPY",
            "KMF",
            "KRW",
            "PYG",
            "RWF",
            "UGX",
            "UYI",
            "VND",
            "VUV",
            "XAF",
            "XOF",
            "XPF",
        ],
        0,
    ),
    **dict.fromkeys(["BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"], 3),
    **dict.fromkeys(["CLF", "UYW"], 4),
}


def format_money(amount, currency) -> str | None:
    """``2500, "EUR"`` -> ``"25.00 EUR"``, ``2500, "JPY"`` -> ``"2,500 JPY"``; None when ``amount`` is
    not a whole number of minor units (masked, redacted) or ``currency`` is no three-letter code."""
    if isinstance(amount, bool) or not isinstance(amount, int):
        return None
    if not (isinstance(currency, str) and len(currency) == 3 and currency.isascii() and currency.isupper()):
        return None
    digits = MINOR_UNITS.get(currency, 2)
    return f"{Decimal(amount).scaleb(-digits):,.{digits}f} {currency}"


def shown_payload(payload, definition) -> dict:
    """``payload`` (already masked for the person) with each money amount written with its currency."""
    fields = getattr(definition, "money_fields", None)
    if not fields or not isinstance(payload, dict):
        return payload
    shown = dict(payload)
    for amount, currency in fields.items():
        if amount in payload:
            shown[amount] = format_money(payload[amount], payload.get(currency)) or payload[amount]
    return shown


def shown_differences(differences: list[dict], definition, *, recorded: dict, incoming: dict) -> list[dict]:
    """A conflict's differences (already masked) with money amounts written in the currency of their
    side: the recorded payload's and the incoming one's."""
    fields = getattr(definition, "money_fields", None)
    if not fields:
        return differences
    shown = []
    for difference in differences:
        currency = fields.get(difference.get("field"))
        if currency is not None:
            difference = difference | {
                side: format_money(difference.get(side), payload.get(currency) if isinstance(payload, dict) else None)
                or difference.get(side)
                for side, payload in (("recorded", recorded), ("incoming", incoming))
            }
        shown.append(difference)
    return shown
