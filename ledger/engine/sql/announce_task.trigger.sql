-- After every insert into django-q2's queue table, one notification per statement
-- (ledger_announce_task; PostgreSQL folds identical ones of a transaction into one).
-- Made by migration 0028.

CREATE TRIGGER ledger_announce_task AFTER INSERT ON public.django_q_ormq FOR EACH STATEMENT EXECUTE FUNCTION ledger_announce_task();
