// The console's only script (progressive: every page works without it).
// Forms marked data-confirm ask before they are sent; times are shown in local time.
"use strict";
document.addEventListener("submit", (event) => {
  const question = event.target.dataset && event.target.dataset.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
});
document.addEventListener("DOMContentLoaded", () => {
  for (const cell of document.querySelectorAll("[data-time]")) {
    const seconds = parseFloat(cell.dataset.time);
    if (!Number.isNaN(seconds)) {
      cell.title = cell.textContent + " UTC";
      cell.textContent = new Date(seconds * 1000).toLocaleString();
    }
  }
});
