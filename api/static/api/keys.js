// The API keys page: the new key's Copy button (a static file, as the CSP allows no inline
// script). Without scripts the button stays hidden and the key's readonly field is selected
// and copied by hand; focusing the field selects the whole key either way.
(function () {
  "use strict";

  function said(text) {
    const status = document.getElementById("copy-said");
    if (status) status.textContent = text;
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("button[data-copy-from]").forEach(function (button) {
      if (navigator.clipboard) button.hidden = false;
    });
  });

  document.addEventListener("focusin", function (event) {
    if (event.target.classList && event.target.classList.contains("secret-value")) {
      event.target.select();
    }
  });

  document.addEventListener("click", function (event) {
    const button = event.target.closest && event.target.closest("button[data-copy-from]");
    if (!button) return;
    const field = document.getElementById(button.dataset.copyFrom);
    if (!field) return;
    field.select();
    navigator.clipboard.writeText(field.value).then(
      function () { said("Copied the key."); },
      function () { said("Could not copy: select the key and copy it by hand."); }
    );
  });
})();
