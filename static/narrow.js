// Below 600 px the queue's filters and action bar start folded (details.fold, rendered open), so the
// first row is on the first screen; a tap unfolds them. A file of its own: the content security
// policy refuses inline scripts.
document.addEventListener("DOMContentLoaded", () => {
  if (!window.matchMedia("(max-width: 600px)").matches) return;
  document.querySelectorAll("details.fold").forEach((details) => { details.open = false; });
});
