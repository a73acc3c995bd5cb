// The chat page's few behaviours; everything else is htmx and server-rendered HTML.
(function () {
  "use strict";
  let socket = null;

  // Ask the socket for a run's events after the last one this page has (its seq marker).
  function watch(marker) {
    if (socket) {
      socket.send(JSON.stringify({ watch: Number(marker.dataset.run), after: Number(marker.dataset.seq) }));
    }
  }
  function watchWithin(element) {
    if (element.matches && element.matches("[data-watch]")) watch(element);
    if (element.querySelectorAll) element.querySelectorAll("[data-watch]").forEach(watch);
  }

  // The header says whether live updates arrive; the server says when they are delayed. Its
  // tooltip, when it has one, says what the page does about it.
  const TOOLTIPS = {
    reconnecting: "The connection to Loop dropped: the page tries again every few seconds and " +
      "catches up on what it missed.",
    closed: "Live updates stopped: reconnect, or reload the page.",
  };
  function socketStatus(state, text) {
    const status = document.getElementById("socket-status");
    if (!status) return;
    status.dataset.state = state;
    status.textContent = text;
    if (TOOLTIPS[state]) status.title = TOOLTIPS[state];
    else status.removeAttribute("title");
  }
  // Closes after which htmx's ws extension reconnects by itself (the others are final, but
  // UNAVAILABLE's).
  const RECONNECTS = [1006, 1011, 1012, 1013];
  // The server's database did not answer (chat/consumers.py's Close.UNAVAILABLE): the page
  // connects again itself.
  const UNAVAILABLE = 4503;
  let unavailable = 0; // such closes since the socket last sent anything
  // The wait before the next try grows with each failed try but never past 5 s: once the server
  // answers again, the page is live within seconds (htmx's own wait grows to a minute).
  // Jittered in its upper half, so that pages a restart dropped do not all come back at once.
  const LONGEST_WAIT_MS = 5000;
  function nextTry(tries) {
    const ceiling = Math.min(1000 * Math.pow(2, tries), LONGEST_WAIT_MS);
    return ceiling / 2 + Math.random() * ceiling / 2;
  }
  window.htmx.config.wsReconnectDelay = nextTry;

  // The socket the page listens to: the newest one made. "Reconnect now" makes one while htmx's
  // own try may still be pending, so an older socket may open or close later: it says nothing.
  let newest = null;
  let wrapper = null; // htmx's handle on the socket, to reconnect with
  const makeSocket = window.htmx.createWebSocket;
  window.htmx.createWebSocket = function (url) {
    newest = makeSocket(url);
    return newest;
  };
  function reconnectNow() {
    if (wrapper) wrapper.reconnect();
  }

  document.addEventListener("htmx:wsOpen", function (event) {
    if (event.detail.event.target !== newest) {
      event.detail.event.target.close(); // a newer socket took its place
      return;
    }
    socket = wrapper = event.detail.socketWrapper;
    socketStatus("live", "● live");
    watchWithin(document.body); // on every (re)connect: replay what was missed, then live
  });

  // A frame of a run's events says, in its seq marker, the seq it follows. A turn a response
  // drew anew (a Continue's) shows the run as it was then, which may be less than the socket
  // sent into the turn it replaced: until the page's ask from the seq the new turn shows is
  // answered, a frame that follows more than the turn has is left out, or its cards would land
  // after a gap that the answer fills later, out of order. The answer brings it again. A
  // streamed reply's card still goes (its stored reply comes with the answer too).
  const FRAME_MARKER =
    /id="run-(\d+)-seq" data-run="\d+" data-seq="\d+"(?: data-watch)? data-after="(\d+)"/;
  let leftOut = false; // the frame being swapped in is left out
  document.addEventListener("htmx:wsBeforeMessage", function (event) {
    const frame = FRAME_MARKER.exec(event.detail.message);
    const marker = frame && document.getElementById("run-" + frame[1] + "-seq");
    leftOut = Boolean(marker) && Number(frame[2]) > Number(marker.dataset.seq);
  });
  function streamed(element) {
    return Boolean(element.id) && element.id.startsWith("stream-");
  }
  document.addEventListener("htmx:wsAfterMessage", function () {
    unavailable = 0;
    leftOut = false;
  });
  document.addEventListener("htmx:wsClose", function (event) {
    if (event.detail.event.target !== newest) return;
    socket = null;
    wrapper = event.detail.socketWrapper;
    const code = event.detail.event.code;
    const status = document.getElementById("socket-status");
    if (code === UNAVAILABLE) {
      setTimeout(function () { if (!socket) reconnectNow(); }, nextTry(unavailable)); // unless "Reconnect now" did
      unavailable += 1;
    }
    // A socket the server closed has just said why, in the header: keep its words.
    if (code === UNAVAILABLE || RECONNECTS.indexOf(code) >= 0) socketStatus("reconnecting", "◌ reconnecting…");
    else if (status && status.dataset.state !== "closed") socketStatus("closed", "■ not live: reload the page");
  });
  document.addEventListener("click", function (event) {
    if (event.target.closest && event.target.closest("#reconnect-now")) reconnectNow();
  });
  document.addEventListener("htmx:load", function (event) {
    // A turn added by sending a task (not one swapped in by the socket, already watched).
    if (event.target.classList && event.target.classList.contains("turn")) watchWithin(event.target);
  });

  // Enter sends, Shift+Enter makes a new line.
  document.addEventListener("keydown", function (event) {
    const box = event.target;
    if (box.matches && box.matches("textarea[name=task]") && event.key === "Enter" &&
        !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      if (box.value.trim()) box.form.requestSubmit();
    }
  });

  // Sending a task. The box is emptied as the request leaves, and only if it still holds what
  // is sent: what the person types meanwhile stays. A task sent while another is on its way
  // waits here, in order, and follows it (the server then queues it behind the run the first
  // started). A refused send gives its text back to an empty box.
  let sending = null; // the task on its way, if one is
  const held = []; // tasks sent meanwhile, oldest first
  function taskBox() { return document.querySelector("#task-form textarea[name=task]"); }
  function isTaskSend(event) {
    return Boolean(event.detail.elt.closest && event.detail.elt.closest("#task-form"));
  }
  function setBox(box, text) {
    box.value = text;
    box.dispatchEvent(new Event("input", { bubbles: true })); // the composer's button follows
  }
  // A send went through: an earlier refusal no longer holds, and the new turn is in view.
  function sent() {
    document.getElementById("send-error").textContent = "";
    const suggestions = document.getElementById("suggestions");
    if (suggestions) suggestions.remove();
    const timeline = document.getElementById("timeline");
    timeline.scrollTop = timeline.scrollHeight;
  }
  // A held task is posted from the box with its own text: the form as it is now is another.
  function sendHeld() {
    const form = document.getElementById("task-form");
    window.htmx.ajax("POST", form.getAttribute("hx-post"), {
      source: taskBox(), target: "#timeline", swap: "beforeend", values: { task: held.shift() },
    });
  }
  document.addEventListener("htmx:confirm", function (event) {
    if (event.detail.elt.id !== "task-form" || sending === null) return;
    event.preventDefault();
    const box = taskBox();
    held.push(box.value);
    setBox(box, "");
  });
  document.addEventListener("htmx:beforeRequest", function (event) {
    if (isTaskSend(event)) sending = event.detail.requestConfig.formData.get("task");
  });
  document.addEventListener("htmx:beforeSend", function (event) {
    const box = taskBox();
    if (event.detail.elt.id === "task-form" && box.value === sending) setBox(box, "");
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    const form = event.detail.elt;
    if (isTaskSend(event)) {
      const refused = !event.detail.successful || event.detail.xhr.getResponseHeader("HX-Retarget");
      const box = taskBox();
      if (refused && !box.value) setBox(box, sending);
      if (!refused) sent();
      sending = null;
      if (held.length) sendHeld();
    }
    // A run that goes on again: an earlier refusal no longer holds.
    if (form.classList.contains("continue-form") && event.detail.successful &&
        !event.detail.xhr.getResponseHeader("HX-Retarget")) {
      document.getElementById("send-error").textContent = "";
    }
  });

  // Keep the newest step in view, unless the person has scrolled up to read.
  let pinned = true;
  document.addEventListener("scroll", function (event) {
    const timeline = event.target;
    if (timeline.id === "timeline") {
      pinned = timeline.scrollHeight - timeline.scrollTop - timeline.clientHeight < 40;
    }
  }, true);
  // A call's result replaces its "running" card; a call that never started (skipped, or denied
  // by its person) has none to replace: its card goes at the end of its run's steps instead.
  document.addEventListener("htmx:oobErrorNoTarget", function (event) {
    if (leftOut) return;
    const card = event.detail.content;
    const steps = card && card.dataset && card.dataset.run &&
      document.getElementById("run-" + card.dataset.run + "-steps");
    // A card the page already shows (drawn by a response that raced the socket) is not added
    // twice.
    if (!steps || (card.id && document.getElementById(card.id))) return;
    card.removeAttribute("hx-swap-oob");
    steps.appendChild(card);
    window.htmx.process(card);
  });
  // The socket sends a run's events after the seq the page says it has; a card it sent as a
  // response redrew the turn (a Continue's, which may already show it) is not added twice.
  document.addEventListener("htmx:oobBeforeSwap", function (event) {
    const target = event.detail.target;
    if (leftOut && !streamed(target)) {
      event.preventDefault();
      return;
    }
    // A seq marker never goes back: the page has every event up to the seq it shows (a
    // response may have drawn more than the socket had sent when it sent this).
    const marker = event.detail.fragment && event.detail.fragment.firstElementChild;
    if (target.classList.contains("seq") && marker &&
        Number(marker.dataset.seq) < Number(target.dataset.seq)) {
      event.preventDefault();
      return;
    }
    const steps = event.detail.fragment;
    if (!steps || !target.classList.contains("steps")) return;
    Array.from(steps.children).forEach(function (card) {
      if (card.id && document.getElementById(card.id)) card.remove();
    });
  });
  document.addEventListener("htmx:oobAfterSwap", function () {
    const timeline = document.getElementById("timeline");
    if (timeline && pinned) timeline.scrollTop = timeline.scrollHeight;
  });

  document.addEventListener("DOMContentLoaded", function () {
    const timeline = document.getElementById("timeline");
    if (timeline) timeline.scrollTop = timeline.scrollHeight;
  });
})();

// A form with data-confirm asks before it is sent (an inline onsubmit would break the CSP).
document.addEventListener("submit", function (event) {
  const form = event.target;
  if (form.dataset && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
    event.preventDefault();
  }
});

// A task posted as a page load (the new conversation's composer, its suggestions: no htmx there)
// is sent once: a second Enter or click while the first is on its way does nothing, and the
// text stays in the box. The buttons are disabled after the form's data is taken (a suggestion's
// button carries its task); a page brought back by Back is sendable again.
(function () {
  "use strict";
  const ONCE = "#task-form:not([hx-post]), #suggestions form";
  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (event.defaultPrevented || !form.matches || !form.matches(ONCE)) return;
    if (form.dataset.sending) {
      event.preventDefault();
      return;
    }
    form.dataset.sending = "1";
    window.setTimeout(function () {
      form.querySelectorAll("button[type=submit]").forEach(function (button) { button.disabled = true; });
    }, 0);
  });
  window.addEventListener("pageshow", function (event) {
    if (!event.persisted) return;
    document.querySelectorAll(ONCE).forEach(function (form) {
      delete form.dataset.sending;
      form.querySelectorAll("button[type=submit]").forEach(function (button) { button.disabled = false; });
    });
  });
})();
