// Progressive enhancement only: a running saga's page reloads itself every few seconds.
(function () {
  var live = document.querySelector("[data-live]");
  if (live) {
    setTimeout(function () { window.location.reload(); }, 1000 * Number(live.getAttribute("data-live")));
  }
})();
