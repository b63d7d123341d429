// pgworkerd dashboard: the only script, served by the app itself (the CSP allows no
// other). Two jobs: ask before an action, and keep an open page fresh.
"use strict";

// Actions: a form with data-confirm asks first; `confirmed` tells the server it was
// asked (without this script the server shows a confirmation page instead).
document.addEventListener("submit", function (event) {
  var form = event.target;
  var question = form.getAttribute("data-confirm");
  if (!question) return;
  if (!window.confirm(question)) {
    event.preventDefault();
    return;
  }
  form.elements.namedItem("confirmed").value = "1";
});

// Refresh: every data-refresh-s seconds, fetch this page again and swap its <main>.
// Bounded: paused while the tab is hidden or a field has focus, slowed down after a
// failure, and stopped after an hour (MAX_ROUNDS) or five failures in a row.
(function () {
  var seconds = Number(document.body.getAttribute("data-refresh-s")) || 0;
  var main = document.querySelector("[data-refresh-region]");
  var status = document.getElementById("refresh-state");
  if (!seconds || !main) return;
  var MAX_ROUNDS = Math.round(3600 / seconds), MAX_FAILURES = 5, MAX_DELAY_S = 60;
  var rounds = 0, failures = 0, delay = seconds;

  // The notice of an action is said once: a refresh fetches the page without it.
  var url = new URL(window.location.href);
  if (url.searchParams.has("notice")) {
    url.searchParams.delete("notice");
    url.searchParams.delete("n");
    window.history.replaceState(null, "", url.pathname + url.search);
  }

  function say(text) { if (status) status.textContent = text; }

  function busy() {
    var active = document.activeElement;
    return document.hidden || (active && active !== document.body && main.contains(active) &&
      /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName));
  }

  function schedule() { window.setTimeout(round, delay * 1000); }

  function round() {
    if (busy()) { schedule(); return; }
    rounds += 1;
    fetch(window.location.href, {credentials: "same-origin", cache: "no-store"})
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.text();
      })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html")
          .querySelector("[data-refresh-region]");
        if (fresh) main.innerHTML = fresh.innerHTML;
        failures = 0;
        delay = seconds;
        say("Updated " + new Date().toLocaleTimeString() + ".");
      })
      .catch(function () {
        failures += 1;
        delay = Math.min(delay * 2, MAX_DELAY_S);
        say("Could not refresh (" + failures + "); trying again in " + delay + " s.");
      })
      .then(function () {
        if (failures >= MAX_FAILURES) { say("Auto-refresh stopped: reload the page."); return; }
        if (rounds >= MAX_ROUNDS) { say("Auto-refresh stopped after an hour: reload the page."); return; }
        schedule();
      });
  }
  schedule();
})();
