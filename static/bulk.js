// The queue's "select all on this page" box (opsconsole.console.bulk): ticks or clears every row's
// box that belongs to the form it names. A file of its own: the content security policy refuses
// inline scripts.
document.addEventListener("change", (event) => {
  const all = event.target.closest("input[data-select-all]");
  if (!all) return;
  const boxes = document.querySelectorAll(`input[type="checkbox"][form="${all.dataset.selectAll}"]`);
  boxes.forEach((box) => { box.checked = all.checked; });
});
// "Select all N matching" ticks this page's rows too, so what is selected shows.
document.addEventListener("change", (event) => {
  const all = event.target.closest("input[data-all-matching]");
  if (!all || !all.checked) return;
  document.querySelectorAll(`input[type="checkbox"][form="${all.form.id}"], input[data-select-all="${all.form.id}"]`).forEach((box) => { box.checked = true; });
});
