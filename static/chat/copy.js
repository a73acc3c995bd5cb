// Copy buttons: one on every answer (its Markdown, as the model wrote it, so a list's numbers and
// a code block's fence survive a paste; its drawn HTML beside it for editors that take rich
// text) and one on every code block (its code, exactly); and a scroller around every table.
// Added here rather than drawn by the server, so answers and previews, however they arrive (the
// page, a send, the socket), get them the same way. No inline handler: the CSP.
(function () {
  "use strict";
  const ANSWERS = ".card.answer";
  const CODE_BLOCKS = ".prose pre, .preview pre";

  function button(label, what) {
    const copy = document.createElement("button");
    copy.type = "button";
    copy.className = "copy";
    copy.dataset.copy = what;
    copy.dataset.label = label;
    // Its word is drawn by the CSS (::after), so an answer's text, copied, holds none of them.
    copy.setAttribute("aria-label", label);
    return copy;
  }

  // A wide table scrolls on its own rather than widening the card (a table whose display is
  // changed instead loses its table semantics in some screen readers).
  function scrolling(table) {
    if (table.parentElement.classList.contains("table-scroll")) return;
    const frame = document.createElement("div");
    frame.className = "table-scroll";
    table.parentElement.insertBefore(frame, table);
    frame.appendChild(table);
  }

  function equip(root) {
    if (!root.querySelectorAll) return;
    root.querySelectorAll(".prose table").forEach(scrolling);
    const answers = Array.from(root.querySelectorAll(ANSWERS));
    if (root.matches && root.matches(ANSWERS)) answers.push(root);
    answers.forEach(function (answer) {
      const header = answer.querySelector("header");
      if (header && answer.querySelector(".prose") && !header.querySelector("button.copy")) {
        header.appendChild(button("Copy answer", "answer"));
      }
    });
    const blocks = Array.from(root.querySelectorAll(CODE_BLOCKS));
    if (root.matches && root.matches(CODE_BLOCKS)) blocks.push(root);
    blocks.forEach(function (block) {
      if (block.parentElement.classList.contains("code-block")) return;
      const frame = document.createElement("div");
      frame.className = "code-block";
      block.parentElement.insertBefore(frame, block);
      frame.appendChild(block);
      frame.appendChild(button("Copy code", "code"));
    });
  }

  function copied(copy, state) {
    copy.dataset.state = state;
    copy.setAttribute("aria-label", state === "done" ? "Copied" : "Copy failed");
    window.setTimeout(function () {
      delete copy.dataset.state;
      copy.setAttribute("aria-label", copy.dataset.label);
    }, 2000);
  }

  // The answer's drawn HTML without the buttons this script added to it.
  function drawn(prose) {
    const copy = prose.cloneNode(true);
    copy.querySelectorAll("button.copy").forEach(function (button) { button.remove(); });
    return copy.innerHTML;
  }

  function write(text, html) {
    if (html === undefined || !window.ClipboardItem) return navigator.clipboard.writeText(text);
    return navigator.clipboard.write([new ClipboardItem({
      "text/plain": new Blob([text], { type: "text/plain" }),
      "text/html": new Blob([html], { type: "text/html" }),
    })]);
  }

  document.addEventListener("click", function (event) {
    const copy = event.target.closest && event.target.closest("button.copy");
    if (!copy) return;
    let written;
    if (copy.dataset.copy === "code") {
      written = write(copy.parentElement.querySelector("pre").textContent.replace(/\n$/, ""));
    } else {
      const prose = copy.closest(ANSWERS).querySelector(".prose");
      const source = prose.dataset.markdown !== undefined ? prose.dataset.markdown : prose.innerText;
      written = write(source.replace(/\n$/, ""), drawn(prose));
    }
    written.then(
      function () { copied(copy, "done"); },
      function () { copied(copy, "failed"); }
    );
  });

  // Cards arrive after the page: by a send, and over the socket.
  new MutationObserver(function (mutations) {
    mutations.forEach(function (mutation) {
      mutation.addedNodes.forEach(function (node) { if (node.nodeType === 1) equip(node); });
    });
  }).observe(document.documentElement, { childList: true, subtree: true });
  document.addEventListener("DOMContentLoaded", function () { equip(document); });
})();
