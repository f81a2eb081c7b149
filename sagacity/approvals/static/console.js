// Progressive enhancement only: a running saga's page reloads itself every few seconds.
(function () {
  var live = document.querySelector("[data-live]");
  if (live) {
    setTimeout(function () { window.location.reload(); }, 1000 * Number(live.getAttribute("data-live")));
  }
})();

// "Approve with changes": what the edited arguments change, shown before they are sent.
(function () {
  var form = document.querySelector("form[data-edit]");
  if (!form) { return; }
  var area = form.querySelector("textarea[name=args]");
  var list = form.querySelector("[data-testid=changes]");
  var proposed = {};
  try { proposed = JSON.parse(area.getAttribute("data-proposed") || "{}") || {}; } catch (e) { proposed = {}; }
  function show() {
    list.textContent = "";
    var edited;
    try { edited = JSON.parse(area.value); } catch (e) {
      var bad = document.createElement("li");
      bad.textContent = "not JSON yet";
      list.appendChild(bad);
      return;
    }
    var keys = Object.keys(Object.assign({}, proposed, edited || {})).sort();
    keys.forEach(function (key) {
      var before = JSON.stringify(proposed[key]), after = JSON.stringify((edited || {})[key]);
      if (before !== after) {
        var item = document.createElement("li");
        item.textContent = key + ": " + (before === undefined ? "(none)" : before) + " \u2192 " +
          (after === undefined ? "(none)" : after);
        list.appendChild(item);
      }
    });
  }
  area.addEventListener("input", show);
  show();
})();
