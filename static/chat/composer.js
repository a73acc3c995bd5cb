// The composer knows when a run is going in the conversation: its button stops the run while
// nothing is typed, and queues what is typed (the server keeps it as the next task). When the
// run ends, the conversation's next task has started: the page fetches its turn.
(function () {
  "use strict";
  const RETRIES = 3; // a queued task refused for now (too many runs going) waits: stop asking
  let followed = { run: null, times: 0 };

  function liveStop() {
    const forms = document.querySelectorAll('#timeline .run-status form[action$="/stop/"]');
    return forms.length ? forms[forms.length - 1] : null;
  }

  function lastRunId() {
    const turns = document.querySelectorAll("#timeline .turn");
    return turns.length ? turns[turns.length - 1].id.replace("run-", "") : "0";
  }

  function followQueue(queue) {
    const last = lastRunId();
    if (followed.run === last && followed.times >= RETRIES) return;
    followed = { run: last, times: followed.run === last ? followed.times + 1 : 1 };
    const delay = followed.times === 1 ? 0 : 1500;
    window.setTimeout(function () {
      if (lastRunId() !== last || liveStop()) return;
      window.htmx.ajax("GET", queue.dataset.tail + "?run=" + last, { target: "#timeline", swap: "beforeend" });
    }, delay);
  }

  function update() {
    const form = document.getElementById("task-form");
    if (!form) return;
    const box = form.querySelector("textarea[name=task]");
    const button = form.querySelector("button.primary");
    const note = document.getElementById("composer-note");
    const going = liveStop() !== null;
    const stopping = going && !box.value.trim();
    form.classList.toggle("going", going);
    if (note) note.hidden = !going;
    button.textContent = stopping ? "Stop" : going ? "Queue" : "Send";
    button.dataset.mode = stopping ? "stop" : "send";
    box.required = !stopping;
    const queue = document.getElementById("queue");
    if (!going && queue && queue.dataset.tail && queue.querySelector("li")) followQueue(queue);
  }

  let scheduled = false;
  function soon() {
    if (scheduled) return;
    scheduled = true;
    window.requestAnimationFrame(function () { scheduled = false; update(); });
  }

  document.addEventListener("click", function (event) {
    const button = event.target.closest && event.target.closest("#task-form button.primary");
    if (!button || button.dataset.mode !== "stop") return;
    event.preventDefault();
    const stop = liveStop();
    if (stop) stop.requestSubmit();
  });
  document.addEventListener("input", function (event) {
    if (event.target.matches && event.target.matches("#task-form textarea")) update();
  });
  ["htmx:afterSettle", "htmx:oobAfterSwap", "htmx:load", "htmx:afterRequest"].forEach(function (name) {
    document.addEventListener(name, soon);
  });
  document.addEventListener("DOMContentLoaded", update);
})();
