"""The admin's date and time formats, as the console writes times.

``console_time.when_text`` writes "2026-12-06 00:29:58 UTC" in the person's time zone (which
``TimeZoneMiddleware`` activates for the admin too); Django's own English format would make the
admin's "Dec. 6, 2026, 12:29 a.m."."""

DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s T"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
