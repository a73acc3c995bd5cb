// The sidebar, every page's navigation: a drawer on a phone, and the quota line kept true after a
// run writes files.
(function () {
  "use strict";
  const PHONE = window.matchMedia("(max-width: 720px)");

  function toggle() { return document.querySelector(".sidebar-toggle"); }
  function isOpen() { return document.body.classList.contains("sidebar-open"); }

  // What the open drawer covers: the whole page beside it but the toggle (in the chat's head or
  // the bar atop every other page), out of reach of Tab and of screen readers until it closes.
  function behind() {
    const covered = [];
    for (let node = toggle(); node && node.parentElement && !node.classList.contains("page"); node = node.parentElement) {
      covered.push.apply(covered, Array.from(node.parentElement.children).filter(function (other) { return other !== node; }));
    }
    return covered;
  }

  // The drawer opens over the page with a backdrop; the toggle stays above both, as ✕.
  function setOpen(open, returnFocus) {
    const button = toggle();
    document.body.classList.toggle("sidebar-open", open);
    behind().forEach(function (element) { element.inert = open && PHONE.matches; });
    if (!button) return;
    button.setAttribute("aria-expanded", String(open));
    button.querySelector(".glyph").textContent = open ? "✕" : "☰";
    if (open) {
      const first = document.querySelector("#sidebar a, #sidebar input");
      if (first && PHONE.matches) first.focus();
    } else if (returnFocus) {
      button.focus();
    }
  }
  window.loopSidebar = { isOpen: isOpen, close: function () { setOpen(false, true); } };

  document.addEventListener("click", function (event) {
    if (!event.target.closest) return;
    if (event.target.closest(".sidebar-toggle")) {
      setOpen(!isOpen(), false);
    } else if (event.target.closest("#drawer-backdrop")) {
      // The tap closes the drawer and goes no further: nothing beneath it is pressed.
      event.preventDefault();
      event.stopPropagation();
      setOpen(false, true);
    } else if (isOpen() && event.target.closest("#sidebar a[href]:not([download])")) {
      setOpen(false, false); // leaving for another page: it opens there closed
    }
  });
  // Esc closes the open drawer (the chat's shortcuts see it first, and may have closed it).
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape" || event.defaultPrevented || !isOpen()) return;
    event.preventDefault();
    setOpen(false, true);
  });
  // A page brought back from the back/forward cache comes back as it was left: closed.
  window.addEventListener("pageshow", function (event) { if (event.persisted) setOpen(false, false); });
  // Growing past a phone's width, the sidebar is a column again, not an open drawer.
  PHONE.addEventListener("change", function () { if (!PHONE.matches) setOpen(false, false); });

  // "More" is replaced by the page it asked for: the focus it held goes to that page's first
  // conversation, so a keyboard goes on reading the list where it was.
  document.addEventListener("htmx:afterSettle", function () {
    const start = document.querySelector("#conversation-list [data-page-start]");
    if (!start) return;
    start.removeAttribute("data-page-start");
    const first = start.querySelector("a");
    if (first && (!document.activeElement || document.activeElement === document.body)) first.focus();
  });

  // A conversation's menu is asked for once (chat/cards.html#sidebar_item), as soon as the
  // person heads for it: its button focused or pointed at, or the menu opened. By the time Enter
  // opens it and Tab goes in, it is there.
  function wantMenu(event) {
    const menu = event.target.closest && event.target.closest("details.item-menu");
    if (menu && window.htmx) window.htmx.trigger(menu, "menu-wanted");
  }
  document.addEventListener("focusin", wantMenu);
  document.addEventListener("pointerover", wantMenu);
  document.addEventListener("toggle", wantMenu, true); // toggle does not bubble: caught going down

  // When a run ends (its status no longer live) the files it wrote count: ask for the quota again.
  let live = null;
  function liveRuns() { return document.querySelectorAll(".run-status .live").length; }
  function refreshQuotaIfARunEnded() {
    const now = liveRuns();
    const quota = document.getElementById("quota");
    if (live !== null && now < live && quota && window.htmx) {
      window.htmx.ajax("GET", quota.dataset.refresh, { target: "#quota", swap: "outerHTML" });
    }
    live = now;
  }
  document.addEventListener("htmx:wsAfterMessage", refreshQuotaIfARunEnded);
  document.addEventListener("htmx:afterSettle", refreshQuotaIfARunEnded);
  document.addEventListener("DOMContentLoaded", function () { live = liveRuns(); });
})();
