// Below 600 px the queue's filters and action bar start folded (details.fold, rendered open), so the
// first row is on the first screen; a tap unfolds them. The state tabs are one line that scrolls
// sideways there: the current one is scrolled into view. A file of its own: the content security
// policy refuses inline scripts.
document.addEventListener("DOMContentLoaded", () => {
  if (!window.matchMedia("(max-width: 600px)").matches) return;
  document.querySelectorAll("details.fold").forEach((details) => { details.open = false; });
  const current = document.querySelector(".state-tabs a[aria-current='page']");
  const tabs = current && current.closest("ul");
  if (tabs) tabs.scrollLeft = current.parentElement.offsetLeft - tabs.offsetLeft;
});
