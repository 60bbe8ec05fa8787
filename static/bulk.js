// The queue's "select all on this page" box (opsconsole.console.bulk): ticks or clears every row's
// box that belongs to the form it names. A file of its own: the content security policy refuses
// inline scripts.
document.addEventListener("change", (event) => {
  const all = event.target.closest("input[data-select-all]");
  if (!all) return;
  const boxes = document.querySelectorAll(`input[type="checkbox"][form="${all.dataset.selectAll}"]`);
  boxes.forEach((box) => { box.checked = all.checked; });
});
