// The console's few behaviours beyond htmx. A live refresh swaps a block every few seconds: a <details> the reader
// opened (it has an id) stays open across the swap.
(function () {
  let open = [];
  document.addEventListener("htmx:beforeSwap", (e) => {
    open = Array.from(e.detail.target.querySelectorAll("details[id][open]"), (d) => d.id);
  });
  document.addEventListener("htmx:afterSettle", () => {
    open.forEach((id) => { const d = document.getElementById(id); if (d) d.open = true; });
    open = [];
  });
})();
