// Decisions on tool calls that wait for the person: a refused decision shows its reason in the
// card it came from (htmx leaves a 4xx unswapped by default), and the page title counts the
// calls waiting in every conversation, kept true by the socket for this page's runs and, in a
// tab in the background, by asking now and then.
(function () {
  "use strict";
  const BACKGROUND_ASK_MS = 30000;

  document.addEventListener("htmx:beforeSwap", function (event) {
    const config = event.detail.requestConfig;
    const form = config && config.elt;
    if (form && form.classList && form.classList.contains("decide") && event.detail.xhr.status === 400) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });

  // The chat's sidebar note, or on "Waiting for you" the header's link: each carries the count.
  function retitle() {
    const note = document.getElementById("waiting-count") || document.getElementById("waiting-link");
    if (!note || note.dataset.count === undefined) return;
    const count = Number(note.dataset.count) || 0;
    const title = document.title.replace(/^\(\d+\) /, "");
    document.title = count > 0 ? "(" + count + ") " + title : title;
  }
  document.addEventListener("htmx:oobAfterSwap", retitle);
  document.addEventListener("htmx:afterSwap", retitle);

  setInterval(function () {
    const note = document.getElementById("waiting-count");
    if (note && document.hidden && window.htmx) {
      window.htmx.ajax("GET", note.dataset.url, { target: "#waiting-count", swap: "outerHTML" });
    }
  }, BACKGROUND_ASK_MS);
})();
