-- The check, inside a reservation, that the API token a request was let in by is still what the
-- process's cache says it resolved to: live, with the same scopes, workspace, person and role, the
-- person still active and a member (ledger.core.accounts.authenticate_token's conditions, the same
-- joins). Raises SQLSTATE OC401 (ledger.core.accounts.TOKEN_CHANGED) when not: the reservation then
-- writes nothing and the API looks the token up again, answering as it would have.
-- Called by: ledger_reserve and ledger_reserve_one, first, when their request names a token.
-- Made by migration 0055.

CREATE OR REPLACE FUNCTION public.ledger_token_unchanged(checked jsonb)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM FROM ledger_apitoken t
    JOIN ledger_workspace w ON w.id = t.workspace_id
    LEFT JOIN auth_user u ON u.id = t.user_id
    LEFT JOIN ledger_membership m ON m.user_id = t.user_id AND m.workspace_id = t.workspace_id
    WHERE t.token_hash = checked->>'hash' AND t.revoked_at IS NULL
      AND (t.user_id IS NULL OR (u.is_active AND (u.is_superuser OR m.id IS NOT NULL)))
      AND ledger_token_digest(t, w, u, m.role) = checked->>'digest';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the API token changed since this process read it' USING ERRCODE = 'OC401';
    END IF;
END
$function$;
