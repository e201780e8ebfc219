// The Query page: Ctrl+Enter (Cmd+Enter on a Mac) runs the statement, from the editor too.
// Listening in the capture phase, before the code editor takes the key as its own.
(function () {
  "use strict";
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Enter" || !(event.ctrlKey || event.metaKey)) return;
    var form = event.target.closest && event.target.closest("form[data-run-on-ctrl-enter]");
    if (!form) return;
    event.preventDefault();
    event.stopPropagation();
    form.requestSubmit();
  }, true);
})();
