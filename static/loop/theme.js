// The theme's choices apply in place: the form posts as it would (the server keeps the choice in
// its cookie and draws every later page in it), and this page switches without a reload, so
// nothing half-typed is lost. Without this script the post reloads the page in the new theme.
(function () {
  "use strict";
  const DARK_MEDIA = { light: "not all", dark: "all", system: "(prefers-color-scheme: dark)" };
  const SCHEME = { light: "light", dark: "dark", system: "light dark" };

  function apply(choice) {
    document.getElementById("dark-theme").media = DARK_MEDIA[choice];
    document.querySelector("meta[name=color-scheme]").content = SCHEME[choice];
    document.querySelectorAll(".theme-choice button[name=theme]").forEach(function (button) {
      button.setAttribute("aria-pressed", String(button.value === choice));
    });
  }

  // What the form would have done: post the choice and come back to this page in it.
  function navigate(form, choice) {
    const chosen = document.createElement("input");
    chosen.type = "hidden";
    chosen.name = "theme";
    chosen.value = choice;
    form.append(chosen);
    form.submit();
  }

  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (!form.classList || !form.classList.contains("theme-choice") || !event.submitter) return;
    event.preventDefault();
    const choice = event.submitter.value;
    // "manual": the redirect back is not followed (its Set-Cookie still counts).
    fetch(form.action, { method: "POST", body: new FormData(form, event.submitter), redirect: "manual", credentials: "same-origin" })
      .then(function (response) {
        if (response.type === "opaqueredirect" || response.ok) apply(choice);
        else navigate(form, choice);
      })
      .catch(function () { navigate(form, choice); });
  });
})();
