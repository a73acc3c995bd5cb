// The new conversation's assistant: the picker (a select, which works without script), its chip
// (removable before the first send), and the "/" shortcut: "/" typed first in the empty task
// box opens a combobox listing the person's assistants, filtered as they type; arrow keys move,
// Enter chooses, Escape closes, and focus goes back to the task box. Picking an assistant that
// names a model picks that model too, when the page offers it.
(function () {
  "use strict";

  function byId(id) { return document.getElementById(id); }

  function visibleOptions() {
    return Array.from(byId("assistant-options").querySelectorAll("li[role=option]")).filter(function (li) { return !li.hidden; });
  }

  function choose(id) {
    const select = byId("assistant-pick");
    select.value = id;
    select.dispatchEvent(new Event("change", { bubbles: true }));
  }

  function shown() {
    const select = byId("assistant-pick");
    const option = select.selectedOptions[0];
    const picked = option && option.value ? option : null;
    byId("assistant-chip").hidden = !picked;
    byId("assistant-chip-name").textContent = picked ? option.textContent : "";
    document.querySelectorAll("[data-assistant-pick]").forEach(function (input) { input.value = picked ? option.value : ""; });
    const model = picked && option.dataset.model;
    const models = byId("model-pick");
    if (model && models && Array.from(models.options).some(function (o) { return o.value === model; })) {
      models.value = model;
      models.dispatchEvent(new Event("change", { bubbles: true }));
    }
  }

  function activate(li) {
    visibleOptions().forEach(function (other) { other.setAttribute("aria-selected", other === li ? "true" : "false"); });
    const input = byId("assistant-filter");
    if (li) { input.setAttribute("aria-activedescendant", li.id); li.scrollIntoView({ block: "nearest" }); }
    else input.removeAttribute("aria-activedescendant");
  }

  function filter() {
    const words = byId("assistant-filter").value.replace(/^\//, "").trim().toLowerCase();
    byId("assistant-options").querySelectorAll("li[role=option]").forEach(function (li) {
      li.hidden = !li.dataset.name.toLowerCase().includes(words);
    });
    const options = visibleOptions();
    byId("assistant-none-found").hidden = options.length > 0;
    activate(options[0] || null);
  }

  function open() {
    const slash = byId("assistant-slash");
    const input = byId("assistant-filter");
    slash.hidden = false;
    input.value = "";
    input.setAttribute("aria-expanded", "true");
    filter();
    input.focus();
  }

  function close() {
    byId("assistant-slash").hidden = true;
    byId("assistant-filter").setAttribute("aria-expanded", "false");
    const task = byId("task");
    if (task) task.focus();
  }

  function move(step) {
    const options = visibleOptions();
    if (!options.length) return;
    const at = options.findIndex(function (li) { return li.getAttribute("aria-selected") === "true"; });
    activate(options[(at + step + options.length) % options.length]);
  }

  function onFilterKey(event) {
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      move(event.key === "ArrowDown" ? 1 : -1);
    } else if (event.key === "Enter") {
      const active = visibleOptions().find(function (li) { return li.getAttribute("aria-selected") === "true"; });
      if (active) choose(active.dataset.id);
      close();
    } else if (event.key === "Escape") {
      close();
    } else {
      return;
    }
    event.preventDefault();
    event.stopPropagation();
  }

  function setUp() {
    const select = byId("assistant-pick");
    if (!select) return;
    select.addEventListener("change", shown);
    byId("assistant-chip-remove").addEventListener("click", function () { choose(""); byId("task").focus(); });
    const input = byId("assistant-filter");
    input.addEventListener("input", filter);
    input.addEventListener("keydown", onFilterKey);
    input.addEventListener("blur", function () {
      window.setTimeout(function () { if (!byId("assistant-slash").contains(document.activeElement)) byId("assistant-slash").hidden = true; }, 150);
    });
    byId("assistant-options").addEventListener("mousedown", function (event) {
      const li = event.target.closest("li[role=option]");
      if (!li) return;
      event.preventDefault();
      choose(li.dataset.id);
      close();
    });
    const task = byId("task");
    task.addEventListener("keydown", function (event) {
      if (event.key !== "/" || task.value !== "" || event.ctrlKey || event.metaKey || event.altKey) return;
      event.preventDefault();
      open();
    });
    shown();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", setUp);
  else setUp();
})();
