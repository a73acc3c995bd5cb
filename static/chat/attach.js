// Attach in the composer: files chosen with its button, dropped on the page or pasted
// into the task go to the person's workspace through the Files panel's own upload (the same
// rules, limits and quota), and the task, when sent, names them. A name taken keeps both, and the
// task names the copy the upload stored.
(function () {
  "use strict";
  const attached = []; // the workspace paths to name in the next task

  function composer() { return document.getElementById("task-form"); }
  function list() { return document.getElementById("attachments"); }
  function say(text) {
    const error = document.getElementById("send-error");
    if (error) error.textContent = text;
  }
  function hasFiles(transfer) {
    return transfer && Array.prototype.indexOf.call(transfer.types, "Files") >= 0;
  }

  function show() {
    const shown = list();
    shown.replaceChildren();
    attached.forEach(function (path) {
      const item = document.createElement("li");
      item.className = "attachment";
      const name = document.createElement("span");
      name.textContent = path;
      const remove = document.createElement("button");
      remove.type = "button";
      remove.className = "link";
      remove.dataset.detach = path;
      remove.textContent = "×";
      remove.setAttribute("aria-label", "Do not name " + path + " in the task (it stays in your files)");
      item.append(name, remove);
      shown.appendChild(item);
    });
    shown.hidden = attached.length === 0;
  }

  function upload(files) {
    const form = composer();
    if (!form || !files.length) return;
    const body = new FormData();
    Array.prototype.forEach.call(files, function (file) { body.append("file", file, file.name); });
    body.append("on_clash", "keep");
    const token = form.querySelector("input[name=csrfmiddlewaretoken]").value;
    const button = document.getElementById("attach-label");
    button.setAttribute("aria-busy", "true");
    fetch(form.dataset.upload, {
      method: "POST",
      body: body,
      credentials: "same-origin",
      headers: { "Accept": "application/json", "X-CSRFToken": token },
    }).then(function (response) {
      return response.json().catch(function () {
        return { stored: [], refused: ["The upload failed (" + response.status + "): try again."] };
      });
    }).then(function (answer) {
      (answer.stored || []).forEach(function (path) {
        if (attached.indexOf(path) < 0) attached.push(path);
      });
      show();
      say((answer.refused || []).join(" "));
    }, function () {
      say("The upload did not reach Loop: check the connection and try again.");
    }).finally(function () { button.removeAttribute("aria-busy"); });
  }

  document.addEventListener("change", function (event) {
    const input = event.target;
    if (input.id === "attach-file" && input.files.length) {
      upload(input.files);
      input.value = "";
    }
  });

  document.addEventListener("click", function (event) {
    const remove = event.target.closest && event.target.closest("[data-detach]");
    if (!remove) return;
    attached.splice(attached.indexOf(remove.dataset.detach), 1);
    show();
    document.getElementById("task").focus();
  });

  // Dropped anywhere on the page (a file dropped where nothing takes it would replace the page).
  function zone(event) {
    return composer() && hasFiles(event.dataTransfer);
  }
  document.addEventListener("dragover", function (event) {
    if (!zone(event)) return;
    event.preventDefault();
    event.dataTransfer.dropEffect = "copy";
    composer().classList.add("dropping");
  });
  document.addEventListener("dragleave", function (event) {
    if (composer() && event.relatedTarget === null) composer().classList.remove("dropping");
  });
  document.addEventListener("drop", function (event) {
    if (!zone(event)) return;
    event.preventDefault();
    composer().classList.remove("dropping");
    upload(event.dataTransfer.files);
  });

  // Pasted into the task: a file (a screenshot, say) is attached; text pastes as ever.
  document.addEventListener("paste", function (event) {
    const box = event.target;
    const files = event.clipboardData && event.clipboardData.files;
    if (box.id === "task" && files && files.length) {
      event.preventDefault();
      upload(files);
    }
  });

  // Sending names the attached files at the end of the task. In the capture phase: before htmx
  // reads the form.
  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (form.id !== "task-form" || !attached.length) return;
    const task = form.querySelector("textarea[name=task]");
    task.value = task.value.replace(/\s+$/, "") + "\n\nAttached: " + attached.join(", ");
    attached.length = 0;
    show();
  }, true);
})();
