-- What an API token resolved to, as one digest: the token's row, its workspace's, its person's
-- (NULL for a machine's token) and the person's role in the workspace. Any change to any of them
-- (revoked, scopes, a person deactivated, demoted or removed, a workspace changed or deleted)
-- changes it or leaves no row to digest.
-- Called by: ledger.core.accounts.authenticate_token (the digest the API's token cache keeps) and
-- ledger_token_unchanged (the same, at the reservation). Made by migration 0055.

CREATE OR REPLACE FUNCTION public.ledger_token_digest(token ledger_apitoken, workspace ledger_workspace, person auth_user, role text)
 RETURNS text
 LANGUAGE sql
 STABLE
AS $function$SELECT md5(ROW(token, workspace, person, role)::text)$function$;
