// The Files panel's few behaviours (no inline handlers: the site's CSP forbids them).
(function () {
  "use strict";

  // A form with data-confirm asks first. In the capture phase, so that a refused deletion never
  // reaches htmx's own listener on the form.
  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (form.dataset && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
      event.preventDefault();
      event.stopPropagation();
    }
  }, true);

  // Files dropped on the panel are uploaded as if chosen with the button.
  function uploadForm() { return document.getElementById("upload-form"); }
  function dragging(event) {
    return event.dataTransfer && Array.prototype.indexOf.call(event.dataTransfer.types, "Files") >= 0;
  }
  function highlight(on) {
    const zone = document.getElementById("drop-zone");
    if (zone) zone.classList.toggle("over", on);
  }
  document.addEventListener("dragover", function (event) {
    if (!uploadForm() || !dragging(event)) return;
    event.preventDefault();
    event.dataTransfer.dropEffect = "copy";
    highlight(true);
  });
  document.addEventListener("dragleave", function (event) {
    if (event.target === document.documentElement || event.relatedTarget === null) highlight(false);
  });
  document.addEventListener("drop", function (event) {
    const form = uploadForm();
    if (!form || !dragging(event)) return;
    event.preventDefault();
    highlight(false);
    const input = form.querySelector("input[type=file]");
    input.files = event.dataTransfer.files;
    form.requestSubmit();
  });

  // Choosing files is enough: the upload starts at once.
  document.addEventListener("change", function (event) {
    const input = event.target;
    if (input.matches && input.matches("#upload-form input[type=file]") && input.files.length) {
      input.form.requestSubmit();
    }
  });
})();
