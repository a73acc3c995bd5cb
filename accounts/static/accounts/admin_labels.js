// Django's two-list picker (groups, permissions) puts a magnifier icon with an aria-label on a
// bare <span>, where ARIA does not allow one (axe: aria-prohibited-attr): as an image, it may
// carry its label. The picker builds its icons on window load, after this file has run: each is
// given its role as it is added (a mutation observer's callback runs before load's end).
(function () {
  "use strict";
  function labelIcons(root) {
    if (!root.querySelectorAll) return;
    if (root.matches(".search-label-icon[aria-label]")) root.setAttribute("role", "img");
    root.querySelectorAll(".search-label-icon[aria-label]").forEach(function (icon) {
      icon.setAttribute("role", "img");
    });
  }
  new MutationObserver(function (mutations) {
    mutations.forEach(function (mutation) { mutation.addedNodes.forEach(labelIcons); });
  }).observe(document.documentElement, { childList: true, subtree: true });
})();
