// The Share dialog (sharing/templates/sharing/share_action.html): focus moves into it as it
// opens and onto the new link once made; the link's Copy button. A static file, as the CSP
// allows no inline script. Without scripts the dialog still opens (a popover) and its form
// posts to a page of its own.
(function () {
  "use strict";

  function said(text) {
    const status = document.getElementById("share-copy-said");
    if (status) status.textContent = text;
  }

  document.addEventListener("toggle", function (event) {
    const dialog = event.target;
    if (!dialog.id || dialog.id !== "share-dialog" || event.newState !== "open") return;
    const first = dialog.querySelector("input[name=audience]:checked, input[name=audience]");
    if (first) first.focus();
  }, true);

  document.addEventListener("htmx:afterSwap", function (event) {
    if (!event.target || event.target.id !== "share-result") return;
    event.target.querySelectorAll("button[data-share-copy]").forEach(function (button) {
      if (navigator.clipboard) button.hidden = false;
    });
    const field = document.getElementById("share-link-url");
    const alert = event.target.querySelector("[role=alert]");
    if (field) {
      field.focus();
    } else if (alert) {
      alert.setAttribute("tabindex", "-1");
      alert.focus();
    }
  });

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("button[data-share-copy]").forEach(function (button) {
      if (navigator.clipboard) button.hidden = false;
    });
  });

  document.addEventListener("focusin", function (event) {
    if (event.target.id === "share-link-url") event.target.select();
  });

  document.addEventListener("click", function (event) {
    const button = event.target.closest && event.target.closest("button[data-share-copy]");
    if (!button) return;
    const field = document.getElementById(button.dataset.shareCopy);
    if (!field) return;
    field.select();
    navigator.clipboard.writeText(field.value).then(
      function () { said("Copied the link."); },
      function () { said("Could not copy: select the link and copy it by hand."); }
    );
  });
})();
