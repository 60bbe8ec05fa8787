// The dashboard refreshes itself (htmx swaps in a new #dashboard every few seconds): keep the
// <details> a person opened open across the swap, instead of snapping them shut under them.
(function () {
  var open = [];
  document.body.addEventListener("htmx:beforeSwap", function (event) {
    if (event.detail.target.id !== "dashboard") return;
    open = Array.prototype.map.call(event.detail.target.querySelectorAll("details[open][id]"),
                                    function (details) { return details.id; });
  });
  document.body.addEventListener("htmx:afterSwap", function () {
    open.forEach(function (id) {
      var details = document.getElementById(id);
      if (details) details.open = true;
    });
    open = [];
  });
})();
