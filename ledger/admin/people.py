"""People in the admin: turning a person off goes through ``accounts.deactivate_person``, so their
API tokens are revoked in the same transaction (the Django admin would only clear ``is_active``).

Imported by ``ledger.admin``; django.contrib.auth's admin registers the user model first, and this
registers it again with the same admin plus that one rule.
"""

from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin

from ledger.core import accounts

User = get_user_model()


class PersonAdmin(UserAdmin):
    actions = ["deactivate_people"]
    list_display = (*UserAdmin.list_display, "is_active")

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        if "is_active" in form.base_fields:
            form.base_fields["is_active"].help_text = (
                "Untick to offboard: the person can no longer log in, and every API token of theirs is "
                "revoked (audited). Ticking it again revives no token."
            )
        return form

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        # The admin's change view is one transaction: the save and the revocation commit together.
        if change and "is_active" in form.changed_data and not obj.is_active:
            revoked = accounts.deactivate_person(obj, actor=request.user.get_username())
            self.message_user(
                request, f"Deactivated {obj.get_username()}; {accounts.tokens_revoked(revoked)}.", messages.WARNING
            )

    @admin.action(description="Deactivate the selected people and revoke their API tokens", permissions=["change"])
    def deactivate_people(self, request, queryset):
        people = list(queryset)
        revoked = sum(accounts.deactivate_person(person, actor=request.user.get_username()) for person in people)
        names = ", ".join(person.get_username() for person in people)
        self.message_user(request, f"Deactivated {names}; {accounts.tokens_revoked(revoked)}.", messages.SUCCESS)


if admin.site.is_registered(User):
    admin.site.unregister(User)
admin.site.register(User, PersonAdmin)
