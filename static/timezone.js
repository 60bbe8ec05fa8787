// Tells the console the browser's time zone, so that it shows times in it (opsconsole.middleware.
// TimeZoneMiddleware reads the cookie). Set again whenever the zone changes (a laptop that travelled).
(function () {
  "use strict";
  var zone;
  try {
    zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  } catch (e) {
    return;
  }
  if (!zone || !/^[A-Za-z0-9_+\-\/]+$/.test(zone)) {
    return;
  }
  var current = document.cookie.split("; ").filter(function (c) { return c.indexOf("tz=") === 0; })[0];
  if (current === "tz=" + zone) {
    return;
  }
  var secure = window.location.protocol === "https:" ? "; Secure" : "";
  document.cookie = "tz=" + zone + "; path=/; max-age=31536000; SameSite=Lax" + secure;
}());
