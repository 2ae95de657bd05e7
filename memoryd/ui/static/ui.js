// Progressive enhancement only: every page works without it.
// "/" focuses the search box; a message linked by #m<index> is opened if folded.
document.addEventListener("keydown", (event) => {
  if (event.key !== "/" || event.target.closest("input, textarea, select")) return;
  const box = document.querySelector("input[type=search]");
  if (box) { event.preventDefault(); box.focus(); }
});
window.addEventListener("DOMContentLoaded", () => {
  const target = location.hash && document.getElementById(location.hash.slice(1));
  const folded = target && target.querySelector("details");
  if (folded) folded.open = true;
});
