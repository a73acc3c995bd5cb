// Keyboard shortcuts of the chat page, listed in its "?" popover: a new conversation, search,
// Stop (Esc while a run goes), and the list itself. Typing in a field is never taken over,
// except by the shortcuts that hold Ctrl (or ⌘) and by Esc.
(function () {
  "use strict";

  function typing(target) {
    return target.closest && target.closest("input, textarea, select, [contenteditable=true]");
  }
  function withCtrl(event) { return (event.ctrlKey || event.metaKey) && !event.altKey; }

  function focusSearch() {
    const search = document.getElementById("conversation-search");
    if (!search) return false;
    if (window.matchMedia("(max-width: 720px)").matches && !window.loopSidebar.isOpen()) {
      document.querySelector(".sidebar-toggle").click();
    }
    search.focus();
    search.select();
    return true;
  }

  // The newest run still going: its Stop button.
  function stopButton() {
    const buttons = document.querySelectorAll(".run-status button.stop");
    return buttons.length ? buttons[buttons.length - 1] : null;
  }

  // Esc closes what is open over the page first (the help, a menu, the drawer); else stops.
  function escape() {
    const help = document.getElementById("shortcuts");
    if (help && help.matches(":popover-open")) { help.hidePopover(); return true; }
    const menu = document.querySelector("details.menu[open]");
    if (menu) { menu.open = false; menu.querySelector("summary").focus(); return true; }
    if (window.loopSidebar && window.loopSidebar.isOpen()) { window.loopSidebar.close(); return true; }
    const stop = stopButton();
    if (stop) { stop.click(); return true; }
    return false;
  }

  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || event.isComposing) return;
    const key = event.key;
    let done = false;
    if (key === "Escape") {
      done = escape();
    } else if (withCtrl(event) && event.shiftKey && key.toLowerCase() === "o") {
      document.getElementById("new-conversation").click();
      done = true;
    } else if (withCtrl(event) && !event.shiftKey && key.toLowerCase() === "k") {
      done = focusSearch();
    } else if (!typing(event.target) && !event.ctrlKey && !event.metaKey && !event.altKey) {
      if (key === "/") done = focusSearch();
      else if (key === "?") {
        const help = document.getElementById("shortcuts");
        if (help) { help.togglePopover(); done = true; }
      }
    }
    if (done) event.preventDefault();
  });
})();
