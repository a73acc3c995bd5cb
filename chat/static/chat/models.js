// A suggestion starts the conversation on the model picked in the header, as the task form does
// (the header's select belongs to the task form; the suggestions are a form of their own).
document.addEventListener("submit", function (event) {
  const pick = document.getElementById("model-pick");
  const form = event.target;
  if (!pick || !form.querySelectorAll) return;
  form.querySelectorAll("input[data-model-pick]").forEach(function (input) {
    input.value = pick.value;
  });
});
