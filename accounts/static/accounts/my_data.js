// The "My data" page: deleting the account asks once more before the form is sent (an inline
// onsubmit would break the CSP; without scripts, the required checkbox is the confirmation).
document.addEventListener("submit", function (event) {
  const form = event.target;
  if (form.dataset && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
    event.preventDefault();
  }
});
