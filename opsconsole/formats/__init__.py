"""Date and time formats of the admin and any form Django localizes, as the console shows times."""
