// Refreshes a server-rendered fragment (data-refresh-url) every data-refresh-seconds, while the tab is visible.
// The fragment is HTML the server escaped; nothing here builds markup from data.
(function () {
  document.querySelectorAll("[data-refresh-url]").forEach(function (box) {
    var url = box.getAttribute("data-refresh-url");
    var seconds = parseFloat(box.getAttribute("data-refresh-seconds")) || 5;
    function refresh() {
      if (document.hidden) return;
      fetch(url, {credentials: "same-origin", cache: "no-store"}).then(function (answer) {
        if (answer.ok) return answer.text();
        throw new Error(String(answer.status));
      }).then(function (html) {
        // An error the reader opened stays open across the refresh (found again by its id).
        var opened = Array.prototype.map.call(box.querySelectorAll("details[open][id]"), function (d) { return d.id; });
        box.innerHTML = html;
        opened.forEach(function (id) {
          var again = document.getElementById(id);
          if (again) again.open = true;
        });
        box.removeAttribute("data-stale");
      }).catch(function () {
        box.setAttribute("data-stale", "true");
      });
    }
    setInterval(refresh, seconds * 1000);
  });
})();
