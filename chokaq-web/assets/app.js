// chokaq dashboard: live refresh of the overview and confirmation of irreversible actions.
// Every page works without this script; it only adds to them.
(function () {
  "use strict";

  // Forms with data-confirm ask first; the answer goes to the server as confirm=yes.
  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    var question = form.getAttribute && form.getAttribute("data-confirm");
    if (!question) return;
    if (!window.confirm(question)) { ev.preventDefault(); return; }
    var field = form.querySelector("input[name=confirm]");
    if (field) field.value = "yes";
  });

  // "Select all" on the dead-letter list.
  document.addEventListener("change", function (ev) {
    if (ev.target.id !== "select-all") return;
    var boxes = document.querySelectorAll("input[name=ids]");
    for (var i = 0; i < boxes.length; i++) boxes[i].checked = ev.target.checked;
  });

  // The overview's live section: fetch the server-rendered fragment again every few seconds.
  function live() {
    var section = document.getElementById("live");
    if (!section) return;
    var src = section.getAttribute("data-src");
    var every = parseInt(section.getAttribute("data-every"), 10) || 1500;
    var status = document.getElementById("live-status");
    var busy = false;
    function tick() {
      if (busy || document.hidden) return;
      busy = true;
      fetch(src, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) {
          if (!r.ok) throw new Error("HTTP " + r.status);
          return r.text();
        })
        .then(function (html) {
          section.innerHTML = html;
          if (status) status.textContent = "live · updated " + new Date().toLocaleTimeString();
        })
        .catch(function (e) {
          if (status) status.textContent = "live update failed (" + e.message + "); retrying";
        })
        .then(function () { busy = false; });
    }
    if (status) status.textContent = "live";
    window.setInterval(tick, every);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", live); else live();
})();
