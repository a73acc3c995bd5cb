// Edit on a person's own message: opening it puts the cursor at the end of the task, ready to
// change; Cancel or Esc closes it with the task as it was, the focus back on Edit (and Esc there
// stops nothing else: it is heard before the page's shortcuts).
(function () {
  "use strict";
  const EDITOR = ".task-edit details.edit";

  function close(editor) {
    const task = editor.querySelector("textarea");
    task.value = task.defaultValue;
    editor.open = false;
    editor.querySelector("summary").focus();
  }

  // `toggle` does not bubble: heard on its way down.
  document.addEventListener("toggle", function (event) {
    const editor = event.target;
    if (!editor.matches || !editor.matches(EDITOR) || !editor.open) return;
    const task = editor.querySelector("textarea");
    task.focus();
    task.setSelectionRange(task.value.length, task.value.length);
  }, true);

  document.addEventListener("click", function (event) {
    const cancel = event.target.closest && event.target.closest("[data-cancel-edit]");
    if (cancel) close(cancel.closest(EDITOR));
  });

  window.addEventListener("keydown", function (event) {
    if (event.key !== "Escape" || !event.target.closest) return;
    const editor = event.target.closest(EDITOR + "[open]");
    if (!editor) return;
    event.preventDefault();
    event.stopPropagation();
    close(editor);
  }, true);
})();
